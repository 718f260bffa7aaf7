"""What a compaction asks the model: the summary of the older turns and, where
`pins.suggest_on_compaction` says so, facts from them worth a pin (bot.core.decisions.suggestions).

Suggestions come in the summary's own call (one tool the model must call with both) while the
model server takes tools; a server that refuses tools is asked for the summary alone and for the
suggestions in one call of their own (JSON text), from then on (each server of llm.models
learns it for itself). With `chat.compaction: drop` the suggestions are that one call. The calls
go to the conversation's model, as its turns do; each is held by the budgets and recorded as
compaction (UsageLedger); one that fails or is refused by a budget makes no suggestion."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from bot.config import Config
from bot.core.conversation.usage import BudgetUsedUp
from bot.core.decisions import Place, Suggestions
from bot.core.people import MessageContext
from bot.llm.base import ModelError, ModelReply, ModelRequest, ToolsRefused
from bot.llm.suggest import compaction_request, read_compaction, read_suggestions
from bot.llm.suggest import suggestions_request as alone_request
from bot.llm.summary import summary_request

log = logging.getLogger(__name__)
# One model call of a conversation, held and recorded by the ledger (ChatService.call).
Call = Callable[[MessageContext, ModelRequest], Awaitable[ModelReply]]
Entries = Sequence[tuple[str, str]]


class Compaction:
    """Summarises older turns and, where it is on, has the model suggest pins from them."""

    def __init__(
        self,
        config: Config,
        suggestions: Suggestions,
        call: Call,
        server: Callable[[MessageContext], str],
    ) -> None:
        self._config = config
        self._suggestions = suggestions
        self._call_model = call
        self._server = server  # which model server a conversation's calls go to
        # The model servers that refuse tools; learnt from each one's first refusal, for good.
        self._without_tools: set[str] = set()

    def _tools(self, context: MessageContext) -> bool:
        """Whether the conversation's model server takes tools (as far as is known)."""
        return self._server(context) not in self._without_tools

    async def summary(self, context: MessageContext, entries: Entries) -> str | None:
        """The summary of entries ((role, content) pairs), or None to drop them (compaction
        `drop`); suggestions are offered on the way. ModelError or BudgetUsedUp when the
        summary's call fails or a budget stops it."""
        place = self._suggestions.place(context)
        if place is None:
            await self._suggestions.not_here(context)
        elif not await self._suggestions.has_room(place):
            place = None
        if self._config.chat.compaction == "drop":
            if place is not None:
                await self._alone(context, place, entries)
            return None
        if place is not None and self._tools(context):
            summary = await self._combined(context, place, entries)
            if summary is not None:
                return summary
        reply = await self._call(context, summary_request(entries))
        summary = reply.text.strip()
        if place is not None and not self._tools(context):
            await self._alone(context, place, entries)
        return summary

    async def _combined(
        self, context: MessageContext, place: Place, entries: Entries
    ) -> str | None:
        """The summary and suggestions in one call; None when the summary must be asked for
        alone (the server refuses tools, or the answer could not be read)."""
        most = self._config.pins.suggest_max
        try:
            reply = await self._call(context, compaction_request(entries, most, group=place.group))
        except ToolsRefused as refused:
            self._without_tools.add(self._server(context))
            log.warning(
                "the model server refuses tools (%s): pin suggestions at compaction take one "
                "extra call each from now on",
                refused,
            )
            return None
        compacted = read_compaction(reply)
        if not compacted.readable or not compacted.summary:
            log.warning(
                "the model's compaction answer could not be read; asking for the summary alone, "
                "without suggestions"
            )
            return None
        await self._suggestions.offer(context, place, compacted.candidates)
        return compacted.summary

    async def _alone(self, context: MessageContext, place: Place, entries: Entries) -> None:
        """Suggestions in one call of their own; a failure costs the suggestions only."""
        request = alone_request(entries, self._config.pins.suggest_max, group=place.group)
        try:
            reply = await self._call(context, request)
        except (ModelError, BudgetUsedUp) as error:
            log.warning("no pin suggestions at this compaction: the call failed (%s)", error)
            return
        candidates = read_suggestions(reply.text)
        if candidates is None:
            log.warning(
                "no pin suggestions at this compaction: the model's answer held no JSON the "
                "suggestions could be read from"
            )
            return
        await self._suggestions.offer(context, place, candidates)

    async def _call(self, context: MessageContext, request: ModelRequest) -> ModelReply:
        return await self._call_model(context, request)
