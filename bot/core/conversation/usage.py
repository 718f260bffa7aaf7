"""Usage of the model: every call held against the budgets that apply before it is made
(atomically, across chats and workers), then recorded per sender, chat, UTC day and model with
its cost; shown by /usage and `pinbot usage`.

A call starts only while the tokens (and cost) used plus those held by calls in flight are below
each budget; its hold is its prompt counted in characters (never fewer than its tokens, CJK
included) plus llm.max_completion_tokens. So a budget is overshot by at most one call. A message
without a sender id (an anonymous admin, a channel) counts to its group only.

A hold lasts as long as its call: released when the call ends (success, failure or cancel) and
renewed while the call is in flight (as a streamed answer arrives, and every RENEW_EVERY
meanwhile) (`timeout_s` bounds each read, not a whole stream, which
`llm.stream_timeout_s` bounds), so it expires only when its process died mid-call: `hold_lifetime`
after it was made or last renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bot import metrics
from bot.clock import Clock, utc_now
from bot.config import BudgetsConfig, LlmConfig, PricingConfig
from bot.core.conversation.render import tokens_of, weighted_chars
from bot.core.people import MessageContext, Role, parse_scope
from bot.llm.base import ModelReply, ModelRequest, Progress, Usage
from storage.errors import BudgetSpent
from storage.models import Budget, Hold, UsageRow, UsageTotals
from storage.usage import UsageStore

log = logging.getLogger(__name__)
LAST_DAY_OF_ANY_MONTH = "31"  # day strings compare as text, so -31 closes every month
PER_PRICE = 1_000_000  # prices are per 1,000,000 tokens
HOLD_MARGIN = timedelta(minutes=1)  # a hold outlives its call's longest wait by this much
# A streamed call renews its hold at most this often; the hold then stays younger than this plus
# one read's wait (timeout_s), well inside hold_lifetime.
RENEW_EVERY = HOLD_MARGIN / 2


class BudgetUsedUp(Exception):
    """A budget stops a model call; the message says which, and when it resets."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def estimated_usage(request: ModelRequest, reply: ModelReply) -> Usage:
    """Usage for a server that reported none, at about 4 characters a token (a wide, CJK one
    as a token: weighted_chars), flagged."""
    answer = reply.text + "".join(call.name + call.arguments for call in reply.tool_calls)
    sent, said = weighted_chars(_sent(request)), weighted_chars(answer)
    return Usage(tokens_of(sent), tokens_of(said), 0, estimated=True)


def _sent(request: ModelRequest) -> str:
    sent = json.dumps(request.messages, ensure_ascii=False)
    if request.tools:
        sent += json.dumps(request.tools, ensure_ascii=False)
    return sent


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


