"""A fake OpenAI-compatible chat completions server on 127.0.0.1 that records every request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.http import serve

Responder = Callable[[dict[str, Any]], Any]
# Awaited before each content chunk of a stream is written: (request index, content chunks so far).
ChunkHook = Callable[[int, int], Awaitable[None]]


def completion(text: str, model: str = "fake-model") -> dict[str, Any]:
    """A chat.completion response body with one choice."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def tool_calls(*calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    """A chat.completion response asking for function calls (name, arguments) in order."""
    body = completion(text or "")
    message = body["choices"][0]["message"]
    message["content"] = text
    message["tool_calls"] = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for i, (name, arguments) in enumerate(calls, start=1)
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def stream_chunks(body: dict[str, Any], piece: int = 5) -> list[dict[str, Any]]:
    """The SSE chunks a real server streams for a completion: content in small deltas, tool calls
    as an id-and-name fragment followed by argument fragments."""
    message = body["choices"][0]["message"]
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    chunks += [chunk({"content": content[i : i + piece]}) for i in range(0, len(content), piece)]
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = call["function"]["arguments"]
        chunks += [
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "function": {"arguments": arguments[i : i + piece]}}
                    ]
                }
            )
            for i in range(0, len(arguments), piece)
        ]
    chunks.append(chunk({}, body["choices"][0]["finish_reason"]))
    return chunks


@dataclass
class Streamed:
    """When a streamed answer's first and last content chunks were written (perf_counter, the
    system's monotonic clock: comparable across processes on one machine)."""

    request: int  # the index of its request in FakeOpenAI.requests
    first_token_at: float
    last_token_at: float


class FakeOpenAI:
    """Serves POST /v1/chat/completions; `requests` holds each JSON body received.

    By default it answers "reply N" (and a call of the first tool when tool_choice is
    "required"); `refuse` makes it answer 400 to requests carrying a field, and a `script` entry
    {"status": ..., "error": ...} answers once with that failure. Queue answers in `script`, set
    `status` to answer with an error status, `release` to make it wait on an event the test
    controls, or `respond` for a custom body. A request with `stream: true` gets the answer as
    SSE chunks, at once unless `first_token_s` and `token_s` pace it like a real model (for the
    benchmark; tests leave them at 0); `streamed` holds when each stream's content began and
    ended. `on_chunk` paces a stream by the test's own events instead (a fake clock moved on,
    other messages sent).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.error: dict[str, Any] = {"message": "fake failure", "type": "server_error"}
        # Called as each request arrives (a crash test kills the bot there).
        self.on_request: Callable[[], object] | None = None
        self.release: asyncio.Event | None = None
        self.respond: Responder | None = None
        self.script: list[dict[str, Any]] = []  # answers to give, in order, before the default
        self.usage: dict[str, Any] | None = None  # the usage every answer reports, if set
        self.reject_stream_options = False  # answer 400 to stream_options, as some servers do
        # field -> message: a request carrying that field gets 400 with the message, as a server
        # that does not take it answers (max_completion_tokens, tools...)
        self.refuse: dict[str, str] = {}
        # ...answered with this status and error type (llama.cpp refuses tools with a 500)
        self.refusal_status, self.refusal_type = 400, "invalid_request_error"
        self.models: list[str] | None = ["fake-model"]  # None: no GET /models here (404)
        self.api_key: str | None = None  # when set, other keys get 401
        self.first_token_s = 0.0  # a stream's delay before its first chunk
        self.token_s = 0.0  # and between its chunks (one chunk is about a token)
        self.streamed: list[Streamed] = []
        self.on_chunk: ChunkHook | None = None
        self._runner: web.AppRunner | None = None
        self._received = asyncio.Condition()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _rejected_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)

    async def _models(self, request: web.Request) -> web.Response:
        if rejected := self._rejected_key(request):
            return rejected
        if self.models is None:
            return web.json_response({"error": {"message": "Not Found"}}, status=404)
        listed = [{"id": name, "object": "model", "owned_by": "fake"} for name in self.models]
        return web.json_response({"object": "list", "data": listed})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if rejected := self._rejected_key(request):
            return rejected
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        if self.on_request is not None:
            self.on_request()
        self.headers.append(dict(request.headers))
        async with self._received:
            self._received.notify_all()
        if self.release is not None:
            await self.release.wait()
        if self.status != 200:
            return web.json_response({"error": self.error}, status=self.status)
        if self.reject_stream_options and "stream_options" in body:
            message = "Unrecognized request argument supplied: stream_options"
            return web.json_response(
                {"error": {"message": message, "type": "invalid_request_error"}}, status=400
            )
        answer = self._answer(body)
        if isinstance(answer, web.Response):
            return answer
        if self.usage is not None:
            answer = {**answer, "usage": self.usage}
        if not body.get("stream"):
            return web.json_response(answer)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunks = stream_chunks(answer)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunks[-1], "choices": [], "usage": answer.get("usage")})
        await self._stream(response, index, chunks)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _answer(self, body: dict[str, Any]) -> dict[str, Any] | web.Response:
        """The answer to a request (a body to send or stream), or the failure it gets."""
        refused = [message for field, message in self.refuse.items() if field in body]
        if refused:
            status = self.refusal_status
            error = {"code": status, "message": refused[0], "type": self.refusal_type}
            return web.json_response({"error": error}, status=status)
        if self.script:
            answer = self.script.pop(0)
            if "error" in answer:  # a scripted failure: {"status": 400, "error": {...}}
                return web.json_response({"error": answer["error"]}, status=answer["status"])
            return answer
        if self.respond is not None:
            return dict(self.respond(body))
        if body.get("tool_choice") == "required" and body.get("tools"):
            # as OpenAI answers it: a call of a tool (the first), no text
            return tool_calls((body["tools"][0]["function"]["name"], {}))
        return completion(f"reply {len(self.requests)}")

    async def _stream(
        self, response: web.StreamResponse, index: int, chunks: list[dict[str, Any]]
    ) -> None:
        """Write the chunks, paced by first_token_s and token_s; record when content came."""
        first = last = 0.0
        written = 0
        if self.first_token_s:
            await asyncio.sleep(self.first_token_s)
        for chunk in chunks:
            content = any(choice["delta"].get("content") for choice in chunk["choices"])
            if content and first and self.token_s:  # the end and the usage follow at once
                await asyncio.sleep(self.token_s)
            if content and self.on_chunk is not None:
                await self.on_chunk(index, written)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if content:
                written += 1
                last = time.perf_counter()
                first = first or last
        if first:
            self.streamed.append(Streamed(index, first, last))

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
        self._runner, self.port = await serve(app)
        return self

    async def wait_for_requests(self, count: int, timeout: float = 10) -> None:
        """Wait until count requests have arrived (the timeout is a safety net, not a pause)."""

        async def waiter() -> None:
            async with self._received:
                await self._received.wait_for(lambda: len(self.requests) >= count)

        await asyncio.wait_for(waiter(), timeout)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self.requests[index]["messages"])

    def dump(self) -> str:
        return json.dumps(self.requests, ensure_ascii=False, indent=1)
