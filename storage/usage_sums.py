"""Sums of usage kept as calls are recorded, so that the web page reads a few rows instead of
every usage row of its window: everyone's per UTC day (the chart), and per sender and per group
over kept windows of the last 1, 7 and 30 days (the top lists).

A kept window holds the sums of the days from its first day on, the meaning of the query it
stands for (`day >= first_day`). Each recorded call adds to every window that has begun by its
day. A window is moved when asked for another first day: by the days it gains or loses when
they are fewer than it spans, else summed again from the usage rows, with every writer of usage
kept waiting meanwhile. Costs are floats: a moved window's may differ from a fresh sum in the
last digits. The tables are defined in storage.schema (step 15)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple
from datetime import date
from typing import Any

from storage.dialect import Database, Executor, Row, Step
from storage.models import UsageRow, UsageTotals

WINDOWS = (1, 7, 30)  # days a kept window spans
COUNTS = (
    "calls",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "estimated_calls",
    "cost",
    "priced_calls",
)
SUMS = ", ".join(f"COALESCE(SUM({count}), 0)" for count in COUNTS)
_CASTS = ", ".join(
    f"CAST(? AS {'DOUBLE PRECISION' if count == 'cost' else 'BIGINT'})" for count in COUNTS
)
# Each kind of top list: the column of usage its key is, and the order of equal tokens.
KINDS = {"sender": ("sender", ("platform", "key")), "group": ("group_key", ("key", "platform"))}
_ADDED = ", ".join(f"{count} = {{table}}.{count} + excluded.{count}" for count in COUNTS)
_WINDOW_COLUMNS = f"span, kind, platform, key, {', '.join(COUNTS)}, tokens"
_WINDOW_ADD = (
    f"ON CONFLICT (span, kind, platform, key) DO UPDATE SET "
    f"{_ADDED.format(table='usage_window_sums')}, tokens = usage_window_sums.tokens + "
    "excluded.tokens"
)


def recorded(
    platform: str, sender: str, day: str, group_key: str, usage: UsageTotals
) -> list[Step]:
    """The steps adding one call's usage to the sums (run with the usage row's own write)."""
    counts = astuple(usage)
    steps = [
        Step(
            f"INSERT INTO usage_day_sums (day, {', '.join(COUNTS)}) VALUES (?, {_CASTS}) "
            f"ON CONFLICT (day) DO UPDATE SET {_ADDED.format(table='usage_day_sums')}",
            (day, *counts),
        )
    ]
    for kind, key in (("sender", sender), ("group", group_key)):
        if key:  # '' is no sender (a group's own call) or no group (a DM)
            steps.append(
                Step(
                    # In window order, so that writers of one key take its rows' locks in turn.
                    f"INSERT INTO usage_window_sums ({_WINDOW_COLUMNS}) SELECT span, "
                    f"CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), {_CASTS}, "
                    "CAST(? AS BIGINT) FROM usage_windows WHERE first_day <= ? ORDER BY span "
                    f"{_WINDOW_ADD}",
                    (kind, platform, key, *counts, usage.billed_tokens, day),
                )
            )
    return steps


def forgotten_before(first_kept: str) -> list[Step]:
    """The steps forgetting the sums of the days before first_kept, run with the deletion of
    those days' usage rows (retention): everyone's day sums, and each kept window that begins
    before it, which is summed again from the rows when next asked for."""
    return [
        Step("DELETE FROM usage_day_sums WHERE day < ?", (first_kept,)),
        Step(
            "DELETE FROM usage_window_sums WHERE span IN "
            "(SELECT span FROM usage_windows WHERE first_day < ?)",
            (first_kept,),
        ),
        Step("DELETE FROM usage_windows WHERE first_day < ?", (first_kept,)),
    ]


def group_forgotten(group_key: str) -> list[Step]:
    """The steps run with a group's usage rows folded into no group's (group_key ''): the kept
    windows' group top lists lose the group; every sender's sums and every day's stay as they
    are, since the rows still add up to them."""
    return [Step("DELETE FROM usage_window_sums WHERE kind = 'group' AND key = ?", (group_key,))]


async def rebuild(tx: Executor) -> None:
    """Sum every day again from the usage rows, and let every window be summed again when next
    asked for (after rows were written past `recorded`: a schema step, a transfer)."""
    await tx.execute("DELETE FROM usage_day_sums")
    await tx.execute(
        f"INSERT INTO usage_day_sums (day, {', '.join(COUNTS)}) SELECT day, {SUMS} FROM usage "
        "GROUP BY day"
    )
    await tx.execute("DELETE FROM usage_window_sums")
    await tx.execute("DELETE FROM usage_windows")


async def days(db: Database, first_day: str) -> list[tuple[str, Row]]:
    """Everyone's sums per day since first_day, oldest first: (day, the COUNTS)."""
    rows = await db.fetch(
        f"SELECT day, {', '.join(COUNTS)} FROM usage_day_sums WHERE day >= ? ORDER BY day",
        first_day,
    )
    return [(row[0], row[1:]) for row in rows]