class UsageLedger:
    """Holds every model call against its budgets, records its usage and cost, and reports."""

    def __init__(
        self,
        store: UsageStore,
        budgets: BudgetsConfig,
        clock: Clock = utc_now,
        *,
        llm: LlmConfig | None = None,
        pricing: PricingConfig | None = None,
    ) -> None:
        self._store = store
        self._budgets = budgets
        self._clock = clock
        self._llm = llm or LlmConfig()
        self._pricing = pricing or PricingConfig()
        # A hold outlives any wait of its call (before its stream opens, or between two of its
        # chunks) since it was made or renewed: then its process has ended mid-call.
        waits = self._llm.timeout_s * (self._llm.max_retries + 1)
        self.hold_lifetime = timedelta(seconds=waits) + HOLD_MARGIN

    # --- budgets ------------------------------------------------------------------------------

    def _budgets_of(self, context: MessageContext, now: datetime) -> list[Budget]:
        """The budgets a call of this message counts against: the sender's (when there is
        one) and the group's (in a group)."""
        b, conversation = context.budgets or self._budgets, context.conversation
        if not b.any:
            return []
        sender, group = conversation.sender_id, conversation.group_session_key
        found = []
        for period, user, group_limits in zip(
            _periods(now),
            (
                (b.user_daily_tokens, b.user_daily_cost),
                (b.user_monthly_tokens, b.user_monthly_cost),
            ),
            (
                (b.group_daily_tokens, b.group_daily_cost),
                (b.group_monthly_tokens, b.group_monthly_cost),
            ),
            strict=True,
        ):
            span = "daily" if period.name == "today" else "monthly"
            if sender and any(user):
                owner = (conversation.platform, sender)
                found.append(Budget(f"user_{span}", period.first, period.last, owner, None, *user))
            if group and any(group_limits):
                found.append(
                    Budget(f"group_{span}", period.first, period.last, None, group, *group_limits)
                )
        return found

    async def budget_refusal(self, context: MessageContext) -> str | None:
        """Why this message may not call the model (a budget is used up), or None."""
        now = self._clock()
        budgets = self._budgets_of(context, now)
        if not budgets:
            return None
        try:
            await self._store.hold_budgets(None, budgets, now=now, since=now - self.hold_lifetime)
        except BudgetSpent as spent:
            metrics.refused("budget")
            return self._spent(spent, now)
        return None

    def _spent(self, spent: BudgetSpent, now: datetime) -> str:
        budget = spent.budget
        period = _periods(now)[0 if budget.name.endswith("daily") else 1]
        whose = "this group's" if budget.group_key else "your"
        if budget.tokens and spent.tokens >= budget.tokens:
            kind = "token budget"
            used = f"{spent.tokens:,} of {budget.tokens:,} tokens, budgets.{budget.name}_tokens"
        else:
            currency = self._pricing.currency
            kind = f"budget in {currency}"
            used = f"{spent.cost:,.4f} of {budget.cost:,.4f} {currency}, budgets.{budget.name}_cost"
        return (
            f"Sorry, {whose} {kind} for {period.name} is used up ({used}). It resets at "
            f"{period.resets:%Y-%m-%d %H:%M} UTC. /pin, /usage and /whoami still work."
        )

    # --- one call -------------------------------------------------------------------------------

    async def call(
        self,
        context: MessageContext,
        request: ModelRequest,
        complete: Callable[[Progress], Awaitable[ModelReply]],
        *,
        model: str | None = None,
        label: str | None = None,
    ) -> ModelReply:
        """Make one model call (a turn's, a tool round's or a summary's) for the message's
        sender: held against the budgets first (BudgetUsedUp, and no call, when one is used up),
        then recorded with the usage the server reported and its cost. An admitted call always
        completes. complete gets the progress callback that renews the hold while its answer
        streams in. model: the model the call asks for (None: llm.model), whose row it is
        recorded in and whose price (pricing.models) it costs; label: its metrics label (None:
        the default's)."""
        model = model or self._llm.model
        now = self._clock()
        hold = await self._hold(context, request, now, model)
        renewed = now

        async def alive() -> None:
            nonlocal renewed
            moment = self._clock()
            if hold is None or moment - renewed < RENEW_EVERY:
                return
            renewed = moment
            try:
                await self._store.renew_hold(hold, moment)
            except Exception as error:  # the answer goes on; a later chunk tries again
                log.warning("renewing budget hold %s failed: %s", hold, error)

        # Renewed also while nothing arrives (a model thinking behind keep-alive comments, a
        # call that is not streamed): a hold of a live process never expires mid-call.
        keeper = asyncio.create_task(self._keep(alive)) if hold is not None else None
        try:
            reply = await complete(alive)
        except BaseException:
            if hold is not None:
                with contextlib.suppress(Exception):  # it expires anyway
                    await self._store.release_hold(hold)
            raise
        finally:
            if keeper is not None:
                keeper.cancel()
        usage = reply.usage or estimated_usage(request, reply)
        conversation = context.conversation
        totals = self._totals(usage, model)
        await self._store.add_usage(
            platform=conversation.platform,
            sender=conversation.sender_id or "",
            day=self._clock().astimezone(UTC).date().isoformat(),
            group_key=conversation.group_session_key or "",
            model=model,
            usage=totals,
            hold=hold,
            compaction=request.purpose != "turn",
        )
        metrics.usage(
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            totals.cost if totals.priced_calls else None,
            label,
        )
        return reply

    @staticmethod
    async def _keep(alive: Progress) -> None:
        """Renew a call's hold every RENEW_EVERY of the process's own time until cancelled."""
        while True:
            await asyncio.sleep(RENEW_EVERY.total_seconds())
            await alive()

    async def _hold(
        self, context: MessageContext, request: ModelRequest, now: datetime, model: str
    ) -> int | None:
        budgets = self._budgets_of(context, now)
        if not budgets:
            return None
        # Characters, not characters / 4: CJK text is about one token per character.
        prompt, cap = len(_sent(request)), self._llm.max_completion_tokens
        conversation = context.conversation
        hold = Hold(
            conversation.platform,
            conversation.sender_id,
            conversation.group_session_key or "",
            prompt + cap,
            self._cost(Usage(prompt, cap, 0), model) or 0.0,
        )
        try:
            return await self._store.hold_budgets(
                hold, budgets, now=now, since=now - self.hold_lifetime
            )
        except BudgetSpent as spent:
            metrics.refused("budget")
            raise BudgetUsedUp(self._spent(spent, now)) from None

    def _cost(self, usage: Usage, model: str) -> float | None:
        """What usage of model costs with its price, the cache discount applied; None without
        a price."""
        price = self._pricing.models.get(model)
        if price is None:
            return None
        cached_price = price.prompt if price.cached_prompt is None else price.cached_prompt
        fresh = usage.prompt_tokens - usage.cached_tokens
        return (
            fresh * price.prompt
            + usage.cached_tokens * cached_price
            + usage.completion_tokens * price.completion
        ) / PER_PRICE

    def _totals(self, usage: Usage, model: str) -> UsageTotals:
        cost = self._cost(usage, model)
        return UsageTotals(
            1,
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            int(usage.estimated),
            cost or 0.0,
            int(cost is not None),
        )

    async def forget_stale_holds(self, now: datetime) -> None:
        """Drop the holds of calls whose process ended mid-call (a periodic job)."""
        await self._store.forget_holds_before(now - self.hold_lifetime)

    # --- /usage ---------------------------------------------------------------------------------

    def _describe(self, totals: UsageTotals) -> str:
        text = (
            f"{totals.calls:,} call(s), {totals.prompt_tokens:,} prompt tokens "
            f"({totals.cached_tokens:,} cached, {_ratio(totals):.0%} cache hits), "
            f"{totals.completion_tokens:,} completion tokens"
        )
        if totals.known_cost is not None:
            text += f"; {totals.known_cost:,.4f} {self._pricing.currency}"
            if totals.priced_calls < totals.calls:
                text += f" for {totals.priced_calls:,} priced call(s)"
        if totals.estimated_calls:
            text += f"; {totals.estimated_calls:,} call(s) estimated (the server reported no usage)"
        return text

    async def report(self, context: MessageContext) -> str:
        """The /usage reply: the speaker's own usage and budgets; in a group, the group's totals
        for shared admins (and for messages without a sender id, which count to it alone)."""
        conversation = context.conversation
        day, month = _periods(self._clock())
        group = conversation.group_session_key
        lines = []
        if conversation.sender_id:
            lines.append(
                f"Your model usage ({conversation.platform}, tokens as the server reported):"
            )
            mine = {
                period.name: await self._store.sender_usage(
                    conversation.platform, conversation.sender_id, period.first, period.last
                )
                for period in (day, month)
            }
            lines += [f"  {name}: {self._describe(used)}" for name, used in mine.items()]
            lines += await self._model_lines(sender=(conversation.platform, conversation.sender_id))
            lines += await self._compaction_lines(
                lambda first, last: self._store.sender_usage(
                    conversation.platform,
                    conversation.sender_id or "",
                    first,
                    last,
                    compaction=True,
                )
            )
            lines += self._budget_lines("your", mine, "user")
        elif group:
            lines.append(
                "Messages without a sender id (anonymous admins, channels) count to this "
                "group's usage and budget only."
            )
        if group and (
            not conversation.sender_id or await context.speaker.role() is Role.SHARED_ADMIN
        ):
            group_totals = {
                period.name: await self._store.group_usage(group, period.first, period.last)
                for period in (day, month)
            }
            lines.append("This group, all members (shown to shared admins):")
            lines += [f"  {name}: {self._describe(used)}" for name, used in group_totals.items()]
            lines += await self._model_lines(group_key=group)
            lines += await self._compaction_lines(
                lambda first, last: self._store.group_usage(group, first, last, compaction=True)
            )
            lines += self._budget_lines("the group's", group_totals, "group")
        return "\n".join(lines)

    async def _model_lines(
        self, *, sender: tuple[str, str] | None = None, group_key: str = ""
    ) -> list[str]:
        """This month's usage per model (of a sender or a group), when it went to another model
        than llm.model (a group or topic picked one of llm.models); nothing otherwise."""
        month = _periods(self._clock())[1]
        used = await self._store.usage_by_model(
            month.first, month.last, sender=sender, group_key=group_key
        )
        if [model for model, _ in used] in ([], [self._llm.model]):
            return []
        return ["  this month by model:"] + [
            f"    {model or '(not recorded)'}: {self._describe(totals)}" for model, totals in used
        ]

    async def _compaction_lines(
        self, part: Callable[[str, str], Awaitable[UsageTotals]]
    ) -> list[str]:
        """Of the usage above, what compaction took (summaries and pin suggestions), per period;
        nothing when it took nothing this month."""
        day, month = _periods(self._clock())
        used = {period.name: await part(period.first, period.last) for period in (day, month)}
        if not used[month.name].calls:
            return []
        return [
            f"  of which compaction (summaries and pin suggestions), {name}: "
            f"{self._describe(totals)}"
            for name, totals in used.items()
        ]

    def _budget_lines(self, whose: str, used: dict[str, UsageTotals], owner: str) -> list[str]:
        lines = []
        currency = self._pricing.currency
        for name, span in (("today", "daily"), ("this month", "monthly")):
            tokens = getattr(self._budgets, f"{owner}_{span}_tokens")
            cost = getattr(self._budgets, f"{owner}_{span}_cost")
            if tokens:
                left = max(0, tokens - used[name].billed_tokens)
                lines.append(f"  {whose} budget {name}: {left:,} of {tokens:,} tokens left")
            if cost:
                left_cost = max(0.0, cost - used[name].cost)
                lines.append(
                    f"  {whose} budget {name}: {left_cost:,.4f} of {cost:,.4f} {currency} left"
                )
        return lines or [f"  {whose} budget: none"]


