"""Proposals: in a group the model may propose a shared block (pin_propose) and the group's
shared admins decide, with a tap on the proposal message's buttons or with `/pin shared approve`
or `reject`. A proposal meets every rule of an admin's own `/pin shared add` when it is made and
again when it is approved; it is decided once."""

from __future__ import annotations

from dataclasses import replace

from bot import metrics
from bot.core.blocks import (
    RULE_TEXTS,
    Done,
    Outcome,
    Refused,
    Rule,
    Target,
    default_level,
    find_block,
    refusal,
    seen_of,
    shown_content,
    text_problem,
)
from bot.core.decisions.decision import _DECIDED, Decisions, Quoted
from bot.core.people import Action, ChatKind, MessageContext
from bot.secrets import has_marks, redact
from storage.decisions import PROPOSALS
from storage.errors import AlreadyDecided, Stale
from storage.models import (
    ABSENT,
    Block,
    BlockChange,
    BlockState,
    Channel,
    Level,
    NewProposal,
    Origin,
    Proposal,
    ProposalStatus,
    Seen,
    State,
    Wanted,
    label_key,
)

MAX_REASON_CHARS = 300
ADMINS_ONLY = RULE_TEXTS[Rule.ADMINS_ONLY]


class Proposals(Decisions[NewProposal, ProposalStatus]):
    """Makes, lists and decides the proposals of a group's shared blocks."""

    noun, verbs, _kind = "proposal", ("approve", "reject"), PROPOSALS

    # --- making ---------------------------------------------------------------------------------

    async def propose(
        self,
        context: MessageContext,
        label: str,
        content: str,
        *,
        level: Level | None = None,
        priority: int | None = None,
        reason: str = "",
        proposer: str | None = None,
    ) -> Outcome:
        """Propose to add a shared block, or to replace one's content; what the model is told.
        proposer: who the proposal is recorded as from (the speaker when None)."""
        conversation = context.conversation
        if conversation.kind is not ChatKind.GROUP:
            return refusal(Rule.PROPOSALS_SHARED_ONLY)
        target = Target.of(context, shared=True, channel=Channel.PROPOSAL)
        if isinstance(target, Refused):
            return target
        reason, content = reason.strip(), content.strip()
        policy = self._ops.policy
        if problem := text_problem(reason, "reason", MAX_REASON_CHARS) or policy.secret_problem(
            reason, group=True
        ):
            return problem
        blocks, marks = await self._ops.scope_now(target)
        existing = find_block(blocks, label)
        # Against what the group sees: "already has this content" of a sensitive block's stored
        # text would confirm a guess at what it hides.
        if existing and shown_content(existing) == content and level in (None, existing.level):
            return refusal(Rule.PROPOSAL_SAME, label=existing.label)
        # Unchanged content meets no content rule in the review; a right guess at a sensitive
        # block must be answered as a wrong one is.
        if (
            existing is not None
            and existing.sensitive
            and existing.content == content
            and (problem := policy.secret_problem(f"{existing.label} {content}", group=True))
        ):
            return problem
        new = NewProposal(
            *(target.scope, existing.label if existing else label, content, level, priority),
            *(reason, context.actor if proposer is None else proposer),
            *((existing.rev, existing.content) if existing else (None, None)),
        )
        change = _proposed(target, blocks, marks, new)
        # Every rule of /pin shared add but the approver's rights, which count when approving.
        if problem := await policy.review(change, target.where, speaker=None, blocks=blocks):
            return problem
        seen = change.seen[label_key(label)]
        new = replace(new, base_version=seen.mark if seen is not None else None)
        most = self._pins.max_pending_proposals
        if (added := await self._add(new, most)) is None:
            return refusal(Rule.PROPOSALS_FULL, limit=most)
        proposal, fresh = added
        if fresh:
            metrics.proposal_written(target.by.channel)
        # A platform's failure costs the message only: /pin shared proposals lists it still.
        await self._show(conversation.chat_id or "", proposal, f"proposal #{proposal.number}")
        return Done(
            f"Proposal #{proposal.number} is posted in the group and waits for a shared admin "
            f"to approve or reject it (it expires in {self._pins.proposal_ttl_hours} hours). "
            "Nothing changes until then."
        )

    # --- reading --------------------------------------------------------------------------------

    async def listing(self, target: Target) -> Outcome:
        """The group's pending proposals, for every member; expired ones are closed on the way."""
        how = "Shared admins: /pin shared approve <n> or /pin shared reject <n>."
        return await self._listing(
            target.scope, "This group has no pending proposals.", "Pending proposals", how
        )

    def _line(self, proposal: Proposal) -> str:
        new = proposal.new
        what = "replace" if new.base_rev is not None else "add"
        hours = max(1, round((proposal.expires_at - self._clock()).total_seconds() / 3600))
        reason = f" Reason: {_unmarked(new.reason)}" if new.reason else ""
        content = _unmarked(new.content) if new.base_rev is None else redact(new.content)
        return f"#{proposal.number} {what} '{new.label}': {content}{reason} (expires in {hours} h)"

    def _shown(self, proposal: Proposal) -> list[str]:
        new, number, by = proposal.new, proposal.number, proposal.decided_by
        level = f" ({new.level.value})" if new.level else ""
        lines = [f"Proposal #{number} for this group's shared blocks:"]
        if new.base_rev is None:
            lines += [f"New block '{new.label}'{level}:", Quoted(_unmarked(new.content))]
        else:
            lines += [
                f"Replace the content of '{new.label}'{level}.",
                # The block may be sensitive (a proposal does not record it): the group is shown
                # its content masked, as it is shown everywhere else in the group.
                *_titled("Now", redact(new.base_content or "")),
                *_titled("Proposed", redact(new.content)),
            ]
        if new.reason:
            lines += _titled("Reason", _unmarked(new.reason))
        outcomes = {
            ProposalStatus.PENDING: f"Shared admins decide: the buttons below, or /pin shared "
            f"approve {number} / reject {number}.",
            ProposalStatus.APPLIED: f"Approved by {by}: saved.",
            ProposalStatus.REFUSED: f"Approved by {by}, but not saved: {proposal.outcome}",
            ProposalStatus.REJECTED: f"Rejected by {by}; nothing changed.",
            ProposalStatus.EXPIRED: "Expired without a decision; nothing changed.",
        }
        return [*lines, outcomes[proposal.status]]

    # --- deciding -------------------------------------------------------------------------------

    async def may_decide(self, context: MessageContext) -> str | None:
        """Why the sender may not decide this group's proposals, or None."""
        return await context.speaker.refusal_for(Action.SHARED_WRITE)

    async def decide(self, target: Target, number: int, *, approve: bool) -> Outcome:
        """Approve (apply through the rules of `/pin shared`, as the approver) or reject a
        pending proposal; only the first decision counts, whichever process makes it."""
        if problem := await self._ops.may_change(target):
            return problem
        proposal = await self._pending_one(target.scope, number)
        if isinstance(proposal, Refused):
            return proposal
        actor = target.by.actor
        if not approve:
            if not await self._close(proposal, ProposalStatus.REJECTED, by=actor):
                return await self._decided_first(target, number)
            return Done(f"Rejected proposal #{number}; nothing changed.")
        try:
            outcome = await self._apply(target, proposal)
        except AlreadyDecided:
            return await self._decided_first(target, number)
        if isinstance(outcome, Refused):
            why = outcome.reason
            if not await self._close(proposal, ProposalStatus.REFUSED, by=actor, outcome=why):
                return await self._decided_first(target, number)
            return refusal(Rule.PROPOSAL_NOT_APPLIED, number=number, because=why)
        # Marked applied with the block change; this shows the outcome in its message.
        await self._update(target.scope, number, ProposalStatus.APPLIED)
        return Done(f"Approved proposal #{number}. {outcome.message}")

    async def _decided_first(self, target: Target, number: int) -> Refused:
        """What the loser of two decisions made at once is told: the one that counted."""
        proposal = await self._store.decision(PROPOSALS, target.scope, number)
        status = proposal.status if proposal else ProposalStatus.REJECTED
        return refusal(Rule.PROPOSAL_DECIDED, number=number, decided=_DECIDED.get(status, status))

    async def _apply(self, target: Target, proposal: Proposal) -> Outcome:
        """Carry out a proposal as the approver's change, on the block it was made against:
        one that changed since (or was removed, or re-added) is refused."""
        new = proposal.new
        blocks, marks = await self._ops.scope_now(target)
        existing = find_block(blocks, new.label)
        stale = refusal(Rule.STALE, target.where, label=new.label)
        if new.base_rev is None:
            if existing is not None:
                return stale
        elif (
            existing is None
            or marks.get(label_key(new.label), "") != new.base_version
            # Where no version is kept (retention), the block itself must still be the one
            # the proposal was made on.
            or existing.rev != new.base_rev
            or existing.content != new.base_content
        ):
            return stale
        change = _proposed(target, blocks, marks, new, Origin(proposal=proposal.number))
        try:
            applied = await self._ops.commit(target, change, blocks)
        except Stale:
            return stale
        if isinstance(applied, Refused):
            return applied
        (want,) = change.wanted
        if not applied or want.state is None:
            return Done("Nothing needed to change.")
        if existing is None:
            return Done(f"Saved {want.state.level.value} block '{want.label}'.")
        return Done(self._ops.changed_text(target, existing, want.state))


