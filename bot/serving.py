"""Listening for HTTP: the webhooks platforms post to and the operator's web page."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from bot.config import ConfigError

SHUTDOWN_S = 5.0  # requests in flight at a stop get this long to finish


async def serve_app(
    app: web.Application, *, host: str, port: int, port_setting: str
) -> tuple[web.AppRunner, int]:
    """Serve app on host:port; returns the runner (cleanup() stops it) and the port really
    listened on. A port that cannot be had is a ConfigError naming port_setting."""
    # A keep-alive connection (a load balancer's, a browser's) must not hold up a stop.
    if port == 0:  # each address of a name would get a free port of its own: listen on one
        host = await _first_address(host, port_setting)
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


async def _first_address(host: str, port_setting: str) -> str:
    """The first address host resolves to (for listening); ConfigError when it resolves to none."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(
            host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as error:
        raise ConfigError(
            f"{port_setting}: cannot listen on {host} ({getattr(error, 'strerror', None) or error})"
        ) from None
    return str(found[0][4][0])
