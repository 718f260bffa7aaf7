"""An OpenAI-compatible chat completions backend through the openai SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk

from bot.clock import Clock, utc_now
from bot.config import LlmConfig, secret_from_env
from bot.llm.base import (
    Message,
    ModelError,
    ModelReply,
    ModelRequest,
    Progress,
    TextSink,
    ToolCall,
    ToolsRefused,
    Usage,
)
from bot.llm.server import ServerTraits, probe, refuses_field, stated_window

log = logging.getLogger(__name__)


@dataclass
class _Streamed:
    """What a stream has brought so far."""

    text: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Usage | None = None
    finished: bool = False
    pieces: int = 0  # content chunks: about one token each, where usage does not count them


class _EmptyStream(Exception):
    """A stream ended (or its connection dropped) before its first chunk, which no answer
    does."""


# A request is sent again at most this often after the server showed a difference (a field it
# rejects): each trait changes once, so this bounds the retries of one call.
MAX_ADAPTATIONS = 3


class OpenAIChatModel:
    """Calls `llm.base_url` with `llm.model`, a per-call timeout and a bounded retry count; a
    streamed answer is cut off after `llm.stream_timeout_s` by the clock. It adapts to the
    server's reading of the wire format (`traits`, bot/llm/server.py): a field the server
    rejects is dropped and the call made again, never failed for it."""

    def __init__(
        self, config: LlmConfig, api_key: str, clock: Clock = utc_now, *, settings: str = "llm"
    ) -> None:
        self._config = config
        self._settings = settings  # where the operator sets this server: llm, llm.models.<name>
        self._clock = clock
        self.traits = ServerTraits.configured(config.completion_limit_param)
        self._probed = not config.probe_server
        self._probe_lock = asyncio.Lock()
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    @classmethod
    def from_config(cls, config: LlmConfig, clock: Clock = utc_now) -> OpenAIChatModel:
        """Build the client, reading the key from the environment variable config names."""
        api_key = secret_from_env(config.api_key_env, "The API key for llm.backend: openai")
        return cls(config, api_key, clock)

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        """One chat completion of the request's messages and tools (streamed when `llm.stream`
        is on and on_text is given; on_progress is awaited as the stream opens and as each chunk
        arrives); every failure becomes a ModelError with a short English line. A stream that
        outlasts `llm.stream_timeout_s` ends there: the reply is what arrived, `cut_off`."""
        await self._probe()
        streaming = self._config.stream and on_text is not None
        client = self._client
        adaptations = 0
        # One more than the adaptations: the one re-ask of a stream that ended empty.
        for _ in range(MAX_ADAPTATIONS + 2):
            extra = self._extra(request)
            # What this request asks for, for _adapted: the traits may change before it fails
            # (a concurrent request refused for the same field).
            asked_usage = streaming and self.traits.stream_usage
            try:
                if streaming and on_text is not None:
                    reply = await self._streamed(request.messages, extra, on_text, on_progress)
                else:
                    response = await client.chat.completions.create(
                        model=self._config.model,
                        messages=request.messages,  # type: ignore[arg-type]
                        **extra,
                    )
                    reply = _reply_of(response)
                    self._check_limit(reply.usage.completion_tokens if reply.usage else 0)
                break
            except _EmptyStream:
                # Asked again whole, the server answers with its reason (or the answer).
                log.warning("a streamed answer ended before its first chunk; asking unstreamed")
                streaming = False
                # The server may have closed the connection the stream left in the pool: one
                # retry (on a new connection) at least.
                client = self._client.with_options(max_retries=max(1, self._config.max_retries))
            except openai.APIStatusError as error:
                # A field refused is a 400 or 422, but a refusal of tools is known by what it
                # says, whatever the status: llama.cpp without --jinja answers a 500.
                refused = error.status_code in (400, 422) or (
                    "tools" in extra and _about_tools(error)
                )
                if (
                    refused
                    and adaptations < MAX_ADAPTATIONS
                    and self._adapted(error, extra, asked_usage)
                ):
                    adaptations += 1
                    continue
                raise self._model_error(error) from error
            except openai.OpenAIError as error:
                raise self._model_error(error) from error
        else:  # not reached (the re-ask is unstreamed): a bound, never an unbound reply
            raise ModelError("The model server refused the request. Please try again.", "retries")
        if not reply.text and not reply.tool_calls and not reply.cut_off:
            raise ModelError("The model returned an empty answer. Please try again.", "empty")
        return reply

    def _extra(self, request: ModelRequest) -> dict[str, Any]:
        """The request's fields besides model and messages, as this server reads them."""
        extra: dict[str, Any] = self.traits.limit(self._config.max_completion_tokens)
        if request.tools and self.traits.tools:
            extra["tools"] = request.tools
            if request.tool_choice:
                extra["tool_choice"] = request.tool_choice
        elif request.tools and request.tool_choice == "required":
            # A call that needs its tool (compaction's) is not worth making without it: the
            # caller asks in its own way instead.
            raise ToolsRefused("The model server does not support tools.", "")
        return extra

    def _adapted(
        self, error: openai.APIStatusError, extra: dict[str, Any], asked_usage: bool
    ) -> bool:
        """Whether the server refused a field of this request (extra, and usage in streams
        when asked_usage) pinbot can do without: asking for usage in streams, the
        completion-limit field, tools; then it is dropped for good (or was already, by a
        concurrent request refused for it), and the request is worth asking again. ToolsRefused
        when it refused the tools of a call that needs one."""
        said = _server_message(error).casefold()
        if "stream_options" in said or "include_usage" in said:
            if not asked_usage:
                return False
            if self.traits.stream_usage:
                self.traits.no_stream_usage(rejected=True)
            return True
        sent = "max_tokens" if "max_tokens" in extra else "max_completion_tokens"
        # Switched already when a concurrent request was refused for it since this one was made.
        if refuses_field(said, sent) and (
            self.traits.limit_param != sent or self.traits.switch_limit("rejects")
        ):
            return True
        if "tools" not in extra or not _about_tools(error):
            return False
        self.traits.tools_off("refuses")
        if extra.get("tool_choice") == "required":
            # The call needs its tool (compaction's): its caller asks another way.
            raise ToolsRefused("The model server does not support tools.", _server_message(error))
        return True

    def _overran(self, pieces: int) -> bool:
        """Whether a stream has run past the limit (twice past it: a token may come in two
        pieces): the server ignores the limit's field, which is switched."""
        if pieces <= 2 * self._config.max_completion_tokens:
            return False
        return self.traits.switch_limit(
            f"streamed twice the {self._config.max_completion_tokens} tokens allowed: it ignores"
        )

    def _check_limit(self, completion_tokens: int) -> None:
        """A reply longer than the limit asked shows the server ignored the limit's field."""
        if completion_tokens > self._config.max_completion_tokens:
            self.traits.switch_limit(
                f"wrote {completion_tokens} tokens when allowed "
                f"{self._config.max_completion_tokens}: it ignores"
            )

    async def _probe(self) -> None:
        """With llm.probe_server, ask the server what it supports before the first call."""
        if self._probed:
            return
        async with self._probe_lock:
            if self._probed:
                return
            try:
                report = await probe(self._client, self._config.model, self.traits)
            except openai.OpenAIError as error:
                log.warning("probing the model server failed (%s); learning as it answers", error)
            else:
                report.apply(self.traits)
            self._probed = True

    def _model_error(self, error: openai.OpenAIError) -> ModelError:
        """The ModelError of a failed call; a context window the server states is noted."""
        failure = _model_error(error, self._settings)
        if failure.overflow:
            self.traits.window(failure.context_window)
        return failure

    async def _streamed(
        self,
        messages: list[Message],
        extra: dict[str, Any],
        on_text: TextSink,
        on_progress: Progress | None,
    ) -> ModelReply:
        # timeout_s bounds each read only; a stream that trickles on is stopped here.
        deadline = self._clock() + timedelta(seconds=self._config.stream_timeout_s)
        try:
            stream = await self._open_stream(messages, extra)
        except openai.APIConnectionError:
            raise _EmptyStream from None  # asked again whole: a server that is down says so
        if on_progress is not None:
            await on_progress()
        got = _Streamed()
        try:
            # Both bounds: the clock's at each chunk (tests move it), the loop's for a stream
            # that sends nothing the client hands over (keep-alive comments, empty chunks).
            async with asyncio.timeout(self._config.stream_timeout_s):
                async for chunk in stream:
                    if on_progress is not None:
                        await on_progress()
                    await self._take(chunk, got, on_text)
                    if not got.finished and self._overran(got.pieces):
                        # The server ignores the limit: the answer ends here, as it should have.
                        await stream.close()
                        return ModelReply(_text(got.text), [], got.usage)
                    if not got.finished and self._clock() >= deadline:
                        return await self._cut_off(stream, got.text)
        except TimeoutError:
            return await self._cut_off(stream, got.text)
        except openai.APIConnectionError:
            if got.text or got.calls:
                raise
            raise _EmptyStream from None  # dropped before its first chunk: asked again whole
        if not got.finished and not got.text and not got.calls:
            # llama-cpp-python's server answers 200 and then ends the stream (or drops the
            # connection) without a chunk when the request fails (an overflow of its context
            # window among others).
            raise _EmptyStream
        return self._stream_ended(got.text, got.calls, got.usage, got.pieces)

    async def _take(self, chunk: ChatCompletionChunk, got: _Streamed, on_text: TextSink) -> None:
        """Add a chunk to what the stream brought; new text is shown to on_text."""
        if chunk.usage is not None:  # the last chunk, when usage was asked for
            got.usage = usage_of(chunk.usage)
        if chunk.choices and not got.finished:  # nothing is added after the finish
            got.finished = chunk.choices[0].finish_reason is not None
            got.text = self._add_chunk(chunk, got.text, got.calls)
            if chunk.choices[0].delta.content:
                got.pieces += 1
                await on_text(_text(got.text))

    def _stream_ended(
        self, text: str, calls: dict[int, dict[str, str]], usage: Usage | None, pieces: int
    ) -> ModelReply:
        """The reply of a stream that ended, and what it showed of the server."""
        if usage is None:
            self.traits.no_stream_usage(rejected=False)
        else:
            self.traits.stream_usage_seen = True
        self._check_limit(usage.completion_tokens if usage else pieces)
        tool_calls = [
            ToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())
        ]
        return ModelReply(_text(text), tool_calls, usage)

    async def _cut_off(
        self, stream: openai.AsyncStream[ChatCompletionChunk], text: str
    ) -> ModelReply:
        """End a stream that outlasted llm.stream_timeout_s: what arrived stands, tool calls
        that had not finished do not."""
        await stream.close()
        log.warning(
            "a streamed answer outlasted llm.stream_timeout_s (%s s); cut off after %d characters",
            self._config.stream_timeout_s,
            len(text),
        )
        return ModelReply(_text(text), [], None, cut_off=True)

    @staticmethod
    def _add_chunk(chunk: ChatCompletionChunk, text: str, calls: dict[int, dict[str, str]]) -> str:
        """The text with chunk's content added; its tool-call fragments go into calls."""
        delta = chunk.choices[0].delta
        if delta.content:
            text += delta.content if isinstance(delta.content, str) else str(delta.content)
        for fragment in delta.tool_calls or []:
            index = fragment.index if isinstance(fragment.index, int) else 0
            call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if fragment.id:
                call["id"] = _text(fragment.id)
            function = getattr(fragment, "function", None)
            if function is not None:
                call["name"] += _text(getattr(function, "name", None))
                call["arguments"] += _arguments(getattr(function, "arguments", None))
        return text

    async def _open_stream(
        self, messages: list[Message], extra: dict[str, Any]
    ) -> openai.AsyncStream[ChatCompletionChunk]:
        """Start a streamed completion, asking for usage in the stream unless the server has
        rejected that option before."""
        if self.traits.stream_usage:
            extra = {**extra, "stream_options": {"include_usage": True}}
        # The SDK's overloads cannot see `stream=True` through **extra, hence the cast.
        return cast(
            "openai.AsyncStream[ChatCompletionChunk]",
            await self._client.chat.completions.create(
                model=self._config.model,
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                **extra,
            ),
        )

    async def close(self) -> None:
        """Close the pooled HTTP connections."""
        await self._client.close()


