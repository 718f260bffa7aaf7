"""Token usage of the model: recorded per sender, chat and UTC day for every call, shown by
/usage, and held against the budgets before each turn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bot.config import BudgetsConfig
from bot.core.clock import Clock, utc_now
from bot.core.context import MessageContext
from bot.core.keys import parse_scope
from bot.core.permissions import Role
from bot.core.render import tokens_of
from bot.llm.base import ModelReply, ModelRequest, Usage
from storage.models import UsageRow, UsageTotals
from storage.usage import UsageStore

LAST_DAY_OF_ANY_MONTH = "31"  # day strings compare as text, so -31 closes every month


def estimated_usage(request: ModelRequest, reply: ModelReply) -> Usage:
    """Usage for a server that reported none, at about 4 characters a token, flagged."""
    sent = json.dumps(request.messages, ensure_ascii=False)
    if request.tools:
        sent += json.dumps(request.tools, ensure_ascii=False)
    answer = reply.text + "".join(call.name + call.arguments for call in reply.tool_calls)
    return Usage(tokens_of(len(sent)), tokens_of(len(answer)), 0, estimated=True)


@dataclass(frozen=True)
class _Period:
    """A UTC day or month: its first and last day, as stored, and when it ends."""

    name: str
    first: str
    last: str
    resets: datetime


def _periods(now: datetime) -> tuple[_Period, _Period]:
    today = now.astimezone(UTC).date()
    tomorrow = today + timedelta(days=1)
    next_month = date(today.year + today.month // 12, today.month % 12 + 1, 1)
    month = today.strftime("%Y-%m")
    return (
        _Period("today", today.isoformat(), today.isoformat(), _midnight(tomorrow)),
        _Period(
            "this month", f"{month}-01", f"{month}-{LAST_DAY_OF_ANY_MONTH}", _midnight(next_month)
        ),
    )


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _describe(totals: UsageTotals) -> str:
    text = (
        f"{totals.calls:,} call(s), {totals.prompt_tokens:,} prompt tokens "
        f"({totals.cached_tokens:,} cached), {totals.completion_tokens:,} completion tokens"
    )
    if totals.estimated_calls:
        text += f"; {totals.estimated_calls:,} call(s) estimated (the server reported no usage)"
    return text


class UsageLedger:
    """Records every model call's usage and answers for budgets."""

    def __init__(self, store: UsageStore, budgets: BudgetsConfig, clock: Clock = utc_now) -> None:
        self._store = store
        self._budgets = budgets
        self._clock = clock

    async def record(
        self, context: MessageContext, request: ModelRequest, reply: ModelReply
    ) -> None:
        """Count one model call (a turn's, a tool round's or a summary's) to the turn's sender."""
        usage = reply.usage or estimated_usage(request, reply)
        conversation = context.conversation
        await self._store.add_usage(
            platform=conversation.platform,
            sender=conversation.sender_id or "",
            day=self._clock().astimezone(UTC).date().isoformat(),
            group_key=conversation.group_session_key or "",
            usage=UsageTotals(
                1,
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens,
                int(usage.estimated),
            ),
        )

    async def _sender(self, context: MessageContext, period: _Period) -> UsageTotals:
        conversation = context.conversation
        sender = conversation.sender_id or ""
        return await self._store.sender_usage(
            conversation.platform, sender, period.first, period.last
        )

    async def budget_refusal(self, context: MessageContext) -> str | None:
        """Why this turn may not call the model (a budget is used up), or None."""
        if not self._budgets.any:
            return None
        budgets, group = self._budgets, context.conversation.group_session_key
        day, month = _periods(self._clock())
        checks = [
            ("user_daily_tokens", budgets.user_daily_tokens, day, None),
            ("user_monthly_tokens", budgets.user_monthly_tokens, month, None),
            ("group_daily_tokens", budgets.group_daily_tokens, day, group),
            ("group_monthly_tokens", budgets.group_monthly_tokens, month, group),
        ]
        for key, budget, period, group_key in checks:
            if not budget or (key.startswith("group") and not group_key):
                continue
            if group_key:
                used = await self._store.group_usage(group_key, period.first, period.last)
            else:
                used = await self._sender(context, period)
            if used.billed_tokens >= budget:
                whose = "this group's" if group_key else "your"
                return (
                    f"Sorry, {whose} token budget for {period.name} is used up "
                    f"({used.billed_tokens:,} of {budget:,} tokens, budgets.{key}). It resets "
                    f"at {period.resets:%Y-%m-%d %H:%M} UTC. /pin, /usage and /whoami still work."
                )
        return None

    async def report(self, context: MessageContext) -> str:
        """The /usage reply: the speaker's own usage and budgets; in a group, the group's totals
        for shared admins."""
        conversation = context.conversation
        day, month = _periods(self._clock())
        lines = [f"Your model usage ({conversation.platform}, tokens as the server reported):"]
        mine = {period.name: await self._sender(context, period) for period in (day, month)}
        lines += [f"  {name}: {_describe(used)}" for name, used in mine.items()]
        budgets = self._budgets
        lines += self._budget_lines(
            "your", mine, budgets.user_daily_tokens, budgets.user_monthly_tokens
        )
        group = conversation.group_session_key
        if group and await context.speaker.role() is Role.SHARED_ADMIN:
            group_totals = {
                period.name: await self._store.group_usage(group, period.first, period.last)
                for period in (day, month)
            }
            lines.append("This group, all members (shown to shared admins):")
            lines += [f"  {name}: {_describe(used)}" for name, used in group_totals.items()]
            lines += self._budget_lines(
                "the group's",
                group_totals,
                budgets.group_daily_tokens,
                budgets.group_monthly_tokens,
            )
        return "\n".join(lines)

    @staticmethod
    def _budget_lines(
        whose: str, used: dict[str, UsageTotals], daily: int, monthly: int
    ) -> list[str]:
        lines = []
        for name, budget in (("today", daily), ("this month", monthly)):
            if budget:
                left = max(0, budget - used[name].billed_tokens)
                lines.append(f"  {whose} budget {name}: {left:,} of {budget:,} tokens left")
        return lines or [f"  {whose} budget: none"]


