"""The default backend: needs no network or key and answers deterministically, naming the pinned
blocks that reached it, so a user can see exactly what the model was given."""

from __future__ import annotations

from bot.llm.base import ModelReply, ModelRequest, Progress, TextSink

SUMMARY_QUOTE_CHARS = 80  # how much of each user message an offline summary quotes


def _summary(request: ModelRequest) -> str:
    said = [content[:SUMMARY_QUOTE_CHARS] for role, content in request.summarised if role == "user"]
    return "[offline summary] the user said: " + " | ".join(said)


class OfflineChatModel:
    """Answers with the blocks it received, the history length and the user's words."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        """A deterministic reply describing the request (or summarising it, when asked to)."""
        if request.purpose == "summary":
            return ModelReply(_summary(request))
        if request.purpose == "suggestions":  # it reads no meaning, so it suggests nothing
            return ModelReply('{"suggestions": []}')
        # In the order the request shows them: the strong section (system prompt) first.
        seen = sorted(request.blocks, key=lambda b: b.level != "strong")
        blocks = [f"{b.label} ({b.level}, {b.scope})" for b in seen]
        messages = request.messages
        history = sum(1 for m in messages[1:-1] if m.get("role") in ("user", "assistant"))
        listed = "; ".join(blocks) if blocks else "none"
        return ModelReply(
            f"[offline model] pinned blocks: {listed}. "
            f"Earlier messages: {history}. You said: {request.user_text}"
        )

    async def close(self) -> None:
        """Nothing to release."""
