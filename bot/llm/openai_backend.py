"""An OpenAI-compatible chat completions backend through the openai SDK."""

from __future__ import annotations

import logging

import openai

from bot.config import LlmConfig, secret_from_env
from bot.llm.base import Message, ModelError

log = logging.getLogger(__name__)


class OpenAIChatModel:
    """Calls `llm.base_url` with `llm.model`, a per-call timeout and a bounded retry count."""

    def __init__(self, config: LlmConfig, api_key: str) -> None:
        self._config = config
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    @classmethod
    def from_config(cls, config: LlmConfig) -> OpenAIChatModel:
        """Build the client, reading the key from the environment variable config names."""
        api_key = secret_from_env(config.api_key_env, "The API key for llm.backend: openai")
        return cls(config, api_key)

    async def complete(self, messages: list[Message]) -> str:
        """One chat completion; every failure becomes a ModelError with a short English line."""
        try:
            response = await self._client.chat.completions.create(
                model=self._config.model, messages=messages,  # type: ignore[arg-type]
            )
        except openai.APITimeoutError as error:
            raise ModelError("The model did not answer in time. Please try again.",
                             "timeout") from error
        except openai.AuthenticationError as error:
            raise ModelError("The model refused the bot's credentials; the operator must check "
                             "the API key.", "authentication failed") from error
        except openai.RateLimitError as error:
            raise ModelError("The model is busy (rate limited). Please try again in a moment.",
                             "rate limited") from error
        except openai.APIConnectionError as error:
            raise ModelError("The model could not be reached. Please try again later.",
                             "connection failed") from error
        except openai.APIStatusError as error:
            raise ModelError("The model failed to answer. Please try again later.",
                             f"status {error.status_code}") from error
        except openai.OpenAIError as error:
            raise ModelError("The model failed to answer. Please try again later.",
                             type(error).__name__) from error
        choice = response.choices[0] if response.choices else None
        text = choice.message.content if choice else None
        if not text:
            raise ModelError("The model returned an empty answer. Please try again.", "empty")
        return text

    async def close(self) -> None:
        """Close the pooled HTTP connections."""
        await self._client.close()
