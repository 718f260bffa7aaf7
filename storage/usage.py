"""Usage of the model: calls and tokens per sender, UTC day and chat, summed for budgets,
reports and the web page's charts."""

from __future__ import annotations

from typing import Protocol

from storage.dialect import Database
from storage.models import UsageRow, UsageTotals
from storage.rows import USAGE_SUMS, totals

NO_LIMIT = 2**62  # LIMIT NULL means none to PostgreSQL but is an error to SQLite


class UsageStore(Protocol):
    """Model usage rows and their sums."""

    _db: Database

    async def add_usage(
        self, *, platform: str, sender: str, day: str, group_key: str, usage: UsageTotals
    ) -> None:
        """Add one call's usage to its sender's row for that UTC day and chat ('' for DMs)."""
        await self._db.execute(
            "INSERT INTO usage (platform, sender, day, group_key, calls, prompt_tokens, "
            "cached_tokens, completion_tokens, estimated_calls) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (platform, sender, day, group_key) DO UPDATE SET "
            "calls = usage.calls + excluded.calls, "
            "prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, "
            "cached_tokens = usage.cached_tokens + excluded.cached_tokens, "
            "completion_tokens = usage.completion_tokens + excluded.completion_tokens, "
            "estimated_calls = usage.estimated_calls + excluded.estimated_calls",
            platform,
            sender,
            day,
            group_key,
            usage.calls,
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            usage.estimated_calls,
        )

    async def sender_usage(
        self, platform: str, sender: str, first_day: str, last_day: str
    ) -> UsageTotals:
        """A sender's usage across all chats, over the UTC days first_day..last_day."""
        row = await self._db.fetchrow(
            f"SELECT {USAGE_SUMS} FROM usage WHERE platform = ? AND sender = ? "
            "AND day BETWEEN ? AND ?",
            platform,
            sender,
            first_day,
            last_day,
        )
        return totals(row or ())

    async def group_usage(self, group_key: str, first_day: str, last_day: str) -> UsageTotals:
        """A group's usage, all its members together, over the UTC days first_day..last_day."""
        row = await self._db.fetchrow(
            f"SELECT {USAGE_SUMS} FROM usage WHERE group_key = ? AND day BETWEEN ? AND ?",
            group_key,
            first_day,
            last_day,
        )
        return totals(row or ())

    async def usage_report(
        self, first_day: str, limit: int | None = None
    ) -> tuple[list[UsageRow], list[UsageRow]]:
        """Per sender (across chats) and per group, usage since first_day, most tokens first;
        at most limit of each (None: all)."""
        users = await self._db.fetch(
            f"SELECT platform, sender, {USAGE_SUMS} FROM usage WHERE day >= ? "
            "GROUP BY platform, sender ORDER BY SUM(prompt_tokens + completion_tokens) DESC, "
            "platform, sender LIMIT ?",
            first_day,
            NO_LIMIT if limit is None else limit,
        )
        groups = await self._db.fetch(
            f"SELECT platform, group_key, {USAGE_SUMS} FROM usage WHERE day >= ? "
            "AND group_key != '' GROUP BY platform, group_key "
            "ORDER BY SUM(prompt_tokens + completion_tokens) DESC, group_key LIMIT ?",
            first_day,
            NO_LIMIT if limit is None else limit,
        )
        return (
            [UsageRow(r[0], r[1], totals(r[2:])) for r in users],
            [UsageRow(r[0], r[1], totals(r[2:])) for r in groups],
        )

    async def usage_days(
        self, first_day: str, *, sender: tuple[str, str] | None = None, group_key: str = ""
    ) -> list[tuple[str, UsageTotals]]:
        """Usage per UTC day since first_day, oldest first: of one sender (platform, id), of
        one group, or of everyone. Each case reads its own index."""
        if sender is not None:
            where, args = "platform = ? AND sender = ? AND day >= ?", [*sender, first_day]
        elif group_key:
            where, args = "group_key = ? AND day >= ?", [group_key, first_day]
        else:
            where, args = "day >= ?", [first_day]
        rows = await self._db.fetch(
            f"SELECT day, {USAGE_SUMS} FROM usage WHERE {where} GROUP BY day ORDER BY day", *args
        )
        return [(row[0], totals(row[1:])) for row in rows]
