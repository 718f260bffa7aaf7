"""Usage of the model: calls, tokens and cost per sender, UTC day, chat and model, summed for
reports and the web page's charts; and the budgets, each call held against them while it is in
flight.

A hold's created_at is when it was made or last renewed: the call's process was alive then. A
streamed call renews it as chunks arrive, so only the holds of a process that died grow old.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple
from datetime import datetime
from typing import Any, Protocol

from storage import usage_sums
from storage.dialect import Database, Step
from storage.errors import BudgetSpent
from storage.models import Budget, Hold, UsageRow, UsageTotals
from storage.rows import ts
from storage.usage_sums import COUNTS, SUMS, totals

NO_LIMIT = 2**62  # LIMIT NULL means none to PostgreSQL but is an error to SQLite
_ADD = Step(
    f"INSERT INTO usage (platform, sender, day, group_key, model, {', '.join(COUNTS)}) "
    f"VALUES ({', '.join('?' * (5 + len(COUNTS)))}) "
    "ON CONFLICT (platform, sender, day, group_key, model) DO UPDATE "
    f"SET {', '.join(f'{count} = usage.{count} + excluded.{count}' for count in COUNTS)}"
)
# The part of usage that compaction takes (summaries and pin suggestions), kept beside it.
_ADD_COMPACTION = (
    f"INSERT INTO usage_compaction (platform, sender, day, group_key, {', '.join(COUNTS)}) "
    f"VALUES ({', '.join('?' * (4 + len(COUNTS)))}) "
    "ON CONFLICT (platform, sender, day, group_key) DO UPDATE SET "
    f"{', '.join(f'{count} = usage_compaction.{count} + excluded.{count}' for count in COUNTS)}"
)
# A group's usage folded into no group's (group_key ''), row by row: senders' totals and days'
# totals stay what they were.
_FOLD = (
    f"INSERT INTO usage (platform, sender, day, group_key, model, {', '.join(COUNTS)}) "
    f"SELECT platform, sender, day, '', model, {', '.join(COUNTS)} FROM usage "
    "WHERE group_key = ? ON CONFLICT (platform, sender, day, group_key, model) DO UPDATE "
    f"SET {', '.join(f'{count} = usage.{count} + excluded.{count}' for count in COUNTS)}"
)
_FOLD_COMPACTION = (
    f"INSERT INTO usage_compaction (platform, sender, day, group_key, {', '.join(COUNTS)}) "
    f"SELECT platform, sender, day, '', {', '.join(COUNTS)} FROM usage_compaction "
    "WHERE group_key = ? ON CONFLICT (platform, sender, day, group_key) DO UPDATE SET "
    f"{', '.join(f'{count} = usage_compaction.{count} + excluded.{count}' for count in COUNTS)}"
)
# What a budget's owner has used in its days, and holds now in calls still in flight.
_USED = (
    "SELECT (SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage "
    "WHERE {owner} AND day BETWEEN ? AND ?), "
    "(SELECT COALESCE(SUM(cost), 0) FROM usage WHERE {owner} AND day BETWEEN ? AND ?), "
    "(SELECT COALESCE(SUM(tokens), 0) FROM budget_holds WHERE {owner} AND created_at >= ?), "
    "(SELECT COALESCE(SUM(cost), 0) FROM budget_holds WHERE {owner} AND created_at >= ?)"
)


def group_usage_folded(group_key: str) -> list[tuple[str | None, Step]]:
    """The statements (run holding usage's writers) folding a group's usage into no group's,
    per sender, UTC day and model: what each sender used stays counted (their budgets stay
    right) and each day's total too, but no row names the group (the deleted rows are counted
    as "usage"); its calls in flight are let go."""
    return [
        (None, Step(_FOLD, (group_key,))),
        ("usage", Step("DELETE FROM usage WHERE group_key = ?", (group_key,))),
        (None, Step(_FOLD_COMPACTION, (group_key,))),
        (None, Step("DELETE FROM usage_compaction WHERE group_key = ?", (group_key,))),
        (None, Step("DELETE FROM budget_holds WHERE group_key = ?", (group_key,))),
        *((None, step) for step in usage_sums.group_forgotten(group_key)),
    ]


def _owner(budget: Budget) -> tuple[str, tuple[str, ...], str]:
    """The WHERE condition selecting a budget's owner, its arguments, and its lock key."""
    if budget.sender is not None:
        return "platform = ? AND sender = ?", budget.sender, "budget:" + ":".join(budget.sender)
    return "group_key = ?", (budget.group_key or "",), f"budget:{budget.group_key}"


