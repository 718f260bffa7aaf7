"""The HTTP endpoint platforms post their webhooks to (Telegram updates, Feishu events)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.serving import serve_app

MAX_WEBHOOK_BODY = 1024 * 1024


async def serve_webhook(
    path: str,
    handler: Callable[[web.Request], Awaitable[web.Response]],
    *,
    host: str,
    port: int,
    port_setting: str,
) -> tuple[web.AppRunner, int]:
    """Listen on host:port for POSTs to path; returns the runner (cleanup() stops it) and the
    port really listened on. A port that cannot be had is a ConfigError naming port_setting."""
    app = web.Application(client_max_size=MAX_WEBHOOK_BODY)
    app.router.add_post("/" + path.lstrip("/"), handler)
    return await serve_app(app, host=host, port=port, port_setting=port_setting)
