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
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from bot.clock import Clock, utc_now
from bot.config import PinsConfig
from bot.core.blocks import (
    BlockOps,
    Done,
    Outcome,
    Refused,
    Rule,
    Target,
    default_level,
    refusal,
    text_problem,
)
from bot.core.decisions.decision import Decisions
from bot.core.decisions.proposals import MAX_REASON_CHARS, Proposals
from bot.core.people import ChatKind, MessageContext
from bot.core.replies import Reply, Sent
from bot.llm.suggest import Candidate
from bot.secrets import credential_kind
from storage import Store
from storage.decisions import PROPOSALS, SUGGESTIONS
from storage.models import (
    NewSuggestion,
    ProposalStatus,
    Suggestion,
    SuggestionStatus,
    label_key,
)

log = logging.getLogger(__name__)
MAX_PENDING = 20  # pending suggestions a scope holds at once; older ones expire meanwhile
MODEL = "model"  # who a group's proposal from a suggestion is from, as the audit trail says it
IN_PROPOSALS = "Suggested by the model at compaction"  # the start of such a proposal's reason
FULL_NOTE = "suggestions-full"  # the scope note that says suggestions wait for room
POSTING = "a pin suggestion message"  # what a failure to post is logged as


def is_suggestion_tap(data: str) -> bool:
    """Whether a button's data is a suggestion's (these buttons are only ever in DMs)."""
    return data.startswith(f"pinbot:{Suggestions.noun}:")


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


class Suggestions(Decisions[NewSuggestion, SuggestionStatus]):
    """Checks, stores, shows and decides the model's pin suggestions."""

    noun, verbs, _kind = "suggestion", ("pin", "dismiss"), SUGGESTIONS

    def __init__(
        self,
        store: Store,
        ops: BlockOps,
        proposals: Proposals,
        pins: PinsConfig,
        clock: Clock = utc_now,
    ) -> None:
        super().__init__(store, ops, pins, clock)
        self._proposals = proposals

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
            await self._post(place.chat, Reply(f"{said} ({now_at}, {setting}). {remove}"), POSTING)
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
            elif not await self._offer(place, candidate):
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
            ours = await self._store.decisions(PROPOSALS, place.scope, ("pending", "rejected"))
            for proposal in ours:
                if proposal.status is ProposalStatus.PENDING:
                    labels.add(label_key(proposal.new.label))
                contents.add(content_key(proposal.new.content))
        else:
            kept_ones = ("pending", "dismissed")
            for kept in await self._store.decisions(SUGGESTIONS, place.scope, kept_ones):
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

    async def _offer(self, place: Place, candidate: Candidate) -> bool:
        """Store one suggestion and post its message; False when the scope holds MAX_PENDING."""
        new = NewSuggestion(
            *(place.scope, candidate.label, candidate.content, candidate.reason.strip()),
            content_key(candidate.content),
        )
        if (added := await self._add(new, MAX_PENDING)) is None:
            return False
        await self._show(place.chat, added[0], POSTING)
        return True

    async def shows(self, scope: str, number: int | None, message: Sent) -> bool:
        """Whether message is the one that shows suggestion number of scope (with None: any
        of its suggestions)."""
        if number is None:
            return await self._store.shown_at(SUGGESTIONS, scope, message.chat, message.message_id)
        suggestion = await self._store.decision(SUGGESTIONS, scope, number)
        shown = suggestion and (suggestion.chat, suggestion.message_id)
        return shown == (message.chat, message.message_id)

    # --- showing --------------------------------------------------------------------------------

    def _shown(self, suggestion: Suggestion) -> list[str]:
        new, number = suggestion.new, suggestion.number
        lines = [
            f"Pin suggestion #{number}, from our earlier conversation:",
            f"{one_line(new.label)}: {one_line(new.content)}",
        ]
        if new.reason:
            lines.append(f"Why: {one_line(new.reason)}")
        outcomes = {
            SuggestionStatus.PENDING: f"Pin saves it as a {default_level(False).value} block; "
            f"Dismiss forgets it for good. Or send /pin accept {number} or /pin dismiss {number} "
            f"(within {self._pins.proposal_ttl_hours} hours).",
            SuggestionStatus.PINNED: "Pinned: saved.",
            SuggestionStatus.DISMISSED: "Dismissed; it will not be suggested again.",
            SuggestionStatus.EXPIRED: "Expired; nothing was saved.",
        }
        return [*lines, outcomes[suggestion.status]]

    async def listing(self, target: Target) -> Outcome:
        """The pending suggestions of the speaker's DM; expired ones are closed on the way."""
        if target.group:
            return refusal(Rule.SUGGESTIONS_DM_ONLY)
        empty = (
            "No pin suggestions are waiting. When the conversation grows long and older "
            "messages are compacted, the model may suggest facts worth pinning."
        )
        how = "/pin accept <n> pins one; /pin dismiss <n> forgets it."
        return await self._listing(target.scope, empty, "Pin suggestions", how)

    def _line(self, suggestion: Suggestion) -> str:
        new = suggestion.new
        why = f" (why: {one_line(new.reason)})" if new.reason else ""
        return f"#{suggestion.number} {one_line(new.label)}: {one_line(new.content)}{why}"

    # --- deciding -------------------------------------------------------------------------------

    async def decide(self, target: Target, number: int, *, pin: bool) -> Outcome:
        """Pin (through every rule of /pin add, at the DM's default level) or dismiss a pending
        suggestion. A pin that a rule refuses leaves it pending, and its message says why."""
        if target.group:
            return refusal(Rule.SUGGESTIONS_DM_ONLY)
        suggestion = await self._pending_one(target.scope, number)
        if isinstance(suggestion, Refused):
            return suggestion
        if not pin:
            await self._close(suggestion, SuggestionStatus.DISMISSED)
            return Done(f"Dismissed suggestion #{number}; it will not be suggested again.")
        outcome = await self._ops.add(target, suggestion.new.label, suggestion.new.content)
        if isinstance(outcome, Refused):
            await self._edit(suggestion, self.shown(suggestion, outcome.reason))
            why = outcome.reason
            return refusal(Rule.SUGGESTION_NOT_SAVED, number=number, because=why)
        # One chat's commands and taps run in order, so nothing decides it in between.
        await self._close(suggestion, SuggestionStatus.PINNED)
        return outcome


suggestion_tap = Suggestions.parse