parse_tap = Proposals.parse


def _proposed(
    target: Target,
    blocks: list[Block],
    marks: dict[str, str],
    new: NewProposal,
    origin: Origin | None = None,
) -> BlockChange:
    """The change a proposal makes when approved: a new shared block, or new content (and level
    or priority, if given) of the existing one."""
    existing = find_block(blocks, new.label)
    seen: dict[str, Seen | None]
    if existing is None:
        level, priority = new.level or default_level(True), new.priority or 0
        state = BlockState(new.content, level, State.ACTIVE, priority)
        seen = {label_key(new.label): ABSENT}
    else:
        level = new.level or existing.level
        priority = existing.priority if new.priority is None else new.priority
        state = BlockState(new.content, level, existing.state, priority, existing.sensitive)
        seen = seen_of(blocks, marks, [existing.label])
    wanted = [Wanted(existing.label if existing else new.label, state)]
    return target.changed(wanted, seen, channel=Channel.PROPOSAL, origin=origin)


def _titled(title: str, text: str) -> list[str]:
    """A titled part of a proposal's message: on the title's line when it is one line, else
    under it as one quoted block (its lines are the content's, not the message's)."""
    if "\n" not in text:
        return [f"{title}: {text}"]
    return [f"{title}:", Quoted(text)]


def _unmarked(text: str) -> str:
    """text as the group may read it: a part marked `||…||` is hidden (with what else a
    sensitive block hides, since marks make the block sensitive)."""
    return redact(text) if has_marks(text) else text
