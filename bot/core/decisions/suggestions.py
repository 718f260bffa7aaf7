"""Pin suggestions: at a compaction the model suggests facts worth a pin, and people decide.

In a DM each suggestion is one message with Pin and Dismiss buttons (or `/pin suggestions`,
`/pin accept <n>`, `/pin dismiss <n>`); Pin saves a personal block through every rule of
`/pin add` (BlockOps, the one road), Dismiss forgets it, and its content is not suggested again in
that scope. In a group (`pins.suggest_on_compaction: all`) suggestions become proposals to the
shared admins (bot.core.decisions.proposals); nothing personal is suggested there.

A suggestion is shown only when it is good: not a block of the scope again (the same label, or
the same content up to case, spacing, punctuation, symbols and invisible characters), not
pending or dismissed already (in a group: not a proposal pending or rejected), not a
credential, meeting the label and content rules; at most `pins.suggest_max` per compaction,
none while the scope is at its block limit or character budget (said once); each expires after
`pins.proposal_ttl_hours`.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from bot.clock import Clock, utc_now
from bot.config import PinsConfig
from bot.core.blocks import BlockOps, Done, Outcome, Refused, Target, default_level, text_problem
from bot.core.decisions.proposals import MAX_REASON_CHARS, Proposals
from bot.core.people import ChatKind, MessageContext
from bot.core.replies import Button, Messenger, Reply, Sent
from bot.llm.suggest import Candidate
from bot.secrets import credential_kind
from storage import Store
from storage.models import label_key
from storage.suggestions import NewSuggestion, Suggestion, SuggestionStatus

log = logging.getLogger(__name__)
PIN, DISMISS = "pin", "dismiss"
TAP_PREFIX = "pinbot:suggestion:"  # a button's data: pinbot:suggestion:pin:3
MAX_NUMBER = 10**9
MAX_PENDING = 20  # pending suggestions a scope holds at once; older ones expire meanwhile
MODEL = "model"  # who a group's proposal from a suggestion is from, as the audit trail says it
IN_PROPOSALS = "Suggested by the model at compaction"  # the start of such a proposal's reason
FULL_NOTE = "suggestions-full"  # the scope note that says suggestions wait for room
IN_GROUPS = (
    "Pin suggestions are made in DMs; in a group the model's suggestions become proposals to "
    "its shared admins (/pin shared proposals)."
)
_DECIDED = {
    SuggestionStatus.PINNED: "pinned",
    SuggestionStatus.DISMISSED: "dismissed",
    SuggestionStatus.EXPIRED: "expired",
}


def tap_data(verb: str, number: int) -> str:
    """What a suggestion button tells the bot when tapped."""
    return f"{TAP_PREFIX}{verb}:{number}"


def suggestion_tap(data: str) -> tuple[bool, int] | None:
    """(pin?, number) of a suggestion button's data; None for data that is not one (forged
    data included: only ASCII digits make a number)."""
    verb, _, number = data.removeprefix(TAP_PREFIX).partition(":")
    if not data.startswith(TAP_PREFIX) or verb not in (PIN, DISMISS):
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,9}", number, flags=re.ASCII) or int(number) > MAX_NUMBER:
        return None
    return verb == PIN, int(number)


def is_suggestion_tap(data: str) -> bool:
    """Whether a button's data is a suggestion's (these buttons are only ever in DMs)."""
    return data.startswith(TAP_PREFIX)


def content_key(text: str) -> str:
    """Content as suggestions compare it: width and case folded, letters, digits and their
    marks only (no spacing, punctuation, symbols such as ` or emoji, or invisible format
    characters such as a zero-width space or a soft hyphen)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(char for char in folded if unicodedata.category(char)[0] in "LNM")


def one_line(text: str) -> str:
    """Text on one line, its line breaks shown as ⏎: a suggestion's content may hold lines that
    look like the lines of a listing or a message around it."""
    return " ⏎ ".join(text.splitlines())


@dataclass(frozen=True)
class Place:
    """Where a compaction's suggestions go: the scope they are for, the chat they are shown in,
    and whether it is a group's shared scope (then they become proposals)."""

    scope: str
    chat: str
    group: bool


class Suggestions:
    """Checks, stores, shows and decides the model's pin suggestions; posts them through the
    messenger the platform adapter sets, and updates their messages once decided."""

    def __init__(
        self,
        store: Store,
        ops: BlockOps,
        proposals: Proposals,
        pins: PinsConfig,
        clock: Clock = utc_now,
    ) -> None:
        self._store = store
        self._ops = ops
        self._proposals = proposals
        self._pins = pins
        self._clock = clock
        self.messenger: Messenger | None = None

    # --- where, and whether ---------------------------------------------------------------------

    def place(self, context: MessageContext) -> Place | None:
        """Where this message's compaction would suggest pins, or None when it suggests none
        (`pins.suggest_on_compaction`, pins off here, blocks not sent to the model)."""
        mode, conversation = self._pins.suggest_on_compaction, context.conversation
        if mode == "off" or not context.speaker.pins_on or not self._pins.allow_prompt_injection:
            return None
        chat = conversation.chat_id or ""
        if conversation.kind is ChatKind.DIRECT and conversation.personal_scope:
            return Place(conversation.personal_scope, chat, group=False)
        if mode == "all" and conversation.kind is ChatKind.GROUP and conversation.shared_scope:
            return Place(conversation.shared_scope, chat, group=True)
        return None

    async def not_here(self, context: MessageContext) -> None:
        """Drop the note that suggestions wait for room where this chat's scope gets none at
        all now (`pins.suggest_on_compaction` off, or `dm` in a group; blocks not sent to the
        model): it would say something no longer true, and said once, it would not be said
        again when they come back. Not for a sender without pins: that is theirs, not the
        scope's."""
        conversation, mode = context.conversation, self._pins.suggest_on_compaction
        if not context.speaker.pins_on:
            return
        if conversation.kind is ChatKind.GROUP:
            scope, on = conversation.shared_scope, mode == "all"
        elif conversation.kind is ChatKind.DIRECT:
            scope, on = conversation.personal_scope, mode != "off"
        else:
            return
        if scope is None or (on and self._pins.allow_prompt_injection):
            return
        if FULL_NOTE in await self._store.notes(scope):
            await self._store.set_note(scope, FULL_NOTE, None, now=self._clock())

    async def has_room(self, place: Place) -> bool:
        """Whether the scope can take a new block (below its block limit and character
        budget). When it cannot, the chat is told once (until it has room again)."""
        blocks = await self._store.blocks([place.scope])
        limits = self._ops.policy.limits
        chars = sum(len(block.content) for block in blocks)
        full = len(blocks) >= limits.max_blocks or bool(
            limits.max_total_chars and chars >= limits.max_total_chars
        )
        told = FULL_NOTE in await self._store.notes(place.scope)
        now = self._clock()
        if not full:
            if told:
                await self._store.set_note(place.scope, FULL_NOTE, None, now=now)
            return True
        if not told:
            whose = "this group's shared blocks are" if place.group else "your blocks are"
            if len(blocks) >= limits.max_blocks:
                setting = "pins.max_blocks_per_session"
                now_at = f"{len(blocks)} of {limits.max_blocks}"
            else:
                setting = "pins.max_total_chars"
                now_at = f"{chars:,} of {limits.max_total_chars:,} characters"
            pin = "/pin shared" if place.group else "/pin"
            remove = f"Remove one with {pin} remove <label> to get suggestions again."
            said = f"No pins are suggested from the conversation while {whose} full"
            # The note stays until the next compaction finds room: no figure to go stale.
            note = f"{said} ({setting}). {remove}"
            await self._store.set_note(place.scope, FULL_NOTE, note, now=now)
            await self._post(place.chat, Reply(f"{said} ({now_at}, {setting}). {remove}"))
        return False

    # --- checking and offering --------------------------------------------------------------

    async def offer(
        self, context: MessageContext, place: Place, candidates: Sequence[Candidate]
    ) -> int:
        """Show the good ones of a compaction's suggestions (at most pins.suggest_max): in a DM
        one message each, in a group one proposal each. Returns how many were shown."""
        good = await self._good(place, candidates)
        shown = 0
        for candidate in good[: self._pins.suggest_max]:
            if place.group:
                # Nobody in the group asked for it: the model is its proposer, and says so.
                reason = candidate.reason.strip()
                outcome = await self._proposals.propose(
                    context,
                    candidate.label,
                    candidate.content,
                    reason=f"{IN_PROPOSALS}: {reason}" if reason else f"{IN_PROPOSALS}.",
                    proposer=MODEL,
                )
                if isinstance(outcome, Refused):
                    # The code, not the reason: a reason can quote what people wrote.
                    why = outcome.code or "refused"
                    log.info("a suggestion for %s was not proposed: %s", place.scope, why)
                    continue
            elif not await self._add(place, candidate):
                break
            shown += 1
        log.info(
            "compaction suggested %d pin(s) for %s, %d shown", len(candidates), place.scope, shown
        )
        return shown

    async def _good(self, place: Place, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates that break no rule and repeat nothing the scope holds, has pending,
        or declined, in the model's order."""
        blocks = await self._store.blocks([place.scope])
        labels = {label_key(block.label) for block in blocks}
        contents = {content_key(block.content) for block in blocks}
        budget = self._ops.policy.limits.max_total_chars
        room = budget - sum(len(block.content) for block in blocks) if budget else None
        if place.group:
            for proposal in await self._store.pending_proposals(place.scope):
                labels.add(label_key(proposal.new.label))
                contents.add(content_key(proposal.new.content))
            contents.update(map(content_key, await self._store.rejected_contents(place.scope)))
        else:
            for kept in await self._store.open_suggestions(place.scope):
                # Compared as content_key compares now, not as it did when they were stored.
                if kept.status is SuggestionStatus.DISMISSED:
                    contents.add(content_key(kept.new.content))
                elif self._clock() < kept.expires_at:
                    labels.add(label_key(kept.new.label))
                    contents.add(content_key(kept.new.content))
        good = []
        for candidate in candidates:
            if problem := self._problem(candidate, group=place.group):
                log.info("a suggestion for %s was left out: %s", place.scope, problem)
                continue
            if room is not None and len(candidate.content) > room:
                # A Pin could never save it while the blocks stay as they are.
                log.info("a suggestion for %s was left out: over pins.max_total_chars", place.scope)
                continue
            label, key = label_key(candidate.label), content_key(candidate.content)
            if label in labels or key in contents:
                continue
            labels.add(label)
            contents.add(key)
            good.append(candidate)
        return good

    def _problem(self, candidate: Candidate, *, group: bool) -> str | None:
        """Why a suggestion cannot be shown (a rule of /pin add, a credential), or None."""
        policy = self._ops.policy
        # In a group the reason follows IN_PROPOSALS, within the proposals' limit.
        most = MAX_REASON_CHARS - (len(IN_PROPOSALS) + 2 if group else 0)
        refused = (
            policy.label_problem(candidate.label)
            or policy.content_problem(candidate.content)
            or text_problem(candidate.reason, "reason", most)
        )
        if refused is not None:
            return refused.code or "rule"
        # Never a credential, in a DM too: a suggestion is the model's idea, not the user's.
        whole = f"{candidate.label} {candidate.content} {candidate.reason}"
        kind = credential_kind(whole)
        return None if kind is None else f"looks like {kind}"

    async def _add(self, place: Place, candidate: Candidate) -> bool:
        """Store one suggestion and post its message; False when the scope holds MAX_PENDING."""
        now = self._clock()
        new = NewSuggestion(
            place.scope,
            candidate.label,
            candidate.content,
            candidate.reason.strip(),
            content_key(candidate.content),
        )
        ttl = timedelta(hours=self._pins.proposal_ttl_hours)
        suggestion = await self._store.add_suggestion(
            new, now=now, expires_at=now + ttl, max_pending=MAX_PENDING
        )
        if suggestion is None:
            return False
        sent = await self._post(place.chat, self.shown(suggestion))
        if sent is not None:
            await self._store.set_suggestion_message(
                place.scope, suggestion.number, sent.chat, sent.message_id
            )
        return True

    async def shows(self, scope: str, number: int | None, message: Sent) -> bool:
        """Whether message is the one that shows suggestion number of scope (with None: any
        of its suggestions)."""
        if number is None:
            return await self._store.suggestion_at(scope, message.chat, message.message_id)
        suggestion = await self._store.suggestion(scope, number)
        return suggestion is not None and (suggestion.chat, suggestion.message_id) == (
            message.chat,
            message.message_id,
        )

    async def _post(self, chat: str, reply: Reply) -> Sent | None:
        """Post in chat; None when nothing could be posted. A platform's failure costs the
        message only (the suggestion stays listed by /pin suggestions), never the turn or the
        summary that the compaction is making."""
        if self.messenger is None or not chat:
            return None
        try:
            return await self.messenger.send(chat, reply)
        except Exception as error:  # any platform's failure: core knows none of their errors
            # The error's type only: what a platform says may quote the message.
            log.warning("posting a pin suggestion message failed (%s)", type(error).__name__)
            return None

    # --- showing --------------------------------------------------------------------------------

    def shown(self, suggestion: Suggestion, note: str = "") -> Reply:
        """The suggestion's message: what it would pin and why; with buttons while pending (and
        note, why a Pin did not save it), the outcome in their place once decided."""
        new, number = suggestion.new, suggestion.number
        level = default_level(False).value
        lines = [
            f"Pin suggestion #{number}, from our earlier conversation:",
            f"{one_line(new.label)}: {one_line(new.content)}",
        ]
        if new.reason:
            lines.append(f"Why: {one_line(new.reason)}")
        if suggestion.status is SuggestionStatus.PENDING:
            if note:
                lines.append(f"Not saved: {note}")
            hours = self._pins.proposal_ttl_hours
            lines.append(
                f"Pin saves it as a {level} block; Dismiss forgets it for good. Or send "
                f"/pin accept {number} or /pin dismiss {number} (within {hours} hours)."
            )
            buttons = (
                Button("Pin", tap_data(PIN, number)),
                Button("Dismiss", tap_data(DISMISS, number)),
            )
            return Reply("\n".join(lines), buttons=buttons)
        lines.append(
            {
                SuggestionStatus.PINNED: "Pinned: saved.",
                SuggestionStatus.DISMISSED: "Dismissed; it will not be suggested again.",
                SuggestionStatus.EXPIRED: "Expired; nothing was saved.",
            }[suggestion.status]
        )
        return Reply("\n".join(lines), buttons=())

    async def listing(self, target: Target) -> Outcome:
        """The pending suggestions of the speaker's DM; expired ones are closed on the way."""
        if target.group:
            return Refused(IN_GROUPS)
        pending = []
        for kept in await self._store.open_suggestions(target.scope):
            if kept.status is not SuggestionStatus.PENDING:
                continue
            if self._clock() >= kept.expires_at:
                await self._close(kept, SuggestionStatus.EXPIRED)
            else:
                pending.append(kept)
        if not pending:
            return Done(
                "No pin suggestions are waiting. When the conversation grows long and older "
                "messages are compacted, the model may suggest facts worth pinning."
            )
        lines = [f"Pin suggestions ({len(pending)}):"]
        for kept in pending:
            new = kept.new
            why = f" (why: {one_line(new.reason)})" if new.reason else ""
            lines.append(f"#{kept.number} {one_line(new.label)}: {one_line(new.content)}{why}")
        lines.append("/pin accept <n> pins one; /pin dismiss <n> forgets it.")
        return Done("\n".join(lines))

    # --- deciding -------------------------------------------------------------------------------

    async def decide(self, target: Target, number: int, *, pin: bool) -> Outcome:
        """Pin (through every rule of /pin add, at the DM's default level) or dismiss a pending
        suggestion. A pin that a rule refuses leaves it pending, and its message says why."""
        if target.group:
            return Refused(IN_GROUPS)
        suggestion = await self._store.suggestion(target.scope, number)
        if suggestion is None:
            return Refused(
                f"There is no pin suggestion #{number} here. Send /pin suggestions to see the "
                "waiting ones."
            )
        if suggestion.status is not SuggestionStatus.PENDING:
            return Refused(f"Suggestion #{number} was {_DECIDED[suggestion.status]} already.")
        if self._clock() >= suggestion.expires_at:
            await self._close(suggestion, SuggestionStatus.EXPIRED)
            return Refused(f"Suggestion #{number} expired; nothing was saved.")
        if not pin:
            await self._close(suggestion, SuggestionStatus.DISMISSED)
            return Done(f"Dismissed suggestion #{number}; it will not be suggested again.")
        new = suggestion.new
        outcome = await self._ops.add(target, new.label, new.content)
        if isinstance(outcome, Refused):
            await self._edit(suggestion, self.shown(suggestion, outcome.reason))
            return Refused(f"Suggestion #{number} was not saved: {outcome.reason}", outcome.code)
        # One chat's commands and taps run in order, so nothing decides it in between.
        await self._close(suggestion, SuggestionStatus.PINNED)
        return outcome

    async def _close(self, suggestion: Suggestion, status: SuggestionStatus) -> None:
        """Mark a suggestion decided and show the outcome in its message."""
        scope, number = suggestion.new.scope, suggestion.number
        if not await self._store.decide_suggestion(scope, number, status, now=self._clock()):
            return
        decided = await self._store.suggestion(scope, number)
        if decided is not None:
            await self._edit(decided, self.shown(decided))

    async def _edit(self, suggestion: Suggestion, reply: Reply) -> None:
        if not suggestion.message_id or self.messenger is None:
            return
        sent = Sent(suggestion.chat or "", suggestion.message_id)
        try:
            edited = await self.messenger.edit(sent, reply)
        except Exception as error:  # the decision stands; its message only is not updated
            log.warning(
                "updating the message of suggestion #%d failed (%s)",
                suggestion.number,
                type(error).__name__,
            )
            return
        if not edited:
            log.warning("could not update the message of suggestion #%d", suggestion.number)
