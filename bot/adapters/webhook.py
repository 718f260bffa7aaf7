"""The HTTP endpoint platforms post their webhooks to (Telegram updates, Feishu events)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.config import ConfigError

MAX_WEBHOOK_BODY = 1024 * 1024
SHUTDOWN_S = 5.0  # requests in flight at a stop get this long to finish


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
    # A keep-alive connection of a load balancer must not hold up a stop for a minute.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        raise ConfigError(
            f"{port_setting}: cannot listen on {host}:{port} ({error.strerror or error}); "
            "choose a free port"
        ) from None
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
