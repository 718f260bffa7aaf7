"""Which model a call goes to: llm's own (the default), or the `llm.models` entry a group or
topic picked with `/group model <name>` (MessageContext.model). Each entry's client is made
once, at startup, like the default's (its key read then: a missing one stops the start); an
entry is always an OpenAI-compatible server, whatever llm.backend is. A name the config no
longer has (an entry removed since the group picked it) goes to the default, logged once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bot.clock import Clock, utc_now
from bot.config import LlmConfig, secret_from_env
from bot.llm import build_model
from bot.llm.base import ChatModel

log = logging.getLogger(__name__)
# What is done to each client as it is made (bot.metrics.model.metered: counted, under its
# entry's name, None for the default); by default nothing.
Wrap = Callable[[ChatModel, str | None], ChatModel]


def _as_is(model: ChatModel, entry: str | None) -> ChatModel:
    return model


@dataclass(frozen=True)
class Route:
    """Where a call goes: the client, the llm.models entry it is (None: the default; metrics
    label a call by it, so a label comes from the config, never from users) and the model the
    server is asked for (usage rows and pricing.models prices go by it)."""

    model: ChatModel
    entry: str | None
    served: str


class Models:
    """The default model and the client of each llm.models entry, by name."""

    def __init__(self, default: Route, entries: Mapping[str, Route] | None = None) -> None:
        self.default = default
        self._entries = dict(entries or {})
        self._missing: set[str] = set()  # names already logged as gone

    @classmethod
    def single(cls, model: ChatModel, llm: LlmConfig) -> Models:
        """model for every call (an embedder's or a test's one model): no entries."""
        return cls(Route(model, None, llm.called))

    @classmethod
    def from_config(
        cls,
        llm: LlmConfig,
        *,
        default: ChatModel | None = None,
        wrap: Wrap = _as_is,
        clock: Clock = utc_now,
    ) -> Models:
        """The default (default, or the one llm.backend names) and a client for each
        llm.models entry: its base_url, model and key, llm's other settings (timeouts,
        retries, streaming, the completion limit). ConfigError when a key is missing; the
        entries' keys are read before any client is made."""
        from bot.llm.openai_backend import OpenAIChatModel

        keys = {
            name: secret_from_env(entry.api_key_env, f"The API key for llm.models.{name}")
            for name, entry in llm.models.items()
        }
        base = default if default is not None else build_model(llm)
        entries = {}
        for name, entry in llm.models.items():
            settings = llm.model_copy(
                update={
                    "backend": "openai",
                    "base_url": entry.base_url,
                    "model": entry.model,
                    "api_key_env": entry.api_key_env,
                    "models": {},
                }
            )
            client = OpenAIChatModel(settings, keys[name], clock, settings=f"llm.models.{name}")
            entries[name] = Route(wrap(client, name), name, entry.model)
        return cls(Route(wrap(base, None), None, llm.called), entries)

    def route(self, name: str | None) -> Route:
        """Where a call of a conversation that picked name (None: none) goes."""
        if name is None:
            return self.default
        found = self._entries.get(name)
        if found is not None:
            return found
        if name not in self._missing:
            self._missing.add(name)
            log.warning(
                "a group or topic picked the model %r, which llm.models no longer has: its "
                "calls go to the default model (llm.model) until it picks another",
                name,
            )
        return self.default

    async def close(self) -> None:
        """Close every client (the default's last)."""
        for route in self._entries.values():
            await route.model.close()
        await self.default.model.close()