def usage_of(reported: Any) -> Usage:
    """Usage as an OpenAI-compatible server reports it; cached prompt tokens come from
    `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`."""
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached is None:
        cached = getattr(reported, "prompt_cache_hit_tokens", None)
    return Usage(
        prompt_tokens=int(getattr(reported, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(reported, "completion_tokens", 0) or 0),
        cached_tokens=int(cached or 0),
    )


def _reply_of(response: Any) -> ModelReply:
    usage = usage_of(response.usage) if getattr(response, "usage", None) else None
    choice = response.choices[0] if response.choices else None
    if choice is None:
        return ModelReply("", usage=usage)
    calls = [
        ToolCall(
            _text(getattr(call, "id", "")),
            _text(getattr(function, "name", "")),
            _arguments(getattr(function, "arguments", None)),
        )
        for call in choice.message.tool_calls or []
        if getattr(call, "type", "function") == "function"
        and (function := getattr(call, "function", None)) is not None
    ]
    return ModelReply(_text(choice.message.content), calls, usage)


def _text(value: Any) -> str:
    """A string field as servers send it: None becomes empty, anything else its text, and lone
    surrogates (JSON can carry them; UTF-8 cannot) become U+FFFD."""
    text = "" if value is None else value if isinstance(value, str) else str(value)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _arguments(value: Any) -> str:
    """Tool call arguments as JSON text; some servers send the object itself, not a string."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


# What a server without tool support says when a request offers tools: llama.cpp without
# --jinja ("tools param requires --jinja flag", "tool_choice param requires --jinja flag"),
# Ollama ("... does not support tools"), vLLM without --enable-auto-tool-choice, OpenAI-style
# servers naming the parameter they do not know. Phrases, not words: a context-length 400
# says "... in the messages, ... in the functions" and must not turn tools off for good.
_TOOLS_REFUSED = re.compile(
    r"\btools? param"
    r"|\btool_choice\b"
    r"|enable-auto-tool-choice"
    r"|does not support (?:tools|tool use|tool calling|function calling|functions)"
    r"|(?:tools|tool use|tool calling|tool calls|function calling|functions) (?:is|are) not "
    r"(?:supported|enabled|available)"
    r"|not support (?:tools|tool use|tool calling|function calling)"
    r"|(?:unsupported|unrecognized|unknown|unexpected) (?:request )?(?:param(?:eter)?|argument"
    r"|field|keyword)s?(?: supplied)?:? ['\"`]?(?:tools|functions|tool_choice)\b"
    r"|['\"`](?:tools|functions)['\"`] is not (?:supported|permitted|allowed)"
    r"|no endpoints found that support tool use"
)
# Errors that are never about tools, however they are worded.
_NOT_ABOUT_TOOLS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "context length",
    "too many tokens",
    "exceeds the context",
    "string_above_max_length",
    *("content_filter", "content_policy", "content management", "safety system"),
)


def _about_tools(error: openai.OpenAIError) -> bool:
    """Whether error is a server's refusal of a request for offering tools (not a context
    length or content filter error, which happen to a request with tools as to any other)."""
    if not isinstance(error, openai.APIStatusError):
        return False
    said = _server_message(error).casefold()
    if any(mark in said for mark in _NOT_ABOUT_TOOLS):
        return False
    return _TOOLS_REFUSED.search(said) is not None


# OpenAI's and vLLM's wording, llama-cpp-python's ("exceed context window"), llama.cpp's own
# server's ("exceeds the available context size").
_CONTEXT_LENGTH = (
    "context_length_exceeded",
    "context length",
    "maximum context",
    "too long",
    "context window",
    "context size",
)
_CONTENT_FILTER = ("content_filter", "content_policy", "content management", "safety system")
_MISCONFIGURED = {401, 403, 404}


def _server_message(error: openai.APIStatusError) -> str:
    """The server's own error message (and code), for the log."""
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error", body) if isinstance(body, dict) else {}
    message = inner.get("message") if isinstance(inner, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    text = str(message or error.message or "")
    return f"{text} (code {code})" if code else text


def _status_error(error: openai.APIStatusError, settings: str = "llm") -> ModelError:
    status, said = error.status_code, _server_message(error)
    detail = f"status {status}: {said}"
    lowered = said.casefold()
    if status == 429 or status >= 500:
        return ModelError("The model is busy or failing. Please try again later.", detail)
    if any(mark in lowered for mark in _CONTEXT_LENGTH):
        return ModelError(
            "This conversation is too long for the model. Send /reset to start a new one "
            "(your pinned blocks stay).",
            detail,
            overflow=True,
            context_window=stated_window(said),
        )
    if any(mark in lowered for mark in _CONTENT_FILTER):
        return ModelError(
            "The model's provider refused this message (content filter). Please rephrase it.",
            detail,
        )
    if status in _MISCONFIGURED:
        return ModelError(
            f"The bot is misconfigured: the model server answered {status}. The bot's operator "
            f"must fix its model settings ({settings}.base_url, {settings}.model or the API "
            "key).",
            detail,
        )
    return ModelError(
        f"The model server refused the request ({status}). The bot's operator can find the "
        "reason in the logs.",
        detail,
    )


def _model_error(error: openai.OpenAIError, settings: str = "llm") -> ModelError:
    """The one short line a user sees for a failed model call (settings: where the operator
    sets this server); the detail, for the log, keeps the server's own message."""
    if isinstance(error, openai.APITimeoutError):
        return ModelError("The model did not answer in time. Please try again.", "timeout")
    if isinstance(error, openai.APIStatusError):
        return _status_error(error, settings)
    if isinstance(error, openai.APIConnectionError):
        return ModelError(
            "The model could not be reached. Please try again later.", "connection failed"
        )
    return ModelError("The model failed to answer. Please try again later.", type(error).__name__)