def _ratio(totals: UsageTotals) -> float:
    return totals.cached_tokens / totals.prompt_tokens if totals.prompt_tokens else 0.0


def _row(row: UsageRow, ident: str) -> dict[str, Any]:
    totals = row.totals
    cost = totals.known_cost
    return {
        "platform": row.platform,
        "id": ident,
        "calls": totals.calls,
        "prompt_tokens": totals.prompt_tokens,
        "cached_tokens": totals.cached_tokens,
        "completion_tokens": totals.completion_tokens,
        "estimated_calls": totals.estimated_calls,
        "cache_hit_ratio": round(_ratio(totals), 4),
        "cost": None if cost is None else round(cost, 6),
    }


async def usage_document(
    store: UsageStore, days: int, now: datetime, currency: str = "USD"
) -> dict[str, Any]:
    """The operator's report over the last `days` UTC days (today included): one row per user
    (platform and sender, across chats) and per group, most tokens first; cost in currency,
    null where no call had a price."""
    first = (now.astimezone(UTC).date() - timedelta(days=days - 1)).isoformat()
    users, groups = await store.usage_report(first)
    group_rows = []
    for row in groups:
        scope = parse_scope(row.key)
        group_rows.append(_row(row, scope.owner if scope else row.key))
    return {
        "days": days,
        "currency": currency,
        "users": [_row(row, row.key) for row in users],
        "groups": group_rows,
    }


def usage_table(document: dict[str, Any]) -> str:
    """The report as aligned text columns."""
    header = (
        "platform",
        "id",
        "calls",
        "prompt",
        "cached",
        "completion",
        "cache hit",
        "estimated",
        f"cost ({document.get('currency', 'USD')})",
    )
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
                "unknown" if r["cost"] is None else f"{r['cost']:,.4f}",
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
