"""One chat turn: the speaker's scopes, lifecycle, rendering, history (which entries go to the
model, and which are compacted when it grows too big), the model and its tool calls, the reply."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from bot import metrics
from bot.clock import Clock, utc_now
from bot.config import Config
from bot.core.blocks import BlockOps, BlockPolicy, Done, Lifecycle, count_refusal, shown_end
from bot.core.conversation.compaction import Compaction
from bot.core.conversation.render import SECTION_SEPARATOR, Rendered, Selection, render, select
from bot.core.conversation.tools import TOOL_SETS, PinTools, tool_message
from bot.core.conversation.usage import BudgetUsedUp, UsageLedger
from bot.core.decisions import Proposals, Suggestions
from bot.core.people import ChatKind, Conversation, MessageContext, is_shared_scope, sender_session
from bot.core.replies import Reply
from bot.llm.base import (
    ChatModel,
    Message,
    ModelError,
    ModelReply,
    ModelRequest,
    Progress,
    SentBlock,
    TextSink,
)
from bot.llm.router import Models, Route
from storage import Store
from storage.models import Block, HistoryEntry

log = logging.getLogger(__name__)
SUMMARY_ROLE = "summary"
SUMMARY_PREFIX = "Summary of our earlier conversation (older messages were compacted):\n"
# Every tool name pinbot offers (of every tool set).
OUR_TOOLS = frozenset(
    tool.name for tools in TOOL_SETS.values() for tool in (*tools.tools, tools.propose)
)
NO_ANSWER = "The model gave no answer. Please try again."
CUT_OFF = (
    "(Cut off: the model was still answering after {limit:g} seconds, the most "
    "llm.stream_timeout_s allows for one answer; above is what arrived.)"
)
CUT_OFF_EMPTY = (
    "The model was still answering after {limit:g} seconds, the most llm.stream_timeout_s "
    "allows for one answer, and nothing had arrived. Please try again."
)
FENCE = "```"
OVERFLOW = (
    "Your message and the pinned blocks here are too long for the model's context "
    "window{window}. Send a shorter message, or shorten or remove blocks (/pin status shows "
    "what they cost)."
)


def _overflow_reply(window: int | None) -> str:
    """The reply to a request that overflowed the model's context window with history
    compacted (or none): what is left is the message and the blocks."""
    return OVERFLOW.format(window=f" ({window:,} tokens)" if window else "")


def history_key(conversation: Conversation, *, per_sender: bool) -> str:
    """Where a conversation's history is kept: per chat (and topic), or per sender in groups
    when per_sender (`chat.history_per_sender`) is on."""
    key = conversation.session_key
    if per_sender and conversation.kind is ChatKind.GROUP and conversation.sender_id:
        key = sender_session(key, conversation.sender_id)
    return key


@dataclass(frozen=True)
class HistoryPlan:
    """History split into what is sent as it is and what must be compacted first."""

    kept: list[HistoryEntry]
    older: list[HistoryEntry]  # the summary (if any) and the oldest turns, to compact

    @property
    def needs_compaction(self) -> bool:
        """Whether anything has to be summarised or dropped before the request."""
        return bool(self.older)


def _turns(entries: Sequence[HistoryEntry]) -> list[list[HistoryEntry]]:
    turns: list[list[HistoryEntry]] = []
    for entry in entries:
        if entry.role == "user" or not turns:
            turns.append([entry])
        else:
            turns[-1].append(entry)
    return turns


def _size(entries: Sequence[HistoryEntry]) -> int:
    return sum(len(entry.content) for entry in entries)


def plan_history(
    entries: Sequence[HistoryEntry], max_chars: int, max_turns: int, keep_turns: int
) -> HistoryPlan:
    """Keep everything while history is within max_chars and max_turns; past either, keep the
    newest keep_turns turns that fit in max_chars and mark the rest (with any summary) as older."""
    summary = [e for e in entries if e.role == SUMMARY_ROLE]
    turns = _turns([e for e in entries if e.role != SUMMARY_ROLE])
    if _size(entries) <= max_chars and len(turns) <= max_turns:
        return HistoryPlan(list(entries), [])
    kept: list[HistoryEntry] = []
    count = 0
    for turn in reversed(turns):
        if count >= min(keep_turns, max_turns) or _size(kept) + _size(turn) > max_chars:
            break
        kept[:0] = turn
        count += 1
    older = summary + [e for turn in turns[: len(turns) - count] for e in turn]
    return HistoryPlan(kept, older)


def history_messages(entries: Sequence[HistoryEntry]) -> list[Message]:
    """History as chat messages; a summary becomes a user message that says what it is."""
    return [
        {"role": "user", "content": SUMMARY_PREFIX + entry.content}
        if entry.role == SUMMARY_ROLE
        else {"role": entry.role, "content": entry.content}
        for entry in entries
    ]


class _AfterTools(ModelError):
    """A model call failed after tools ran in the turn: asking the turn again would run its
    tools (and their changes) twice."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(
            error.user_message,
            str(error),
            overflow=error.overflow,
            context_window=error.context_window,
        )


