"""A fake OpenAI-compatible chat completions server on 127.0.0.1 that records every request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

Responder = Callable[[dict[str, Any]], Any]


def completion(text: str, model: str = "fake-model") -> dict[str, Any]:
    """A chat.completion response body with one choice."""
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeOpenAI:
    """Serves POST /v1/chat/completions; `requests` holds each JSON body received.

    By default it answers "reply N". Set `status` to answer with an error status, `delay` to make
    it wait (on an event the test controls), or `respond` for a custom body.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.release: asyncio.Event | None = None
        self.respond: Responder | None = None
        self._runner: web.AppRunner | None = None
        self._received = asyncio.Condition()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        async with self._received:
            self._received.notify_all()
        if self.release is not None:
            await self.release.wait()
        if self.status != 200:
            return web.json_response(
                {"error": {"message": "fake failure", "type": "server_error"}}, status=self.status
            )
        if self.respond is not None:
            return web.json_response(self.respond(body))
        return web.json_response(completion(f"reply {len(self.requests)}"))

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
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
