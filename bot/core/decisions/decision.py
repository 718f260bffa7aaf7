"""What proposals and pin suggestions share: a decision numbered per scope, expiring after
`pins.proposal_ttl_hours`, shown by a message with two buttons (their tap data keeps its wire
format, `pinbot:proposal:approve:3`), decided once, and the same answers for a number that is
unknown, decided already or expired."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from bot.clock import Clock, utc_now
from bot.config import PinsConfig
from bot.core.blocks import BlockOps, Done, Refused, Rule, refusal
from bot.core.replies import Button, Messenger, Reply, Sent, update_processed
from storage import Store
from storage.decisions import Kind
from storage.models import Decision, NewProposal, NewSuggestion

log = logging.getLogger(__name__)
N = TypeVar("N", NewProposal, NewSuggestion)
S = TypeVar("S", bound=StrEnum)
MAX_NUMBER = 10**9  # the largest number a tap or a command names
# How a decided status reads in "was … already", where it is not the status itself.
_DECIDED = {"applied": "approved", "refused": "approved, but could not be applied"}


# A scope note (a leading ".": not shown) per kind: the update that made the scope's newest
# decisions, and their numbers in the order it made them: "<update> <number> <number>…".
MADE_NOTE = ".{table}-made"


class Quoted(str):
    """A line (or lines) of a decision's message that quotes what it decides: shown as one
    quoted block where the platform can (Reply.quotes), so that its lines read as the content,
    not as lines of the message."""


def _reply(lines: list[str], buttons: tuple[Button, ...] | None = None) -> Reply:
    """lines as one message, the ranges of its Quoted lines as its quotes."""
    quotes, at = [], 0
    for line in lines:
        if isinstance(line, Quoted) and line:
            quotes.append((at, at + len(line)))
        at += len(line) + 1
    return Reply("\n".join(lines), buttons=buttons, quotes=tuple(quotes))


class Decisions(Generic[N, S]):
    """One kind of decision (noun: how taps, refusals and logs name one; verbs: its buttons',
    yes first): makes, lists and decides them; posts each through the messenger the platform
    adapter sets, and updates that message once decided."""

    noun, verbs = "", ("", "")
    _kind: Kind[N, S]

    @classmethod
    def tap(cls, verb: str, number: int) -> str:
        """What the button of verb tells the bot when tapped: pinbot:proposal:approve:3."""
        return f"pinbot:{cls.noun}:{verb}:{number}"

    @classmethod
    def parse(cls, data: str) -> tuple[bool, int] | None:
        """(yes?, number) of a button's data; None for data that is not one (forged data
        included: only ASCII digits make a number, as a command takes it; "²" or "١" are digits
        to str.isdigit, and int() fails on the first and reads the second)."""
        prefix = f"pinbot:{cls.noun}:"
        verb, _, number = data.removeprefix(prefix).partition(":")
        if not data.startswith(prefix) or verb not in cls.verbs:
            return None
        if not re.fullmatch(r"[1-9][0-9]{0,9}", number, flags=re.ASCII):
            return None
        return (verb == cls.verbs[0], int(number)) if int(number) <= MAX_NUMBER else None

    def __init__(
        self, store: Store, ops: BlockOps, pins: PinsConfig, clock: Clock = utc_now
    ) -> None:
        self._store = store
        self._ops = ops
        self._pins = pins
        self._clock = clock
        self.messenger: Messenger | None = None

    def shown(self, decision: Decision[N, S], note: str = "") -> Reply:
        """The message that shows decision: what it would do and why; while pending how to
        decide it, with its buttons (and note: why doing it failed), once decided its outcome in
        their place."""
        lines = self._shown(decision)
        if decision.status != "pending":
            return _reply(lines, ())
        if note:
            lines.insert(-1, f"Not saved: {note}")
        buttons = (Button(verb.title(), self.tap(verb, decision.number)) for verb in self.verbs)
        return _reply(lines, tuple(buttons))

    def _shown(self, decision: Decision[N, S]) -> list[str]:
        """The lines of the message that shows decision, the last how to decide it (while
        pending) or its outcome; Quoted ones quote what it decides."""
        raise NotImplementedError

    async def _listing(self, scope: str, empty: str, title: str, how: str) -> Done:
        """The scope's pending decisions, one line each, under title and followed by how to
        decide them; expired ones are closed on the way."""
        pending: list[Decision[N, S]] = await self._pending(scope)
        if not pending:
            return Done(empty)
        lines = [f"{title} ({len(pending)}):", *map(self._line, pending), how]
        return Done("\n".join(lines))

    def _line(self, decision: Decision[N, S]) -> str:
        """Decision on one line of a listing."""
        raise NotImplementedError

    async def _add(self, new: N, most: int) -> tuple[Decision[N, S], bool] | None:
        """Store a pending decision that expires after pins.proposal_ttl_hours, and whether it
        is new: the one the update being processed made in this place before (it is being
        processed again) is found again instead. None when its scope holds most pending ones
        already."""
        update = update_processed()
        place = (self._kind.table, new.scope)
        ordinal: int = update.made.get(place, 0) + 1 if update else 0
        note = MADE_NOTE.format(table=self._kind.table)
        numbers: list[str] = []
        if update is not None:
            key, *numbers = (await self._store.notes(new.scope)).get(note, "").split(" ")
            numbers = numbers if key == update.key else []
            if len(numbers) >= ordinal and numbers[ordinal - 1].isdigit():
                made = await self._store.decision(self._kind, new.scope, int(numbers[ordinal - 1]))
                if made is not None:
                    update.made[place] = ordinal
                    log.info("%s #%d was made by this update before", self.noun, made.number)
                    return made, False
        now = self._clock()
        expires = now + timedelta(hours=self._pins.proposal_ttl_hours)
        # What this update made so far, noted with the new decision in its transaction: a
        # worker that dies between the two cannot leave a decision its update does not find.
        noted = (note, " ".join([update.key, *numbers[: ordinal - 1]])) if update else None
        decision = await self._store.add_decision(
            self._kind, new, now=now, expires_at=expires, max_pending=most, note=noted
        )
        if decision is None:
            return None
        if update is not None:
            update.made[place] = ordinal
        return decision, True

    async def _post(self, chat: str, reply: Reply, what: str) -> Sent | None:
        """Post in chat; None when nothing could be posted. A platform's failure costs the
        message only (the decision stays listed by its command), never the turn or the
        compaction that made it."""
        if self.messenger is None or not chat:
            return None
        try:
            return await self.messenger.send(chat, reply)
        except Exception as error:  # any platform's failure: core knows none of their errors
            # The error's type only: what a platform says may quote the message.
            log.warning("posting %s failed (%s)", what, type(error).__name__)
            return None

    async def _show(self, chat: str, decision: Decision[N, S], what: str) -> None:
        """Post the message that shows decision, and remember it (unless it was posted)."""
        if decision.message_id:
            return
        sent = await self._post(chat, self.shown(decision), what)
        if sent is not None:
            await self._store.show_decision(
                self._kind, decision.new.scope, decision.number, sent.chat, sent.message_id
            )

    async def _pending(self, scope: str) -> list[Decision[N, S]]:
        """A scope's pending decisions, oldest first; expired ones are closed on the way."""
        pending: list[Decision[N, S]] = []
        for decision in await self._store.decisions(self._kind, scope):
            if self._clock() >= decision.expires_at:
                await self._close(decision, self._kind.status("expired"))
            else:
                pending.append(decision)
        return pending

    async def _pending_one(self, scope: str, number: int) -> Decision[N, S] | Refused:
        """Decision number of scope while it may be decided; else why not (unknown, decided
        already, or expired: then it is closed so)."""
        decision = await self._store.decision(self._kind, scope, number)
        if decision is None:
            return refusal(Rule(f"no-{self.noun}"), number=number)
        if decision.status != "pending":
            decided = _DECIDED.get(decision.status, decision.status)
            return refusal(Rule(f"{self.noun}-decided"), number=number, decided=decided)
        if self._clock() >= decision.expires_at:
            await self._close(decision, self._kind.status("expired"))
            return refusal(Rule(f"{self.noun}-expired"), number=number)
        return decision

    async def _close(
        self, decision: Decision[N, S], status: S, *, by: str = "", outcome: str = ""
    ) -> bool:
        """Mark decision decided and show the outcome in its message; False when another
        decision came first (its message shows that one already)."""
        scope, number = decision.new.scope, decision.number
        decided = await self._store.decide_once(
            self._kind, scope, number, status, now=self._clock(), by=by, outcome=outcome
        )
        if decided:
            await self._update(scope, number, status)
        return decided

    async def _update(self, scope: str, number: int, status: S) -> None:
        """Show the outcome in the message of decision number, decided as status."""
        decision = await self._store.decision(self._kind, scope, number)
        if decision is not None and decision.status is status:
            await self._edit(decision, self.shown(decision))

    async def _edit(self, decision: Decision[N, S], reply: Reply) -> None:
        if not decision.message_id or self.messenger is None:
            return
        sent = Sent(decision.chat or "", decision.message_id)
        try:
            edited = await self.messenger.edit(sent, reply)
        except Exception:  # the decision stands; its message only is not updated
            edited = False
        if not edited:
            log.warning("could not update the message of %s #%d", self.noun, decision.number)
