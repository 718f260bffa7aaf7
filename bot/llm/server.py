"""What one OpenAI-compatible server makes of the wire format, learned as pinbot talks to it.

Servers differ (OpenAI, vLLM, Ollama, llama.cpp's servers): the field that limits a reply
(`max_completion_tokens` or the older `max_tokens`; some ignore the one they do not know),
whether a stream carries usage, whether `tools` are accepted, honoured or silently ignored,
whether cached prompt tokens are counted, how big the context window is. `ServerTraits` starts at
OpenAI's reading (or the operator's choice) and changes each trait at most once, with one log
line; `probe` asks a server all of it with a few calls of a few tokens (check-config --online,
and `llm.probe_server` before the first call).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai

log = logging.getLogger(__name__)

LimitParam = Literal["max_completion_tokens", "max_tokens"]
_OTHER: dict[LimitParam, LimitParam] = {
    "max_completion_tokens": "max_tokens",
    "max_tokens": "max_completion_tokens",
}
# How servers state their context window in an overflow error (OpenAI, vLLM and llama.cpp's
# servers say "maximum context length is N tokens"; others "context window of N", "n_ctx: N").
_WINDOW = re.compile(
    r"(?:maximum context length is|context window of|context length of|n_ctx[\"']?[:=]?)\s*(\d+)",
    re.IGNORECASE,
)
# Fields of a GET /models entry that state the served context window: vLLM's, LM Studio's and
# OpenRouter's, and llama.cpp's server's meta.
_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "n_ctx")


# How servers say they do not take a field at all (OpenAI's "Unsupported parameter", Azure's
# "Unrecognized request argument", vLLM's pydantic "Extra inputs are not permitted", others'
# "unknown field"), as against refusing its value.
_UNSUPPORTED = (
    "unsupported",
    "unrecognized",
    "unrecognised",
    "unknown",
    "not supported",
    "extra inputs are not permitted",
    "extra fields not permitted",
)
# Words of a refused value: a limit too large for the model or its context window is still
# the right field.
_ABOUT_SIZE = ("too large", "maximum context", "context length", "context window", "exceed")


def refuses_field(said: str, field: str) -> bool:
    """Whether a server's error message says it does not take the field at all (so that
    another field may do its job), never when it only refuses the field's value."""
    said = said.casefold()
    return (
        field in said
        and any(word in said for word in _UNSUPPORTED)
        and not any(word in said for word in _ABOUT_SIZE)
    )


def stated_window(text: str) -> int | None:
    """The context window an error message states, if it does."""
    match = _WINDOW.search(text)
    return int(match.group(1)) if match else None


def listed_window(entry: dict[str, Any]) -> int | None:
    """The context window a GET /models entry states, if it does."""
    meta = entry.get("meta")
    for source in (entry, meta if isinstance(meta, dict) else {}):
        for name in _WINDOW_FIELDS:
            value = source.get(name)
            if isinstance(value, int) and value > 0:
                return value
    return None


@dataclass
class ServerTraits:
    """The server's reading of the wire format as far as pinbot knows it; each change is made
    once and logged once."""

    limit_param: LimitParam = "max_completion_tokens"
    limit_fixed: bool = False  # the operator chose the field (llm.completion_limit_param)
    stream_usage: bool = True  # ask for usage in streams (stream_options.include_usage)
    stream_usage_seen: bool | None = None  # whether a stream has carried usage yet
    tools: bool = True
    context_window: int | None = None

    @classmethod
    def configured(cls, completion_limit_param: str) -> ServerTraits:
        """Traits as llm.completion_limit_param sets them (auto: OpenAI's field, not fixed)."""
        if completion_limit_param == "auto":
            return cls()
        return cls(limit_param=cast("LimitParam", completion_limit_param), limit_fixed=True)

    def limit(self, tokens: int) -> dict[str, int]:
        """The request field that limits a reply to this many tokens."""
        return {self.limit_param: tokens}

    def switch_limit(self, why: str) -> bool:
        """Use max_tokens from now on (auto only, once); whether it changed."""
        if self.limit_fixed or self.limit_param == "max_tokens":
            return False
        self.limit_param = "max_tokens"
        log.warning(
            "the model server %s max_completion_tokens; pinbot sends max_tokens from now on "
            "(set llm.completion_limit_param: max_tokens to start there)",
            why,
        )
        return True

    def tools_off(self, why: str) -> bool:
        """Stop offering tools to this server (once); whether it changed."""
        if not self.tools:
            return False
        self.tools = False
        log.warning(
            "the model server %s tools; the agent tools are off for it from now on "
            "(set llm.agent_tools: false to say so in the config)",
            why,
        )
        return True

    def no_stream_usage(self, rejected: bool) -> None:
        """A stream carried no usage (or the server rejected asking for it): say so once;
        usage of streamed answers is estimated from then on."""
        if rejected:
            self.stream_usage = False
        if self.stream_usage_seen is None or rejected:
            self.stream_usage_seen = False
            log.warning(
                "the model server %s; usage of streamed answers is estimated (/usage marks it)",
                "rejects stream_options" if rejected else "sends no usage in streams",
            )

    def window(self, tokens: int | None) -> None:
        """Note the context window a server stated (logged when it is news)."""
        if tokens is not None and tokens != self.context_window:
            self.context_window = tokens
            log.warning("the model server's context window is %d tokens", tokens)


