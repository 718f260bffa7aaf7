"""Executes `/pin` commands: reads (list, log, help) here, every change through BlockOps."""

from __future__ import annotations

from bot.clock import Clock, utc_now
from bot.core.blocks import (
    BlockOps,
    BlockPolicy,
    BlockVersions,
    Done,
    Outcome,
    Refused,
    Rule,
    Target,
    count_refusal,
    find_block,
    listing_note,
    refusal,
    shown,
    shown_content,
    timing_details,
)
from bot.core.commands.help import pin_help
from bot.core.commands.parse import LOG_DEFAULT, USAGE, PinCommand, Verb, split_command
from bot.core.commands.setting_words import setting_change
from bot.core.commands.status import INJECTION_OFF, ScopeStatus, StatusView, status_text
from bot.core.conversation import (
    Estimate,
    ScopedBlock,
    block_tokens,
    estimate,
    history_key,
    injected,
    why_text,
)
from bot.core.decisions import Proposals, Suggestions
from bot.core.people import Action, ChatKind, MessageContext, Role, refusal_for
from bot.core.replies import Reply
from storage import Store
from storage.models import Block, ChangeKind, Channel, Origin, State

NOTHING_SENT = "None of these blocks is sent to the model now: idle blocks are not."
RAW_IN_GROUP = (
    "/sticky raw shows a block as it is stored only in a private chat with the bot, where "
    "nobody else reads it; ask there. Nothing is shown here."
)
_STATE_VERBS = {
    Verb.IDLE: State.IDLE,
    Verb.ACTIVATE: State.ACTIVE,
    Verb.UNPIN: State.ACTIVE,
    Verb.PIN: State.PINNED,
}


