"""Serving a fake's aiohttp application on 127.0.0.1."""

from __future__ import annotations

import socket

from aiohttp import web


async def serve(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    """Start app on 127.0.0.1 (any free port by default); returns the runner and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    return runner, int(sockets[0].getsockname()[1])


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now, for a process to listen on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
