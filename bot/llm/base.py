"""The downstream model as the core sees it: chat messages in, one reply out."""

from __future__ import annotations

from typing import Any, Protocol

Message = dict[str, Any]


class ModelError(Exception):
    """The model could not answer; `user_message` is the one short English line users see."""

    def __init__(self, user_message: str, detail: str = "") -> None:
        super().__init__(detail or user_message)
        self.user_message = user_message


class ChatModel(Protocol):
    """An OpenAI-style chat completion backend."""

    async def complete(self, messages: list[Message]) -> str:
        """Answer the conversation in messages, or raise ModelError."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
