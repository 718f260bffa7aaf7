"""Proposals: in a group the model may propose a shared block (pin_propose) and the group's
shared admins decide, with a tap on the proposal message's buttons or with `/pin shared approve`
or `reject`. A proposal meets every rule of an admin's own `/pin shared add` when it is made and
again when it is approved; it is decided once."""

from __future__ import annotations

from bot import metrics
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
    find_block,
    refusal,
    seen_of,
    shown_content,
    text_problem,
)
from bot.core.decisions.decision import Decisions, Taps, _refused, _said
from bot.core.people import Action, ChatKind, MessageContext
from bot.core.replies import Reply
from bot.secrets import has_marks, redact
from storage import Store
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

TAPS = Taps("pinbot:proposal:", "approve", "reject")  # a button's data: pinbot:proposal:approve:3
parse_tap = TAPS.parse
MAX_REASON_CHARS = 300
ADMINS_ONLY = "Only this group's shared admins can approve or reject proposals."


class Proposals(Decisions[NewProposal, ProposalStatus]):
    """Makes, lists and decides the proposals of a group's shared blocks."""

    noun = "proposal"

    def __init__(
        self, store: Store, ops: BlockOps, pins: PinsConfig, clock: Clock = utc_now
    ) -> None:
        super().__init__(store, PROPOSALS, ops, pins, clock)

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
            return _refused("not-a-group")
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
            return _refused("same-content", label=existing.label)
        # Unchanged content meets no content rule in the review; a right guess at a sensitive
        # block must be answered as a wrong one is.
        if (
            existing is not None
            and existing.sensitive
            and existing.content == content
            and (problem := policy.secret_problem(f"{existing.label} {content}", group=True))
        ):
            return problem
        change = _proposed(target, blocks, marks, label, content, level, priority)
        # Every rule of /pin shared add but the approver's rights, which count when approving.
        if problem := await policy.review(change, target.where, speaker=None, blocks=blocks):
            return problem
        seen = change.seen[label_key(label)]
        new = NewProposal(
            *(target.scope, existing.label if existing else label, content, level, priority),
            *(reason, context.actor if proposer is None else proposer),
            existing.rev if existing else None,
            existing.content if existing else None,
            seen.mark if seen is not None else None,
        )
        most = self._pins.max_pending_proposals
        if (proposal := await self._add(new, most)) is None:
            return _refused("too-many-proposals", most=most)
        metrics.proposal_written(target.change.channel)
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
        pending = await self._pending(target.scope)
        if not pending:
            return Done("This group has no pending proposals.")
        lines = [f"Pending proposals ({len(pending)}):"]
        for proposal in pending:
            new = proposal.new
            what = "replace" if new.base_rev is not None else "add"
            left = proposal.expires_at - self._clock()
            hours = max(1, round(left.total_seconds() / 3600))
            reason = f" Reason: {_unmarked(new.reason)}" if new.reason else ""
            content = _unmarked(new.content) if new.base_rev is None else redact(new.content)
            lines.append(
                f"#{proposal.number} {what} '{new.label}': {content}{reason} (expires in {hours} h)"
            )
        lines.append("Shared admins: /pin shared approve <n> or /pin shared reject <n>.")
        return Done("\n".join(lines))

    def shown(self, proposal: Proposal) -> Reply:
        """The proposal message: what would change and why; with buttons while pending, the
        outcome in their place once decided."""
        new, number, by = proposal.new, proposal.number, proposal.decided_by
        level = f" ({new.level.value})" if new.level else ""
        lines = [f"Proposal #{number} for this group's shared blocks:"]
        if new.base_rev is None:
            lines += [f"New block '{new.label}'{level}:", _unmarked(new.content)]
        else:
            lines += [
                f"Replace the content of '{new.label}'{level}.",
                # The block may be sensitive (a proposal does not record it): the group is shown
                # its content masked, as it is shown everywhere else in the group.
                f"Now: {redact(new.base_content or '')}",
                f"Proposed: {redact(new.content)}",
            ]
        if new.reason:
            lines.append(f"Reason: {_unmarked(new.reason)}")
        if proposal.status is ProposalStatus.PENDING:
            lines.append(
                f"Shared admins decide: the buttons below, or /pin shared approve {number} / "
                f"reject {number}."
            )
            return Reply("\n".join(lines), buttons=TAPS.buttons(number, "Approve", "Reject"))
        lines.append(
            {
                ProposalStatus.APPLIED: f"Approved by {by}: saved.",
                ProposalStatus.REFUSED: f"Approved by {by}, but not saved: {proposal.outcome}",
                ProposalStatus.REJECTED: f"Rejected by {by}; nothing changed.",
            }.get(proposal.status, "Expired without a decision; nothing changed.")
        )
        return Reply("\n".join(lines), buttons=())

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
        actor = target.change.actor
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
            return _refused("proposal-not-applied", outcome.code, number=number, why=why)
        # Marked applied with the block change; this shows the outcome in its message.
        await self._update(target.scope, number, ProposalStatus.APPLIED)
        return Done(f"Approved proposal #{number}. {outcome.message}")

    async def _decided_first(self, target: Target, number: int) -> Refused:
        """What the loser of two decisions made at once is told: the one that counted."""
        proposal = await self._store.decision(PROPOSALS, target.scope, number)
        status = proposal.status if proposal else ProposalStatus.REJECTED
        return _refused("proposal-decided-first", number=number, decided=_said(status))

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
        origin = Origin(proposal=proposal.number)
        change = _proposed(
            target, blocks, marks, new.label, new.content, new.level, new.priority, origin
        )
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


def _proposed(
    target: Target,
    blocks: list[Block],
    marks: dict[str, str],
    label: str,
    content: str,
    level: Level | None,
    priority: int | None,
    origin: Origin | None = None,
) -> BlockChange:
    """The change a proposal makes when approved: a new shared block, or new content (and level
    or priority, if given) of the existing one."""
    existing = find_block(blocks, label)
    seen: dict[str, Seen | None]
    if existing is None:
        state = BlockState(content, level or default_level(True), State.ACTIVE, priority or 0)
        seen = {label_key(label): ABSENT}
    else:
        state = BlockState(
            content,
            level or existing.level,
            existing.state,
            existing.priority if priority is None else priority,
            existing.sensitive,
        )
        seen = seen_of(blocks, marks, [existing.label])
    wanted = [Wanted(existing.label if existing else label, state)]
    return target.changed(wanted, seen, channel=Channel.PROPOSAL, origin=origin)


def _unmarked(text: str) -> str:
    """text as the group may read it: a part marked `||…||` is hidden (with what else a
    sensitive block hides, since marks make the block sensitive)."""
    return redact(text) if has_marks(text) else text
