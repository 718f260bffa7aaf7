"""Proposals: in a group the model may propose a shared block (pin_propose) and the group's
shared admins decide, with a tap on the proposal message's buttons or with `/pin shared approve`
or `reject`. A proposal meets every rule of an admin's own `/pin shared add` when it is made and
again when it is approved; it is decided once."""

from __future__ import annotations

import logging
from datetime import timedelta

from bot.config import PinsConfig
from bot.core.blocks import BlockOps, Done, Outcome, Refused, Target, find_block
from bot.core.clock import Clock, utc_now
from bot.core.context import MessageContext
from bot.core.conversation import ChatKind
from bot.core.permissions import Action
from bot.core.replies import Button, Messenger, Reply, Sent
from storage.models import Channel, Level, NewProposal, Origin, Proposal, ProposalStatus
from storage.proposals import ProposalStore

log = logging.getLogger(__name__)
APPROVE, REJECT = "approve", "reject"
TAP_PREFIX = "pinbot:proposal:"  # a button's data: pinbot:proposal:approve:3
MAX_REASON_CHARS = 300
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
    """(approve?, number) of a proposal button's data; None for data that is not one."""
    verb, _, number = data.removeprefix(TAP_PREFIX).partition(":")
    if not data.startswith(TAP_PREFIX) or verb not in (APPROVE, REJECT) or not number.isdigit():
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
    ) -> Outcome:
        """Propose to add a shared block, or to replace one's content; what the model is told."""
        conversation = context.conversation
        if conversation.kind is not ChatKind.GROUP:
            return Refused("proposals are for a group's shared blocks; use pin_set here.")
        target = Target.of(context, shared=True, channel=Channel.PROPOSAL)
        if isinstance(target, Refused):
            return target
        reason = reason.strip()
        if len(reason) > MAX_REASON_CHARS:
            return Refused(f"the reason is over {MAX_REASON_CHARS} characters; shorten it.")
        content = content.strip()
        policy = self._ops.policy
        if problem := policy.block_problem(label, content, priority or 0, group=True):
            return Refused(problem)
        blocks = await self._ops.blocks(target)
        existing = find_block(blocks, label)
        if existing is None and len(blocks) >= policy.limits.max_blocks:
            return Refused(
                f"the group's shared blocks are at their limit of {policy.limits.max_blocks}; "
                "an admin must remove one first."
            )
        if existing is not None and existing.content == content and level in (None, existing.level):
            return Refused(f"the shared block '{existing.label}' already has this content.")
        if problem := policy.budget_problem(blocks, existing, content):
            return Refused(problem)
        now = self._clock()
        new = NewProposal(
            target.scope,
            existing.label if existing else label,
            content,
            level,
            priority,
            reason,
            context.actor,
            existing.rev if existing else None,
            existing.content if existing else None,
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
        await self._post(conversation.chat_id or "", proposal)
        return Done(
            f"Proposal #{proposal.number} is posted in the group and waits for a shared admin "
            f"to approve or reject it (it expires in {self._pins.proposal_ttl_hours} hours). "
            "Nothing changes until then."
        )

    async def _post(self, chat: str, proposal: Proposal) -> None:
        if self.messenger is None:
            return
        sent = await self.messenger.send(chat, self.shown(proposal))
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
        reason = f" Reason: {new.reason}" if new.reason else ""
        return (
            f"#{proposal.number} {what} '{new.label}': {new.content}{reason} (expires in {hours} h)"
        )

    def shown(self, proposal: Proposal) -> Reply:
        """The proposal message: what would change and why; with buttons while pending, the
        outcome in their place once decided."""
        new = proposal.new
        level = f" ({new.level.value})" if new.level else ""
        lines = [f"Proposal #{proposal.number} for this group's shared blocks:"]
        if new.base_rev is None:
            lines += [f"New block '{new.label}'{level}:", new.content]
        else:
            lines += [
                f"Replace the content of '{new.label}'{level}.",
                f"Now: {new.base_content}",
                f"Proposed: {new.content}",
            ]
        if new.reason:
            lines.append(f"Reason: {new.reason}")
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
        pending proposal; only the first decision counts."""
        if refusal := await self._ops.write_refusal(target):
            return refusal
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
                return Refused(f"Proposal #{number} was decided already.")
            return Done(f"Rejected proposal #{number}; nothing changed.")
        outcome = await self._apply(target, proposal)
        if isinstance(outcome, Refused):
            await self._close(proposal, ProposalStatus.REFUSED, by=actor, outcome=outcome.reason)
            return Refused(f"Proposal #{number} could not be applied: {outcome.reason}")
        # Applied with the block change; this marks one that changed nothing (same content).
        await self._close(proposal, ProposalStatus.APPLIED, by=actor, outcome="")
        return Done(f"Approved proposal #{number}. {outcome.message}")

    async def _apply(self, target: Target, proposal: Proposal) -> Outcome:
        new, origin = proposal.new, Origin(proposal=proposal.number)
        if new.base_rev is None:
            return await self._ops.add(
                target,
                new.label,
                new.content,
                level=new.level,
                priority=new.priority or 0,
                origin=origin,
            )
        return await self._ops.change(
            target,
            new.label,
            content=new.content,
            level=new.level,
            priority=new.priority,
            origin=origin,
            if_rev=new.base_rev,
        )

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
