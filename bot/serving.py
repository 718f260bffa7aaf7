"""Listening for HTTP: the webhooks platforms post to and the operator's web page."""

from __future__ import annotations

from aiohttp import web

from bot.config import ConfigError

SHUTDOWN_S = 5.0  # requests in flight at a stop get this long to finish


async def serve_app(
    app: web.Application, *, host: str, port: int, port_setting: str
) -> tuple[web.AppRunner, int]:
    """Serve app on host:port; returns the runner (cleanup() stops it) and the port really
    listened on. A port that cannot be had is a ConfigError naming port_setting."""
    # A keep-alive connection (a load balancer's, a browser's) must not hold up a stop.
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