class UsageStore(Protocol):
    """Model usage rows and their sums."""

    _db: Database

    async def add_usage(
        self,
        *,
        platform: str,
        sender: str,
        day: str,
        group_key: str,
        usage: UsageTotals,
        model: str = "",
        hold: int | None = None,
        compaction: bool = False,
    ) -> None:
        """Add one call's usage to its sender's row for that UTC day, chat ('' for DMs) and
        model (and, for a call of compaction, to the compaction part too); with hold, the
        call's budget hold goes in the same transaction."""
        add = Step(_ADD.sql, (platform, sender, day, group_key, model, *astuple(usage)))
        sums = usage_sums.recorded(platform, sender, day, group_key, usage)
        part = Step(_ADD_COMPACTION, (platform, sender, day, group_key, *astuple(usage)))
        release = Step("DELETE FROM budget_holds WHERE id = ?", (hold,))
        await self._db.write(
            add,
            *sums,
            *((part,) if compaction else ()),
            *((release,) if hold is not None else ()),
        )

    async def hold_budgets(
        self, hold: Hold | None, budgets: Sequence[Budget], *, now: datetime, since: datetime
    ) -> int | None:
        """Hold a call's tokens and cost against its budgets, atomically across every writer;
        returns the hold's id (None for no hold: only check). BudgetSpent (nothing held) when a
        budget's tokens (or cost) used plus those held by calls in flight since `since` have
        reached it."""
        owners = [_owner(budget) for budget in budgets]
        async with self._db.transaction(*sorted({lock for _, _, lock in owners})) as tx:
            for budget, (where, args, _) in zip(budgets, owners, strict=True):
                days = (budget.first_day, budget.last_day)
                row = await tx.fetchrow(
                    _USED.format(owner=where),
                    *(*args, *days, *args, *days, *args, ts(since), *args, ts(since)),
                )
                assert row is not None
                tokens, cost = int(row[0]) + int(row[2]), float(row[1]) + float(row[3])
                if (budget.tokens and tokens >= budget.tokens) or (
                    budget.cost and cost >= budget.cost
                ):
                    raise BudgetSpent(budget, tokens, cost)
            if hold is None:
                return None
            rows = await tx.fetch(
                "INSERT INTO budget_holds (platform, sender, group_key, tokens, cost, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                *(hold.platform, hold.sender, hold.group_key, hold.tokens, hold.cost, ts(now)),
            )
        return int(rows[0][0])

    async def renew_hold(self, hold: int, now: datetime) -> None:
        """Mark a hold's call alive at now (its stream is still arriving): it counts on."""
        await self._db.execute("UPDATE budget_holds SET created_at = ? WHERE id = ?", ts(now), hold)

    async def release_hold(self, hold: int) -> None:
        """Drop a hold whose call was not made or failed (it used nothing that was reported)."""
        await self._db.execute("DELETE FROM budget_holds WHERE id = ?", hold)

    async def forget_holds_before(self, moment: datetime) -> int:
        """Drop holds made or last renewed before moment (of calls whose process ended
        mid-call)."""
        return await self._db.execute("DELETE FROM budget_holds WHERE created_at < ?", ts(moment))

    async def sender_usage(
        self, platform: str, sender: str, first_day: str, last_day: str, *, compaction: bool = False
    ) -> UsageTotals:
        """A sender's usage across all chats, over the UTC days first_day..last_day (with
        compaction: the part of it that compaction took)."""
        return await self._sum(
            "platform = ? AND sender = ? AND day BETWEEN ? AND ?",
            *(platform, sender, first_day, last_day),
            compaction=compaction,
        )

    async def group_usage(
        self, group_key: str, first_day: str, last_day: str, *, compaction: bool = False
    ) -> UsageTotals:
        """A group's usage, all its members together, over the UTC days first_day..last_day
        (with compaction: the part of it that compaction took)."""
        return await self._sum(
            "group_key = ? AND day BETWEEN ? AND ?",
            *(group_key, first_day, last_day),
            compaction=compaction,
        )

    async def usage_by_model(
        self,
        first_day: str,
        last_day: str,
        *,
        sender: tuple[str, str] | None = None,
        group_key: str = "",
    ) -> list[tuple[str, UsageTotals]]:
        """Usage per model over the UTC days first_day..last_day, most tokens first (then by
        model): of one sender (platform, id) across chats, or of one group."""
        if sender is not None:
            where, args = "platform = ? AND sender = ?", [*sender]
        else:
            where, args = "group_key = ?", [group_key]
        rows = await self._db.fetch(
            f"SELECT model, {SUMS} FROM usage WHERE {where} AND day BETWEEN ? AND ? "
            "GROUP BY model ORDER BY SUM(prompt_tokens + completion_tokens) DESC, model",
            *args,
            first_day,
            last_day,
        )
        return [(row[0], totals(row[1:])) for row in rows]

    async def _sum(self, where: str, *args: Any, compaction: bool = False) -> UsageTotals:
        table = "usage_compaction" if compaction else "usage"
        row = await self._db.fetchrow(f"SELECT {SUMS} FROM {table} WHERE {where}", *args)
        return totals(row or ())

    async def usage_report(
        self, first_day: str, limit: int | None = None, *, window: int | None = None
    ) -> tuple[list[UsageRow], list[UsageRow]]:
        """Per sender (across chats) and per group, usage since first_day, most tokens first;
        at most limit of each (None: all). With window, a number of days the store keeps sums
        for (usage_sums.WINDOWS) that ends on the caller's today, and a limit, the same answer
        is read from those sums instead of every usage row of the window."""
        report = []
        kept = window in usage_sums.WINDOWS and limit is not None
        if kept:
            assert window is not None and limit is not None
            await usage_sums.keep(self._db, window, first_day)
        for kind, (key, order) in usage_sums.KINDS.items():
            if kept:
                assert window is not None and limit is not None
                ranked = await usage_sums.ranking(self._db, kind, window, first_day, limit)
                if ranked is not None:  # else another process moved the window meanwhile
                    report.append(ranked)
                    continue
            rows = await self._db.fetch(  # '' is no sender (a group's own) or no group (a DM)
                f"SELECT platform, {key}, {SUMS} FROM usage WHERE day >= ? AND {key} != '' "
                f"GROUP BY platform, {key} ORDER BY SUM(prompt_tokens + completion_tokens) "
                f"DESC, {', '.join(key if name == 'key' else name for name in order)} LIMIT ?",
                *(first_day, NO_LIMIT if limit is None else limit),
            )
            report.append([UsageRow(row[0], row[1], totals(row[2:])) for row in rows])
        return report[0], report[1]

    async def usage_days(
        self, first_day: str, *, sender: tuple[str, str] | None = None, group_key: str = ""
    ) -> list[tuple[str, UsageTotals]]:
        """Usage per UTC day since first_day, oldest first: of one sender (platform, id), of
        one group, or of everyone. Each case reads its own index; everyone's, the kept sums."""
        if sender is None and not group_key:
            return [(day, totals(row)) for day, row in await usage_sums.days(self._db, first_day)]
        if sender is not None:
            where, args = "platform = ? AND sender = ? AND day >= ?", [*sender, first_day]
        else:
            where, args = "group_key = ? AND day >= ?", [group_key, first_day]
        rows = await self._db.fetch(
            f"SELECT day, {SUMS} FROM usage WHERE {where} GROUP BY day ORDER BY day", *args
        )
        return [(row[0], totals(row[1:])) for row in rows]

    async def forget_usage_before(self, first_kept: str) -> int:
        """Forget the usage of the UTC days before first_kept (retention), with its compaction
        part and its sums, holding usage's writers meanwhile; returns the usage rows deleted.
        The caller keeps every day a budget or a kept window still reads."""
        async with self._db.transaction() as tx:
            await self._db.hold_writers(tx, "usage")
            gone = await tx.execute("DELETE FROM usage WHERE day < ?", first_kept)
            await tx.execute("DELETE FROM usage_compaction WHERE day < ?", first_kept)
            for step in usage_sums.forgotten_before(first_kept):
                await tx.execute(step.sql, *step.args)
        return gone
