"""The downstream model as the core sees it: chat messages (and tools) in, one reply out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
Tool = dict[str, Any]
TextSink = Callable[[str], Awaitable[None]]
# Called as a streamed answer arrives (its opening and each chunk): the call is still alive.
Progress = Callable[[], Awaitable[None]]


class ModelError(Exception):
    """The model could not answer; `user_message` is the one short English line users see.
    `overflow`: the request did not fit the model's context window (`context_window` tokens,
    when the server said)."""

    def __init__(
        self,
        user_message: str,
        detail: str = "",
        *,
        overflow: bool = False,
        context_window: int | None = None,
    ) -> None:
        super().__init__(detail or user_message)
        self.user_message = user_message
        self.overflow = overflow
        self.context_window = context_window


class ToolsRefused(ModelError):
    """The model server refused a request because it offered tools (a server without tool
    support): the same request without tools may be answered."""


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for; arguments are its raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    """What one model call cost, in tokens as the server reported them (or estimated, at about
    4 characters a token, when it reported nothing)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # of the prompt tokens, how many the server served from its cache
    estimated: bool = False

    @property
    def billed_tokens(self) -> int:
        """Prompt plus completion tokens: what budgets count."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ModelReply:
    """The model's answer: text, the tool calls it wants made before it answers further, and
    the usage the server reported (None when it reported none)."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    # A stream stopped by llm.stream_timeout_s: text is what arrived, tool calls are dropped.
    cut_off: bool = False

    def as_message(self) -> Message:
        """The assistant message that records this reply in a follow-up request."""
        message: Message = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


@dataclass(frozen=True)
class SentBlock:
    """A pinned block as a request carries it: which one, at which level, from which scope."""

    label: str
    level: str  # "strong" or "context"
    scope: str  # "shared" or "personal"


@dataclass(frozen=True)
class ModelRequest:
    """One request to the model: the exact messages (and tools) for the wire, and the same
    request's parts as data for backends that read them instead (the offline model)."""

    messages: list[Message]
    tools: list[Tool] | None = None
    # "none": the tools are shown but not callable; "required": one of them must be called
    tool_choice: Literal["none", "required"] | None = None
    blocks: tuple[SentBlock, ...] = ()
    user_text: str = ""
    purpose: Literal["turn", "summary", "suggestions"] = "turn"
    summarised: tuple[tuple[str, str], ...] = ()  # (role, content) entries, for a summary


class ChatModel(Protocol):
    """An OpenAI-style chat completion backend."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        """Answer the conversation, or raise ModelError. When the backend streams, on_text is
        called with the text so far as it grows, and on_progress as the stream opens and as each
        chunk arrives (a budget hold is renewed there)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