@dataclass(frozen=True)
class ServerReport:
    """What a probe found: the completion-limit field the server honours (and why), whether
    streams carry usage, whether usage counts cached tokens, what it does with tools, and its
    context window where it states one."""

    limit_param: LimitParam
    limit_why: Literal["", "ignores", "rejects"]  # what the server did with the other field
    limit_note: str  # in words, for the report ("" when the first field asked worked)
    stream_usage: Literal["yes", "no", "rejected"]
    cached_tokens: bool
    tools: Literal["yes", "ignored", "refused", "unknown"]
    context_window: int | None = None

    def lines(self) -> list[tuple[str, str]]:
        """(what, finding) for check-config --online."""
        limit = self.limit_param + (f" ({self.limit_note})" if self.limit_note else "")
        usage = {
            "yes": "yes",
            "no": "no (the usage of streamed answers is estimated)",
            "rejected": "rejected stream_options (asked without it; usage is estimated)",
        }[self.stream_usage]
        tools = {
            "yes": "yes",
            "ignored": "ignored (answered with text; the agent tools are turned off for it)",
            "refused": "refused (the agent tools are turned off for it)",
            "unknown": "not known (the test answer ran out of tokens; the agent tools stay on)",
        }[self.tools]
        window = f"{self.context_window} tokens" if self.context_window else "not stated"
        return [
            ("completion limit", limit),
            ("usage in streams", usage),
            ("cached tokens", "counted" if self.cached_tokens else "not reported"),
            ("tools", tools),
            ("context window", window),
        ]

    def apply(self, traits: ServerTraits) -> None:
        """Adapt traits to what the probe found."""
        if self.limit_param != traits.limit_param:
            traits.switch_limit(self.limit_why or "ignores")
        if self.stream_usage != "yes":
            traits.no_stream_usage(rejected=self.stream_usage == "rejected")
        if self.tools in ("ignored", "refused"):
            traits.tools_off(self.tools)
        traits.window(self.context_window)


# The probe asks for more than it allows, so that a limit that is ignored shows.
PROBE_LIMIT = 2
LIMIT_TRIES = 3
# A count to go on with: chat models and base models alike answer it with more than a few tokens.
COUNTING = [{"role": "user", "content": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"}]
PING_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answers pong.",
        "parameters": {"type": "object", "properties": {}},
    },
}
CALL_PING = [{"role": "user", "content": "Call the ping tool now."}]
# Room for a call of ping with no arguments, and for a reasoning model's thinking before it.
TOOL_CALL_LIMIT = 256


async def _create(client: openai.AsyncOpenAI, **fields: Any) -> Any:
    """One chat completion call; the probe's fields vary by server, past the SDK's overloads."""
    return await cast(Any, client.chat.completions.create)(**fields)


def _said(error: openai.APIStatusError) -> str:
    return str(error.body if error.body is not None else error.message).casefold()


def _mentions(error: openai.APIStatusError, *words: str) -> bool:
    said = _said(error)
    return any(word in said for word in words)


