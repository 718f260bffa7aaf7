"""The downstream model: the offline default or an OpenAI-compatible server."""

from __future__ import annotations

from bot.config import LlmConfig
from bot.llm.base import ChatModel, Message, ModelError
from bot.llm.offline import OfflineChatModel


def build_model(config: LlmConfig) -> ChatModel:
    """The backend config asks for; raises ConfigError when its secret is missing."""
    if config.backend == "openai":
        from bot.llm.openai_backend import OpenAIChatModel

        return OpenAIChatModel.from_config(config)
    return OfflineChatModel()


__all__ = ["ChatModel", "Message", "ModelError", "OfflineChatModel", "build_model"]
