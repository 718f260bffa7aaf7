"""The model as counted: every call's outcome, its total time and the time to its first text."""

from __future__ import annotations

import time

from bot import metrics
from bot.llm.base import ChatModel, ModelReply, ModelRequest, Progress, TextSink


class MeteredModel:
    """A ChatModel that counts each call of the model it wraps (bot.metrics.model_call) under
    its label (an llm.models entry's name; None: the default model's, llm.model), and otherwise
    is that model."""

    def __init__(self, model: ChatModel, label: str | None = None) -> None:
        self.model = model
        self.label = label

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        """The wrapped model's answer, counted: ok, cut_off (a stream stopped by its time
        limit) or failed (any exception, ModelError included, which passes through)."""
        started = time.perf_counter()
        first: float | None = None
        counted_text = on_text
        if on_text is not None:
            sink = on_text

            async def counted(text: str) -> None:
                nonlocal first
                if first is None:
                    first = time.perf_counter() - started
                await sink(text)

            counted_text = counted
        try:
            reply = await self.model.complete(
                request, on_text=counted_text, on_progress=on_progress
            )
        except Exception:  # a cancelled call (a stop) is not the model failing
            metrics.model_call("failed", time.perf_counter() - started, first, self.label)
            raise
        outcome = "cut_off" if reply.cut_off else "ok"
        metrics.model_call(outcome, time.perf_counter() - started, first, self.label)
        return reply

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.model.close()


def metered(model: ChatModel, label: str | None = None) -> ChatModel:
    """model, counted under label when metrics are on (bot.metrics.enable came first); else
    model itself."""
    return MeteredModel(model, label) if metrics.active() is not None else model