async def ranking(
    db: Database, kind: str, span: int, first_day: str, limit: int
) -> list[UsageRow] | None:
    """The kept window's top list of kind (most tokens first, then as KINDS says), at most limit;
    None when the window does not begin on first_day."""
    window = "(SELECT first_day FROM usage_windows WHERE span = ?) = ?"
    rows = await db.fetch(
        f"SELECT platform, key, {', '.join(COUNTS)} FROM usage_window_sums "
        f"WHERE span = ? AND kind = ? AND {window} "
        f"ORDER BY tokens DESC, {', '.join(KINDS[kind][1])} LIMIT ?",
        *(span, kind, span, first_day, limit),
    )
    if not rows and await _first_day(db, span) != first_day:
        return None
    return [UsageRow(row[0], row[1], totals(row[2:], moved=True)) for row in rows]


def totals(row: Sequence[Any], *, moved: bool = False) -> UsageTotals:
    """UsageTotals from the COUNTS of a row; of a moved window (moved), whose cost may be a
    rounding below zero where it is zero, no less than zero."""
    calls, prompt, cached, completion, estimated, cost, priced = row
    return UsageTotals(
        *(int(calls), int(prompt), int(cached), int(completion), int(estimated)),
        max(cost, 0.0) if moved else cost,
        int(priced),
    )


async def _first_day(on: Executor, span: int) -> str | None:
    found = await on.fetchval("SELECT first_day FROM usage_windows WHERE span = ?", span)
    return None if found is None else str(found)


async def keep(db: Database, span: int, first_day: str) -> None:
    """Make the window of span days begin on first_day (sum it the first time)."""
    if await _first_day(db, span) == first_day:
        return
    async with db.transaction() as tx:
        await db.hold_writers(tx, "usage")
        current = await _first_day(tx, span)
        if current == first_day:
            return  # another process moved it meanwhile
        gap = (
            abs((date.fromisoformat(first_day) - date.fromisoformat(current)).days)
            if current is not None
            else span
        )
        if current is None or gap >= span:
            await tx.execute("DELETE FROM usage_window_sums WHERE span = ?", span)
            await _add_days(tx, span, first_day, None, "")
        elif current < first_day:  # the days [current, first_day) leave the window
            await _add_days(tx, span, current, first_day, "-")
            await _forget_gone(tx, span, current, first_day)
        else:  # the days [first_day, current) join it
            await _add_days(tx, span, first_day, current, "")
        await tx.execute(
            "INSERT INTO usage_windows (span, first_day) VALUES (?, ?) "
            "ON CONFLICT (span) DO UPDATE SET first_day = excluded.first_day",
            *(span, first_day),
        )


async def _add_days(tx: Executor, span: int, low: str, high: str | None, sign: str) -> None:
    """Add (sign '') or take away (sign '-') the usage of the days [low, high) to the window."""
    for kind, (column, _) in KINDS.items():
        sums = ", ".join(f"{sign}COALESCE(SUM({count}), 0)" for count in COUNTS)
        await tx.execute(
            f"INSERT INTO usage_window_sums ({_WINDOW_COLUMNS}) SELECT CAST(? AS INTEGER), "
            f"CAST(? AS TEXT), platform, {column}, "
            f"{sums}, {sign}COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage "
            f"WHERE day >= ? {'AND day < ?' if high else ''} AND {column} != '' "
            f"GROUP BY platform, {column} {_WINDOW_ADD}",
            *(span, kind, low, *((high,) if high else ())),
        )


async def _forget_gone(tx: Executor, span: int, low: str, first_day: str) -> None:
    """Drop from the window the keys whose every row was in the days [low, first_day) it lost."""
    for kind, (column, _) in KINDS.items():
        await tx.execute(
            "DELETE FROM usage_window_sums WHERE span = ? AND kind = ? AND (platform, key) IN "
            f"(SELECT platform, {column} FROM usage WHERE day >= ? AND day < ?) AND NOT EXISTS "
            f"(SELECT 1 FROM usage u WHERE u.platform = usage_window_sums.platform "
            f"AND u.{column} = usage_window_sums.key AND u.day >= ?)",
            *(span, kind, low, first_day, first_day),
        )