async def _streamed_limit(
    client: openai.AsyncOpenAI, model: str, param: LimitParam, options: bool
) -> tuple[bool, bool]:
    """Stream a count limited by param: (whether the server ignores the limit, whether a
    stream carried usage). Streamed so that an ignored limit costs a few tokens, not an answer
    that runs to the end of the context window: reading stops past the limit. An answer that
    stops on its own before the limit shows nothing: the count is asked again, a few times."""
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if options else {}
    usage = False
    for _ in range(LIMIT_TRIES):
        stream = await _create(
            client, model=model, messages=COUNTING, stream=True, **{param: PROBE_LIMIT}, **extra
        )
        pieces, finish = 0, None
        async for chunk in stream:
            usage = usage or chunk.usage is not None
            for choice in chunk.choices:
                pieces += 1 if choice.delta and choice.delta.content else 0
                finish = choice.finish_reason or finish
            if pieces > PROBE_LIMIT + 1:  # a token may come in two pieces; more is past it
                await stream.close()
                return True, usage
        if finish == "length":
            return False, usage
    return False, usage


async def _limit(
    client: openai.AsyncOpenAI, model: str, traits: ServerTraits
) -> tuple[LimitParam, Literal["", "ignores", "rejects"], str, Literal["yes", "no", "rejected"]]:
    """The field that limits replies here, what the server did with the other one (when it
    is not the first asked) in a word and in words, and whether streams carry usage."""
    param, options, usage = traits.limit_param, True, False
    why: Literal["", "ignores", "rejects"] = ""
    note = ""
    for _ in range(3):
        try:
            ignored, usage = await _streamed_limit(client, model, param, options)
        except openai.BadRequestError as error:
            if options and _mentions(error, "stream_options", "include_usage"):
                options = False
                continue
            if traits.limit_fixed or why or not refuses_field(_said(error), param):
                raise
            why, note, param = "rejects", f"the server rejects {param}", _OTHER[param]
            continue
        if ignored and not traits.limit_fixed and not why:
            why = "ignores"
            note = f"the server ignores {param}: it wrote past a limit of {PROBE_LIMIT} tokens"
            param = _OTHER[param]
        break
    stream_usage: Literal["yes", "no", "rejected"] = (
        "rejected" if not options else "yes" if usage else "no"
    )
    return param, why, note, stream_usage


def _cached(response: Any) -> bool:
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return (
        getattr(details, "cached_tokens", None) is not None
        or getattr(usage, "prompt_cache_hit_tokens", None) is not None
    )


async def _tools(
    client: openai.AsyncOpenAI, model: str, param: LimitParam
) -> Literal["yes", "ignored", "refused", "unknown"]:
    """Whether the server calls a tool it is told to call (tool_choice "required", or without
    tool_choice where that is refused); unknown when the answer ran out of tokens before any
    call (a reasoning model still thinking), which shows nothing."""
    choice: dict[str, Any] = {"tool_choice": "required"}
    for _ in range(2):
        try:
            response = await _create(
                client,
                model=model,
                messages=CALL_PING,
                tools=[PING_TOOL],
                **{param: TOOL_CALL_LIMIT},
                **choice,
            )
        except openai.BadRequestError as error:
            if choice and _mentions(error, "tool_choice", "required"):
                choice = {}
                continue
            if _mentions(error, "tool"):
                return "refused"
            raise
        choice_made = response.choices[0] if response.choices else None
        if choice_made is not None and choice_made.message.tool_calls:
            return "yes"
        if choice_made is not None and choice_made.finish_reason == "length":
            return "unknown"
        return "ignored"
    return "refused"


async def probe(
    client: openai.AsyncOpenAI, model: str, traits: ServerTraits, window: int | None = None
) -> ServerReport:
    """Ask the server what it supports, in three to six calls of a few tokens (a count asked
    again when it stops early, a field the server rejects asked without); raises
    openai.OpenAIError when it fails for another reason."""
    param, why, note, stream_usage = await _limit(client, model, traits)
    counted = await _create(client, model=model, messages=COUNTING, **{param: PROBE_LIMIT})
    tools = await _tools(client, model, param)
    return ServerReport(param, why, note, stream_usage, _cached(counted), tools, window)