class PinService:
    """The `/pin` commands over one store."""

    def __init__(
        self,
        store: Store,
        policy: BlockPolicy,
        clock: Clock = utc_now,
        *,
        history_per_sender: bool = False,
    ) -> None:
        self._store = store
        self._history_per_sender = history_per_sender
        self._policy = policy
        self._pins = policy.pins
        self._clock = clock
        self.ops = BlockOps(store, policy, clock)
        self.history = BlockVersions(store, self.ops)
        self.proposals = Proposals(store, self.ops, policy.pins, clock)
        self.suggestions = Suggestions(store, self.ops, self.proposals, policy.pins, clock)

    async def execute(self, context: MessageContext, command: PinCommand) -> Reply:
        """Run a parsed command for the message's sender.

        A reply that reports a change is given only after the change is committed.
        """
        speaker = context.speaker
        if not speaker.pins_on:
            return Reply.refused(speaker.refusal or refusal(Rule.PINS_OFF).reason)
        if command.shared and speaker.listed_role is Role.DM_USER:
            return Reply.refused(refusal_for(Role.DM_USER, Action.SHARED_READ))
        if command.verb is Verb.HELP:
            return Reply(
                pin_help(
                    shared=command.shared,
                    group=speaker.listed_role is not Role.DM_USER,
                    label_limit=self._pins.max_label_length,
                )
            )
        if command.verb is Verb.WHY:
            return Reply(await self._why(context))
        target = Target.of(context, shared=command.shared)
        if isinstance(target, Refused):
            return Reply.refused(target.reason)
        if command.verb is Verb.LIST:
            return Reply(await self._list(context, target))
        if command.verb is Verb.STATUS:
            return Reply(
                await self._status(context, shared_only=command.shared, preview=command.preview)
            )
        if command.verb is Verb.RAW:
            return await self._raw(context, target, command.label or "")
        if command.verb is Verb.LOG:
            return Reply(await self._log(target, command.count or LOG_DEFAULT))
        outcome = count_refusal(await self._outcome(target, command, context))
        if isinstance(outcome, Done):
            return Reply(outcome.message)
        return Reply.refused(outcome.reason)

    async def _outcome(
        self, target: Target, command: PinCommand, context: MessageContext
    ) -> Outcome:
        if command.verb is Verb.PROPOSALS:
            return await self.proposals.listing(target)
        if command.verb in (Verb.APPROVE, Verb.REJECT):
            deciding = Target.of(context, shared=True, channel=Channel.PROPOSAL)
            if isinstance(deciding, Refused):
                return deciding
            approve = command.verb is Verb.APPROVE
            return await self.proposals.decide(deciding, command.count or 0, approve=approve)
        if command.verb is Verb.SUGGESTIONS:
            return await self.suggestions.listing(target)
        if command.verb in (Verb.ACCEPT, Verb.DISMISS):
            pin = command.verb is Verb.ACCEPT
            return await self.suggestions.decide(target, command.count or 0, pin=pin)
        if command.verb is Verb.HISTORY:
            return await self.history.history(target, command.label or "")
        if command.verb is Verb.UNDO:
            return await self.history.undo(target)
        if command.verb is Verb.RESTORE:
            return await self.history.restore(target, command.label or "", command.count)
        return await self._write(target, command, context)

    async def _write(self, target: Target, command: PinCommand, context: MessageContext) -> Outcome:
        ops, label = self.ops, command.label or ""
        if command.verb is Verb.ADD:
            content, origin = command.content, None
            if content is None:
                replied = await self._replied(context, command, target)
                if isinstance(replied, Refused):
                    return replied
                content, origin = replied
            return await ops.add(
                target,
                label,
                content,
                level=command.level,
                pinned=command.pinned,
                priority=command.priority or 0,
                origin=origin,
                sensitive=command.sensitive,
                triggers=command.when or (),
                ends=command.ends,
            )
        if command.verb is Verb.SENSITIVE:
            return await ops.change(target, label, sensitive=command.sensitive)
        if command.verb is Verb.PRIORITY:
            return await ops.change(target, label, priority=command.priority)
        if command.verb is Verb.CLEAR:
            return await ops.clear(target, confirm=command.confirm)
        if command.verb is Verb.REMOVE:
            return await ops.remove(target, label)
        if command.verb is Verb.EDIT:
            sensitive = True if command.sensitive else None  # without the flag: as it is
            return await ops.change(
                target,
                label,
                content=command.content,  # None: only its keywords or end change
                sensitive=sensitive,
                triggers=command.when,
                ends=command.ends,
            )
        if command.verb is Verb.LEVEL:
            return await ops.change(target, label, level=command.level)
        return await ops.change(target, label, state=_STATE_VERBS[command.verb])

    async def _replied(
        self, context: MessageContext, command: PinCommand, target: Target
    ) -> tuple[str, Origin] | Refused:
        """The content of an add sent as a reply without content: the replied message's text
        (or its quoted part), with where it came from; or why it cannot be."""
        quoted = await context.replied() if context.replied else None
        if quoted is None:
            usage = USAGE["add"] if command.level is None else USAGE["add-strong"]
            return refusal(
                Rule.ADD_NEEDS_CONTENT,
                target.where,
                label=command.label,
                usage=usage.removeprefix("/pin "),
            )
        if quoted.problem:
            return refusal(Rule.REPLY_UNREADABLE, problem=quoted.problem)
        text = (quoted.text or "").strip()
        if not text:
            return refusal(Rule.REPLY_NO_TEXT)
        if split_command(text)[0] in ("pin", "sticky"):
            return refusal(Rule.REPLY_COMMAND)
        limit = self._pins.max_content_length
        if len(text) > limit:
            return refusal(Rule.REPLY_TOO_LONG, length=len(text), limit=limit)
        return text, Origin(quoted.message_id, quoted.author)

    async def _log(self, target: Target, count: int) -> str:
        entries = await self._store.audit_log(target.scope, count)
        if not entries:
            return "No changes to this group's shared blocks or settings are on record."
        lines = [
            f"Last {len(entries)} change(s) to this group's shared blocks and settings, "
            "newest first:"
        ]
        for entry in entries:
            when = entry.at.strftime("%Y-%m-%d %H:%M UTC")
            if entry.kind is ChangeKind.SETTING:  # the group's own setting, in words
                lines.append(f"{when} · {entry.actor} · {setting_change(entry)}")
                continue
            lines.append(f"{when} · {entry.actor} · {entry.action} '{entry.label}'")
            if entry.old_content is not None and entry.old_content != entry.new_content:
                lines.append(f"  before: {entry.old_content}")
            if entry.new_content is not None:
                lines.append(f"  after: {entry.new_content}")
        return "\n".join(lines)

    async def _blocks_here(self, context: MessageContext) -> tuple[list[Block], list[Block]]:
        """The group's shared and the speaker's personal blocks here, in one read."""
        conversation = context.conversation
        shared_scope, personal_scope = conversation.shared_scope, conversation.personal_scope
        blocks = await self._store.blocks([s for s in (shared_scope, personal_scope) if s])
        shared = [b for b in blocks if b.scope == shared_scope]
        return shared, [b for b in blocks if b.scope == personal_scope]

    async def _list(self, context: MessageContext, target: Target) -> str:
        shared, personal = await self._blocks_here(context)
        blocks = shared if target.shared else personal
        if not blocks:
            return f"{target.empty()} Add one with {target.command('add')} <label> <content>."
        limit = self._pins.max_blocks_per_session
        lines = [f"{target.noun().capitalize()} ({len(blocks)} of {limit}):"]
        live = injected(blocks)
        in_order = live + [b for b in blocks if b.state is State.IDLE]
        for number, block in enumerate(in_order, start=1):
            details = [block.level.value, block.state.value]
            if block.priority:
                details.append(f"priority {block.priority}")
            if note := listing_note(block):
                details.append(note)
            details += timing_details(block, self._clock())
            lines.append(f"{number}. {block.label} ({', '.join(details)})")
            lines.append(shown_content(block))
        if not self._pins.allow_prompt_injection:
            lines.append(INJECTION_OFF)
        elif self._pins.token_warning_threshold:
            tokens = estimate(shared, personal, self._pins.header_label, self._clock())
            lines.extend(self._estimate_lines(target, tokens))
        return "\n".join(lines)

    def _estimate_lines(self, target: Target, tokens: Estimate) -> list[str]:
        """What these blocks add to every request, and the total with the wrappers (counted
        once) and the other scope here: parts that add up to the total."""
        own_name, other_name = ("shared", "personal") if target.shared else ("personal", "shared")
        sent = any(cost.item.scope_name == own_name for cost in tokens.blocks)
        own = tokens.of_scope(own_name)
        wrappers = f"the wrappers (about {tokens.wrapper:,})"
        if not target.group:
            lines = [
                f"These blocks add about {own:,} tokens to every request, and the wrappers "
                f"around them about {tokens.wrapper:,}: about {tokens.total:,} in all."
                if sent
                else NOTHING_SENT
            ]
        else:
            other = (
                f"your personal blocks (about {tokens.personal:,})"
                if target.shared
                else f"this group's shared blocks (about {tokens.shared:,})"
            )
            others_sent = any(cost.item.scope_name == other_name for cost in tokens.blocks)
            if sent:
                lines = [
                    f"These blocks add about {own:,} tokens to every request here; with "
                    f"{other + ' and ' if others_sent else ''}{wrappers}, every request here "
                    f"carries about {tokens.total:,} tokens of pinned blocks."
                ]
            else:
                lines = [NOTHING_SENT]
                if others_sent:
                    lines.append(
                        f"Every request here carries about {tokens.total:,} tokens of pinned "
                        f"blocks: {other} and {wrappers}."
                    )
        if warning := self._policy.token_warning(tokens.total):
            lines.append(warning)
        return lines

    async def _why(self, context: MessageContext) -> str:
        """Which blocks went with the speaker's last request here, and why."""
        conversation = context.conversation
        session = history_key(conversation, per_sender=self._history_per_sender)
        stored = await self._store.last_sent(session, conversation.sender_id)
        group = conversation.shared_scope is not None
        shared, personal = await self._blocks_here(context)
        figures = {
            (name, block.label): block_tokens(ScopedBlock(shown(block), name))
            for blocks, name in ((shared, "shared"), (personal, "personal"))
            for block in blocks
        }
        budget = self._pins.triggered_budget_tokens
        return why_text(stored, group=group, budget=budget, figures=figures)

    async def _raw(self, context: MessageContext, target: Target, label: str) -> Reply:
        """A block of the speaker's as it is stored, sensitive or not: only in a DM, where
        nobody else reads the answer."""
        if context.conversation.kind is not ChatKind.DIRECT:  # a channel or unknown chat too
            return Reply.refused(RAW_IN_GROUP)
        block = find_block(await self.ops.blocks(target), label)
        if block is None:
            return Reply.refused(refusal(Rule.MISSING, target.where, label=label).reason)
        return Reply(f"Block '{block.label}' as stored:\n{block.content}")

    async def _status(
        self, context: MessageContext, *, shared_only: bool, preview: bool = False
    ) -> str:
        """The status view of every scope that applies to the speaker here; with shared_only
        the shared blocks are listed, and the speaker's own only counted in the total; with
        preview, each listed block's first characters (redacted if it is sensitive)."""
        shared, personal = await self._blocks_here(context)
        conversation = context.conversation
        scopes = []
        notes: list[str] = []
        if conversation.shared_scope:
            calls = await self._store.model_calls(conversation.shared_scope)
            title = "This group's shared blocks"
            scopes.append(ScopeStatus("shared", title, shared, calls))
            kept = await self._store.notes(conversation.shared_scope)
            # A note named with a leading "." is the bot's own bookkeeping, not said.
            notes = [text for name, text in kept.items() if not name.startswith(".")]
        if conversation.personal_scope:
            title = (
                "Your personal blocks in this group" if conversation.shared_scope else "Your blocks"
            )
            calls = 0 if shared_only else await self._store.model_calls(conversation.personal_scope)
            scopes.append(ScopeStatus("personal", title, personal, calls, listed=not shared_only))
        tokens = (
            estimate(shared, personal, self._pins.header_label, self._clock())
            if self._pins.allow_prompt_injection
            else None
        )
        view = StatusView(
            scopes, tokens, group=conversation.shared_scope is not None, preview=preview
        )
        text = status_text(view, self._policy, self._clock())
        return "\n".join([text, *(f"Note: {note}" for note in notes)])
