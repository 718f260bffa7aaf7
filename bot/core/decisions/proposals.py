"""Proposals: in a group the model may propose a shared block (pin_propose) and the group's
shared admins decide, with a tap on the proposal message's buttons or with `/pin shared approve`
or `reject`. A proposal meets every rule of an admin's own `/pin shared add` when it is made and
again when it is approved; it is decided once."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

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
from bot.core.people import Action, ChatKind, MessageContext
from bot.core.replies import Button, Messenger, Reply, Sent
from bot.secrets import has_marks, redact
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
from storage.proposals import ProposalStore

log = logging.getLogger(__name__)
APPROVE, REJECT = "approve", "reject"
TAP_PREFIX = "pinbot:proposal:"  # a button's data: pinbot:proposal:approve:3
MAX_REASON_CHARS = 300
MAX_NUMBER = 10**9  # the largest proposal number a tap or a command names
_DECIDED = {
    ProposalStatus.APPLIED: "approved",
    ProposalStatus.REFUSED: "approved, but could not be applied",
    ProposalStatus.REJECTED: "rejected",
    ProposalStatus.EXPIRED: "expired",
}
ADMINS_ONLY = "Only this group's shared admins can approve or reject proposals."


def tap_data(verb: str, number: int) -> str:
    """What a proposal button tells the bot when tapped."""
    return f"{TAP_PREFIX}{verb}:{number}"


def parse_tap(data: str) -> tuple[bool, int] | None:
    """(approve?, number) of a proposal button's data; None for data that is not one (forged
    data included: only ASCII digits make a number, as `/pin shared approve <n>` takes it;
    "²" or "١" are digits to str.isdigit, and int() fails on the first and reads the second)."""
    verb, _, number = data.removeprefix(TAP_PREFIX).partition(":")
    if not data.startswith(TAP_PREFIX) or verb not in (APPROVE, REJECT):
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,9}", number, flags=re.ASCII) or int(number) > MAX_NUMBER:
        return None
    return verb == APPROVE, int(number)


class Proposals:
    """Makes, lists and decides the proposals of a group's shared blocks; posts each proposal
    through the messenger the platform adapter sets, and updates that message once decided."""

    def __init__(
        self, store: ProposalStore, ops: BlockOps, pins: PinsConfig, clock: Clock = utc_now
    ) -> None:
        self._store = store
        self._ops = ops
        self._pins = pins
        self._clock = clock
        self.messenger: Messenger | None = None

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
            return Refused("proposals are for a group's shared blocks; use pin_set here.")
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
        if (
            existing is not None
            and shown_content(existing) == content
            and level
            in (
                None,
                existing.level,
            )
        ):
            return Refused(f"the shared block '{existing.label}' already has this content.")
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
        now = self._clock()
        seen = change.seen[label_key(label)]
        new = NewProposal(
            target.scope,
            existing.label if existing else label,
            content,
            level,
            priority,
            reason,
            context.actor if proposer is None else proposer,
            existing.rev if existing else None,
            existing.content if existing else None,
            seen.mark if seen is not None else None,
        )
        ttl = timedelta(hours=self._pins.proposal_ttl_hours)
        proposal = await self._store.add_proposal(
            new, now=now, expires_at=now + ttl, max_pending=self._pins.max_pending_proposals
        )
        if proposal is None:
            return Refused(
                f"this group already has {self._pins.max_pending_proposals} pending proposals "
                "(pins.max_pending_proposals); wait until an admin decides one."
            )
        metrics.proposal_written(target.change.channel)
        await self._post(conversation.chat_id or "", proposal)
        return Done(
            f"Proposal #{proposal.number} is posted in the group and waits for a shared admin "
            f"to approve or reject it (it expires in {self._pins.proposal_ttl_hours} hours). "
            "Nothing changes until then."
        )

    async def _post(self, chat: str, proposal: Proposal) -> None:
        """Post the proposal message; a platform's failure costs the message only (the
        proposal stays listed by /pin shared proposals), never the turn that made it."""
        if self.messenger is None:
            return
        try:
            sent = await self.messenger.send(chat, self.shown(proposal))
        except Exception as error:  # any platform's failure: core knows none of their errors
            # The error's type only: what a platform says may quote the message.
            log.warning("posting proposal #%d failed (%s)", proposal.number, type(error).__name__)
            return
        if sent is not None:
            await self._store.set_proposal_message(
                proposal.new.group_scope, proposal.number, sent.chat, sent.message_id
            )

    # --- reading --------------------------------------------------------------------------------

    async def listing(self, target: Target) -> Outcome:
        """The group's pending proposals, for every member; expired ones are closed on the way."""
        pending = []
        for proposal in await self._store.pending_proposals(target.scope):
            if self._clock() >= proposal.expires_at:
                await self._close(proposal, ProposalStatus.EXPIRED, by="", outcome="")
            else:
                pending.append(proposal)
        if not pending:
            return Done("This group has no pending proposals.")
        lines = [f"Pending proposals ({len(pending)}):"]
        for proposal in pending:
            lines.append(self._summary(proposal))
        lines.append("Shared admins: /pin shared approve <n> or /pin shared reject <n>.")
        return Done("\n".join(lines))

    def _summary(self, proposal: Proposal) -> str:
        new = proposal.new
        what = "replace" if new.base_rev is not None else "add"
        left = proposal.expires_at - self._clock()
        hours = max(1, round(left.total_seconds() / 3600))
        reason = f" Reason: {_unmarked(new.reason)}" if new.reason else ""
        content = _unmarked(new.content) if new.base_rev is None else redact(new.content)
        return f"#{proposal.number} {what} '{new.label}': {content}{reason} (expires in {hours} h)"

    def shown(self, proposal: Proposal) -> Reply:
        """The proposal message: what would change and why; with buttons while pending, the
        outcome in their place once decided."""
        new = proposal.new
        level = f" ({new.level.value})" if new.level else ""
        lines = [f"Proposal #{proposal.number} for this group's shared blocks:"]
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
                f"Shared admins decide: the buttons below, or /pin shared approve "
                f"{proposal.number} / reject {proposal.number}."
            )
            buttons = (
                Button("Approve", tap_data(APPROVE, proposal.number)),
                Button("Reject", tap_data(REJECT, proposal.number)),
            )
            return Reply("\n".join(lines), buttons=buttons)
        lines.append(self._outcome_line(proposal))
        return Reply("\n".join(lines), buttons=())

    @staticmethod
    def _outcome_line(proposal: Proposal) -> str:
        status, by = proposal.status, proposal.decided_by
        if status is ProposalStatus.APPLIED:
            return f"Approved by {by}: saved."
        if status is ProposalStatus.REFUSED:
            return f"Approved by {by}, but not saved: {proposal.outcome}"
        if status is ProposalStatus.REJECTED:
            return f"Rejected by {by}; nothing changed."
        return "Expired without a decision; nothing changed."

    # --- deciding -------------------------------------------------------------------------------

    async def may_decide(self, context: MessageContext) -> str | None:
        """Why the sender may not decide this group's proposals, or None."""
        return await context.speaker.refusal_for(Action.SHARED_WRITE)

    async def decide(self, target: Target, number: int, *, approve: bool) -> Outcome:
        """Approve (apply through the rules of `/pin shared`, as the approver) or reject a
        pending proposal; only the first decision counts, whichever process makes it."""
        if problem := await self._ops.may_change(target):
            return problem
        proposal = await self._store.proposal(target.scope, number)
        if proposal is None:
            return Refused(
                f"There is no proposal #{number} in this group. Send /pin shared proposals to "
                "see the pending ones."
            )
        if proposal.status is not ProposalStatus.PENDING:
            return Refused(f"Proposal #{number} was {_DECIDED[proposal.status]} already.")
        actor = target.change.actor
        if self._clock() >= proposal.expires_at:
            await self._close(proposal, ProposalStatus.EXPIRED, by="", outcome="")
            return Refused(f"Proposal #{number} expired without a decision; nothing changed.")
        if not approve:
            if not await self._close(proposal, ProposalStatus.REJECTED, by=actor, outcome=""):
                return await self._decided_first(target, number)
            return Done(f"Rejected proposal #{number}; nothing changed.")
        try:
            outcome = await self._apply(target, proposal)
        except AlreadyDecided:
            return await self._decided_first(target, number)
        if isinstance(outcome, Refused):
            if not await self._close(
                proposal, ProposalStatus.REFUSED, by=actor, outcome=outcome.reason
            ):
                return await self._decided_first(target, number)
            return Refused(
                f"Proposal #{number} could not be applied: {outcome.reason}", outcome.code
            )
        # Marked applied with the block change; this shows the outcome in its message.
        await self._close(proposal, ProposalStatus.APPLIED, by=actor, outcome="")
        return Done(f"Approved proposal #{number}. {outcome.message}")

    async def _decided_first(self, target: Target, number: int) -> Refused:
        """What the loser of two decisions made at once is told: the one that counted."""
        proposal = await self._store.proposal(target.scope, number)
        status = proposal.status if proposal else ProposalStatus.REJECTED
        return Refused(
            f"Proposal #{number} was {_DECIDED.get(status, 'decided')} already; nothing changed."
        )

    async def _apply(self, target: Target, proposal: Proposal) -> Outcome:
        """Carry out a proposal as the approver's change, on the block it was made against:
        one that changed since (or was removed, or re-added) is refused."""
        new = proposal.new
        blocks, marks = await self._ops.scope_now(target)
        existing = find_block(blocks, new.label)
        key = label_key(new.label)
        stale = refusal(Rule.STALE, target.where, label=new.label)
        if new.base_rev is None:
            if existing is not None:
                return stale
        elif (
            existing is None
            or marks.get(key, "") != new.base_version
            # Where no version is kept (retention), the block itself must still be the one
            # the proposal was made on.
            or existing.rev != new.base_rev
            or existing.content != new.base_content
        ):
            return stale
        change = _proposed(
            target,
            blocks,
            marks,
            new.label,
            new.content,
            new.level,
            new.priority,
            origin=Origin(proposal=proposal.number),
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

    async def _close(
        self, proposal: Proposal, status: ProposalStatus, *, by: str, outcome: str
    ) -> bool:
        """Mark a proposal decided and show the outcome in its message; False when another
        decision came first (its message shows that one already)."""
        scope, number = proposal.new.group_scope, proposal.number
        decided = await self._store.decide_proposal(
            scope, number, status, by=by, outcome=outcome, now=self._clock()
        )
        if not decided and status is not ProposalStatus.APPLIED:
            return False
        shown = await self._store.proposal(scope, number)
        if shown and shown.status is status and shown.message_id and self.messenger:
            sent = Sent(shown.chat or "", shown.message_id)
            if not await self.messenger.edit(sent, self.shown(shown)):
                log.warning("could not show the outcome of proposal #%d in its message", number)
        return decided


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