class _Answer(NamedTuple):
    """What a turn's model calls answered ('' for nothing), and why they stopped early, if they
    did: a budget (refused) or the stream's time limit (cut_off)."""

    text: str
    stopped: str | None = None
    cut_off: bool = False


class TurnBlocks(NamedTuple):
    """The blocks of one turn: rendered, which went and why (None: pins or injection are off
    here), and those that ended with it (their owners are told in its reply)."""

    rendered: Rendered
    selection: Selection | None = None
    ended: Sequence[Block] = ()


def ended_notice(block: Block, policy: BlockPolicy) -> str:
    """What a block's owner is told, once, in the turn it ended with."""
    shared = is_shared_scope(block.scope)
    end = shown_end(block.ends_at) if block.ends_at else "its end"
    whose = "This group's shared block" if shared else "Your block"
    back = (
        f"A shared admin can bring it back with /pin shared edit {block.label} --for <duration>"
        if shared
        else f"/pin edit {block.label} --for <duration> (or --until <date>) brings it back"
    )
    return (
        f"({whose} '{block.label}' ended at {end} and is idle now: {policy.idle_notice()}. {back}.)"
    )


class ChatService:
    """Runs chat turns; turns of one conversation run in order, other conversations concurrently."""

    def __init__(
        self,
        store: Store,
        ops: BlockOps,
        config: Config,
        model: ChatModel | Models,
        usage: UsageLedger,
        clock: Clock = utc_now,
        proposals: Proposals | None = None,
        suggestions: Suggestions | None = None,
    ) -> None:
        self._store = store
        self._usage = usage
        self._lifecycle = Lifecycle(store, ops.policy, clock)
        self._policy = ops.policy
        self._tools = PinTools(ops, TOOL_SETS[config.llm.tool_names], proposals)
        self._config = config
        # A model alone serves every conversation; Models, each the one its group or topic
        # picked (MessageContext.model).
        self.models = model if isinstance(model, Models) else Models.single(model, config.llm)
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        if suggestions is None:
            proposals = proposals or Proposals(store, ops, config.pins, clock)
            suggestions = Suggestions(store, ops, proposals, config.pins, clock)
        self.compaction = Compaction(config, suggestions, self.call, self._server_of)

    def _lock(self, session: str) -> asyncio.Lock:
        lock = self._locks.get(session)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session] = lock
        return lock

    def history_key(self, conversation: Conversation) -> str:
        """Where this conversation's history is kept: per chat (and topic), or per sender in
        groups when `chat.history_per_sender` is on."""
        return history_key(conversation, per_sender=self._config.chat.history_per_sender)

    async def reset(self, conversation: Conversation) -> int:
        """Forget this conversation's history (never its blocks); returns entries deleted."""
        session = self.history_key(conversation)
        async with self._lock(session):
            return await self._store.clear_history(session)

    async def turn(
        self, context: MessageContext, text: str, on_text: TextSink | None = None
    ) -> Reply:
        """Send text to the model with the speaker's blocks and history; returns its answer.

        A failed model call (or one that answers nothing, or only whitespace) is a failed reply
        of one short English line, and leaves no history.
        """
        session = self.history_key(context.conversation)
        async with self._lock(session):
            stored = await self._store.history(session)
            turns = self._config.pins.trigger_turns
            recent = [e.content for e in stored if e.role == "user"][::-1][:turns]
            blocks = await self.blocks_for_turn(context, text, recent)
            rendered = blocks.rendered
            history = await self._compacted(context, session, stored)
            try:
                (answer, stopped, cut_off), pending = await self._ask(
                    context, session, rendered, history, text, on_text
                )
            except BudgetUsedUp as used_up:
                return Reply.refused(used_up.message)  # and the model was not asked
            except ModelError as error:
                log.warning("model call failed for %s: %s", session, error)
                if error.overflow:
                    return Reply.failed(_overflow_reply(error.context_window))
                return Reply.failed(error.user_message)
            if not answer.strip():  # blank shows as nothing: no message at all on a platform
                if stopped and not cut_off:
                    return Reply.refused(stopped)
                limit = self._config.llm.stream_timeout_s
                return Reply.failed(CUT_OFF_EMPTY.format(limit=limit) if cut_off else NO_ANSWER)
            if stopped and answer.count(FENCE) % 2:  # the note goes after a code block left open
                answer += f"\n{FENCE}"
            if cut_off:  # kept with its note: the next turn sees the answer was cut short
                answer = f"{answer}\n\n{stopped}"
            if pending is not None:  # the compaction the answer was asked with stands now
                await pending()
            sender = context.conversation.sender_id
            sent = blocks.selection.record() if blocks.selection else None
            await self._store.append_turn(
                session, text, answer, now=self._clock(), sender=sender, sent=sent
            )
            notes = [f"{stopped}"] if stopped and not cut_off else []  # the budget stopped it
            notes += [ended_notice(block, self._policy) for block in blocks.ended]
            return Reply("\n\n".join([answer, *notes]), formatted=True)

    async def _ask(
        self,
        context: MessageContext,
        session: str,
        rendered: Rendered,
        history: list[HistoryEntry],
        text: str,
        on_text: TextSink | None,
    ) -> tuple[_Answer, Callable[[], Awaitable[None]] | None]:
        """The turn's answer; a request that overflows the model's context window is asked once
        more with its history summarised, and then comes with what stores that summary, for
        the caller to run once the answer stands."""
        try:
            answer = await self._answer(context, self._request(rendered, history, text), on_text)
            return answer, None
        except ModelError as error:
            if not (error.overflow and history) or isinstance(error, _AfterTools):
                raise
            log.warning(
                "the request of %s overflowed the model's context window (%s); "
                "compacting its history and asking once more",
                session,
                error,
            )
            forced = await self._compaction(context, session, history, force=True)
            if forced is None:  # history stays as it was: the turn fails on its own
                raise
        history, pending = forced
        answer = await self._answer(context, self._request(rendered, history, text), on_text)
        return answer, pending

    def _request(
        self, rendered: Rendered, history: Sequence[HistoryEntry], text: str
    ) -> ModelRequest:
        """The turn's request: the messages with blocks and history, and what it carries."""
        return ModelRequest(
            self.build_messages(rendered, history, text),
            blocks=tuple(
                SentBlock(item.block.label, item.block.level.value, item.scope_name)
                for item in rendered.blocks
            ),
            user_text=text,
        )

    async def rendered_blocks(
        self, context: MessageContext, text: str, recent: Sequence[str] = ()
    ) -> Rendered:
        """The rendered sections of a turn's blocks (see blocks_for_turn)."""
        return (await self.blocks_for_turn(context, text, recent)).rendered

    async def blocks_for_turn(
        self, context: MessageContext, text: str, recent: Sequence[str] = ()
    ) -> TurnBlocks:
        """The blocks part of a turn: the speaker's scopes, their call counting, ends and idle
        cleanup, which blocks go (those sent always, and those whose keyword text or the user's
        recent messages, newest first, mention) and the rendered sections (empty when injection
        is off or pins do not apply here)."""
        pins = self._config.pins
        if not context.speaker.pins_on:
            return TurnBlocks(render([], text))
        conversation = context.conversation
        shared_scope, personal_scope = conversation.shared_scope, conversation.personal_scope
        scopes = [scope for scope in (shared_scope, personal_scope) if scope]
        found = await self._lifecycle.blocks_for_request(scopes)
        if not pins.allow_prompt_injection:
            return TurnBlocks(render([], text), ended=found.ended)
        shared = [b for b in found.blocks if b.scope == shared_scope]
        personal = [b for b in found.blocks if b.scope == personal_scope]
        chosen = select(
            shared, personal, [text, *recent], self._clock(), pins.triggered_budget_tokens
        )
        rendered = render(chosen.always, text, pins.header_label, chosen.fired)
        return TurnBlocks(rendered, chosen, found.ended)

    async def _compacted(
        self, context: MessageContext, session: str, entries: list[HistoryEntry]
    ) -> list[HistoryEntry]:
        """History within budget: older turns summarised (or dropped, as `chat.compaction`
        says or when that fails), pins suggested from them on the way (compaction.py); the
        calls' usage counts to the turn's sender. Stored at once."""
        compacted = await self._compaction(context, session, entries, force=False)
        assert compacted is not None  # an unforced compaction always has a result
        history, store = compacted
        if store is not None:
            await store()
        return history

    async def _compaction(
        self,
        context: MessageContext,
        session: str,
        entries: list[HistoryEntry],
        *,
        force: bool,
    ) -> tuple[list[HistoryEntry], Callable[[], Awaitable[None]] | None] | None:
        """The history to ask with and what stores it (None: nothing to store). force: every
        turn is summarised (the request overflowed the model's context window); then a failed
        summary drops nothing and there is no result (None), since the history may not be
        what overflowed, and the caller stores the result only once the model answers."""
        chat = self._config.chat
        plan = plan_history(
            entries,
            chat.history_max_chars,
            0 if force else chat.history_max_turns,
            chat.compaction_keep_turns,
        )
        if not plan.needs_compaction:
            return plan.kept, None
        summary = None
        try:
            older = [(e.role, e.content) for e in plan.older]
            summary = await self.compaction.summary(context, older) or None
        except (ModelError, BudgetUsedUp) as error:
            log.warning(
                "summarising history of %s failed (%s); %s",
                session,
                error,
                "keeping it as it is" if force else "dropping old turns",
            )
        now = self._clock()
        if summary is None:
            if force:
                return None
            turns = [e.id for e in plan.older if e.role != SUMMARY_ROLE]

            async def drop() -> None:
                await self._store.compact_history(session, turns, None, now=now)
                metrics.compacted("dropped")

            kept_summary = [e for e in plan.older if e.role == SUMMARY_ROLE]
            return kept_summary + plan.kept, drop
        older_ids = [e.id for e in plan.older]
        text = summary

        async def summarise() -> None:
            await self._store.compact_history(session, older_ids, text, now=now)
            metrics.compacted("summarized")

        return [HistoryEntry(id=0, role=SUMMARY_ROLE, content=summary), *plan.kept], summarise

    async def _answer(
        self, context: MessageContext, request: ModelRequest, on_text: TextSink | None
    ) -> _Answer:
        """Ask the model, running the agent tools it calls for a bounded number of rounds;
        returns its text ('' for none) and, when a budget stopped a later round or a stream
        outlasted llm.stream_timeout_s, why (the text is then what the model said before and
        what arrived). BudgetUsedUp when it stops the first call."""
        llm = self._config.llm
        # Tools only where the speaker can pin; then the same definitions in every round (a
        # stable, cacheable request), the last round forbidding calls with tool_choice "none".
        offered = llm.agent_tools and context.speaker.pins_on
        rounds = llm.max_tool_rounds if offered else 0
        tools = self._tools.offered(context) if offered else None
        messages = request.messages
        said: list[str] = []  # what the model wrote beside its tool calls
        for round_number in range(rounds + 1):
            last = round_number == rounds
            this_round = dataclasses.replace(
                request,
                messages=messages,
                tools=tools,
                tool_choice="none" if tools and last else None,
            )
            try:
                reply = await self.call(context, this_round, on_text)
            except BudgetUsedUp as used_up:
                if round_number == 0:
                    raise
                return _Answer("\n\n".join(said), used_up.message)
            except ModelError as error:
                if round_number == 0:
                    raise
                raise _AfterTools(error) from error
            if reply.cut_off:
                said += [reply.text] if reply.text.strip() else []
                note = CUT_OFF.format(limit=llm.stream_timeout_s)
                return _Answer("\n\n".join(said), note, cut_off=True)
            if not reply.tool_calls or last:
                return _Answer(reply.text)
            said += [reply.text] if reply.text.strip() else []
            messages = [*messages, reply.as_message()]
            for call in reply.tool_calls:
                outcome = count_refusal(await self._tools.call(context, call.name, call.arguments))
                done = "done" if isinstance(outcome, Done) else "refused"
                # The model names the tool: a name of ours, or whatever it made up (not logged).
                name = call.name if call.name in OUR_TOOLS else "unknown"
                log.info("tool %s session=%s %s", name, context.conversation.session_key, done)
                result = tool_message(outcome)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return _Answer("")

    async def call(
        self, context: MessageContext, request: ModelRequest, on_text: TextSink | None = None
    ) -> ModelReply:
        """One model call of the conversation (a turn's, a tool round's, a compaction's) to its
        model: the llm.models entry its group or topic picked, else llm's own. The ledger holds
        it against the budgets and records it under the model it asked for; it passes the
        progress callback that keeps the hold alive while the answer streams in."""
        route = self._route(context)

        def complete(alive: Progress) -> Awaitable[ModelReply]:
            return route.model.complete(request, on_text=on_text, on_progress=alive)

        return await self._usage.call(
            context, request, complete, model=route.served, label=route.entry
        )

    def _server_of(self, context: MessageContext) -> str:
        """Which model server the conversation's calls go to: its llm.models entry's name, or
        '' for llm's own."""
        return self._route(context).entry or ""

    def _route(self, context: MessageContext) -> Route:
        """Where the conversation's calls go (most pick no entry: the default, at once)."""
        return self.models.default if context.model is None else self.models.route(context.model)

    def build_messages(
        self, rendered: Rendered, history: Sequence[HistoryEntry], text: str
    ) -> list[Message]:
        """The exact messages array for the model: system prompt with the strong section, history,
        then the user's message with the context section before it."""
        system = self._config.llm.system_prompt
        if rendered.strong:
            system = f"{system}{SECTION_SEPARATOR}{rendered.strong}" if system else rendered.strong
        beside = [section for section in (rendered.triggered, rendered.context) if section]
        user = SECTION_SEPARATOR.join([*beside, text])
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        messages.extend(history_messages(history))
        messages.append({"role": "user", "content": user})
        return messages
