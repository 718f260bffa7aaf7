"""Usage of the model: calls and tokens per sender, UTC day and chat, summed for budgets,
reports and the web page's charts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple
from typing import Any, Protocol

from storage.dialect import Database
from storage.models import UsageRow, UsageTotals

NO_LIMIT = 2**62  # LIMIT NULL means none to PostgreSQL but is an error to SQLite
_COUNTS = ("calls", "prompt_tokens", "cached_tokens", "completion_tokens", "estimated_calls")
_SUMS = ", ".join(f"COALESCE(SUM({count}), 0)" for count in _COUNTS)
_ADD = (
    f"INSERT INTO usage (platform, sender, day, group_key, {', '.join(_COUNTS)}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, sender, day, group_key) DO UPDATE "
    f"SET {', '.join(f'{count} = usage.{count} + excluded.{count}' for count in _COUNTS)}"
)


def _totals(row: Sequence[Any]) -> UsageTotals:
    return UsageTotals(*(int(value) for value in row))


class UsageStore(Protocol):
    """Model usage rows and their sums."""

    _db: Database

    async def add_usage(
        self, *, platform: str, sender: str, day: str, group_key: str, usage: UsageTotals
    ) -> None:
        """Add one call's usage to its sender's row for that UTC day and chat ('' for DMs)."""
        await self._db.execute(_ADD, *(platform, sender, day, group_key), *astuple(usage))

    async def sender_usage(
        self, platform: str, sender: str, first_day: str, last_day: str
    ) -> UsageTotals:
        """A sender's usage across all chats, over the UTC days first_day..last_day."""
        return await self._sum(
            "platform = ? AND sender = ? AND day BETWEEN ? AND ?",
            *(platform, sender, first_day, last_day),
        )

    async def group_usage(self, group_key: str, first_day: str, last_day: str) -> UsageTotals:
        """A group's usage, all its members together, over the UTC days first_day..last_day."""
        return await self._sum(
            "group_key = ? AND day BETWEEN ? AND ?", group_key, first_day, last_day
        )

    async def _sum(self, where: str, *args: Any) -> UsageTotals:
        row = await self._db.fetchrow(f"SELECT {_SUMS} FROM usage WHERE {where}", *args)
        return _totals(row or ())

    async def usage_report(
        self, first_day: str, limit: int | None = None
    ) -> tuple[list[UsageRow], list[UsageRow]]:
        """Per sender (across chats) and per group, usage since first_day, most tokens first;
        at most limit of each (None: all)."""
        report = []
        for key, where, order in (
            ("sender", "", "platform, sender"),
            ("group_key", "AND group_key != '' ", "group_key"),
        ):
            rows = await self._db.fetch(
                f"SELECT platform, {key}, {_SUMS} FROM usage WHERE day >= ? {where}"
                f"GROUP BY platform, {key} "
                f"ORDER BY SUM(prompt_tokens + completion_tokens) DESC, {order} LIMIT ?",
                *(first_day, NO_LIMIT if limit is None else limit),
            )
            report.append([UsageRow(row[0], row[1], _totals(row[2:])) for row in rows])
        return report[0], report[1]

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
            f"SELECT day, {_SUMS} FROM usage WHERE {where} GROUP BY day ORDER BY day", *args
        )
        return [(row[0], _totals(row[1:])) for row in rows]
