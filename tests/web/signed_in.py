"""The operator's web page served on 127.0.0.1 to a client session signed in to it, for the
tests that read its pages and post its forms over HTTP without a browser."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp

from bot.serving import serve_app
from bot.web.app import WebPage


@contextlib.asynccontextmanager
async def signed_in(app: WebPage, token: str) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The page served, and a session signed in with token: (session, the page's root URL)."""
    runner, port = await serve_app(app.app(), host="127.0.0.1", port=0, port_setting="p")
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    root = f"http://127.0.0.1:{port}"
    try:
        async with session.post(f"{root}/signin", data={"token": token}) as signed:
            assert signed.status == 200
        yield session, root
    finally:
        await session.close()
        await runner.cleanup()


async def shown(session: aiohttp.ClientSession, url: str) -> str:
    """The page at url (answered 200)."""
    async with session.get(url) as got:
        assert got.status == 200
        return await got.text()