def _row(row: UsageRow, ident: str) -> dict[str, Any]:
    totals = row.totals
    return {
        "platform": row.platform,
        "id": ident,
        "calls": totals.calls,
        "prompt_tokens": totals.prompt_tokens,
        "cached_tokens": totals.cached_tokens,
        "completion_tokens": totals.completion_tokens,
        "estimated_calls": totals.estimated_calls,
        "cache_hit_ratio": round(totals.cached_tokens / totals.prompt_tokens, 4)
        if totals.prompt_tokens
        else 0.0,
    }


async def usage_document(store: UsageStore, days: int, now: datetime) -> dict[str, Any]:
    """The operator's report over the last `days` UTC days (today included): one row per user
    (platform and sender, across chats) and per group, most tokens first."""
    first = (now.astimezone(UTC).date() - timedelta(days=days - 1)).isoformat()
    users, groups = await store.usage_report(first)
    group_rows = []
    for row in groups:
        scope = parse_scope(row.key)
        group_rows.append(_row(row, scope.owner if scope else row.key))
    return {"days": days, "users": [_row(row, row.key) for row in users], "groups": group_rows}


def usage_table(document: dict[str, Any]) -> str:
    """The report as aligned text columns."""
    header = ("platform", "id", "calls", "prompt", "cached", "completion", "cache hit", "estimated")
    lines = [f"Model usage over the last {document['days']} day(s) (UTC), tokens as reported."]
    for title in ("users", "groups"):
        rows = [
            (
                r["platform"],
                r["id"] or "(no sender id)",
                f"{r['calls']:,}",
                f"{r['prompt_tokens']:,}",
                f"{r['cached_tokens']:,}",
                f"{r['completion_tokens']:,}",
                f"{r['cache_hit_ratio']:.0%}",
                f"{r['estimated_calls']:,}",
            )
            for r in document[title]
        ]
        lines.append(f"{title.capitalize()}:")
        if not rows:
            lines.append("  none")
            continue
        widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
        for cells in (header, *rows):
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
    return "\n".join(lines)
