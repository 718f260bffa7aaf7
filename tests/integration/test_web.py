"""The operator's web page in a real browser (Playwright driving Debian's Chromium): signing
in, browsing to a group, content that looks like HTML staying text, wrong tokens refused and
rate-limited, DM scopes private by default. Each page's screenshot is kept as an artifact."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
import yaml
from playwright.async_api import Browser, Page

from bot.serving import serve_app
from bot.web.app import WebPage
from storage import Store
from storage.models import Level, NewBlock, State, UsageTotals
from tests.browser import WAIT_MS, shot, sign_in
from tests.conftest import make_config, put_block
from tests.fakes.clock import FakeClock
from tests.fakes.http import free_port

# The module's tests share its event loop and Playwright driver (tests/module_loop.py).
from tests.module_loop import (  # noqa: F401
    IN_MODULE_LOOP,
    in_module_browser,
    in_module_playwright,
    in_module_store,
)
from tests.process import PINBOT, run_pinbot_here

pytestmark = IN_MODULE_LOOP

TOKEN = "web-token-for-tests-0123456789"
GROUP = "telegram:group:-1001"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)

OpenPage = Callable[..., Awaitable[tuple[Page, str]]]


async def add(store: Store, scope: str, label: str, content: str, actor: str = "") -> None:
    block = NewBlock(scope, label, content, Level.STRONG, State.ACTIVE, 0)
    await put_block(store, block, NOW, actor=actor, audited=bool(actor))


@pytest_asyncio.fixture(loop_scope="module")
async def filled(store: Store) -> Store:
    await add(store, GROUP, "rules", "Be kind.\nNo spam.", actor="7")
    await add(store, GROUP, "hostile", HOSTILE, actor="8")
    await add(store, f"{GROUP}::u:42", "mine", "I prefer short answers.")
    await add(store, "telegram:group:-1002", "other", "Another group's rule.", actor="7")
    await add(store, "telegram:direct:9", "secret-plan", "A private DM note.")
    for day, tokens in (("2026-11-28", 1200), ("2026-11-30", 3400)):
        await store.add_usage(
            platform="telegram",
            sender="42",
            day=day,
            group_key=GROUP,
            usage=UsageTotals(1, tokens, 100, 50),
        )
    return store


@pytest_asyncio.fixture(loop_scope="module")
async def open_page(browser: Browser, filled: Store) -> AsyncIterator[OpenPage]:
    runners = []

    async def start(signed_in: bool = True, **settings: Any) -> tuple[Page, str]:
        page_app = WebPage(filled, make_config(web=settings), TOKEN, clock=FakeClock(NOW))
        runner, port = await serve_app(page_app.app(), host="127.0.0.1", port=0, port_setting="p")
        runners.append(runner)
        base = f"http://127.0.0.1:{port}"
        page = await (await browser.new_context()).new_page()
        page.set_default_timeout(WAIT_MS)
        if signed_in:
            await sign_in(page, base, TOKEN)
        return page, base

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_sign_in_and_browse_to_a_group(open_page: OpenPage) -> None:
    page, base = await open_page(signed_in=False)
    await page.goto(f"{base}/")
    assert page.url == f"{base}/signin"  # nothing without signing in
    await shot(page, "signin")
    assert await sign_in(page, base, TOKEN) == 200
    assert page.url == f"{base}/"
    groups = await page.inner_text("#groups")
    assert GROUP in groups and "telegram:group:-1002" in groups
    assert "telegram:direct:9" not in await page.content()
    assert await page.inner_text("#tokens-today") == "3,450"
    assert "rules" in await page.inner_text("#audit")
    await shot(page, "overview")
    await page.click(f"text={GROUP}")
    assert "Be kind.\nNo spam." in await page.inner_text("#shared")
    member = await page.inner_text(".member")
    assert "Member 42" in member and "I prefer short answers." in member
    assert int(await page.inner_text("#shared-tokens")) > 0
    await shot(page, "group")
    async with page.expect_navigation():
        await page.click("text=Sign out")
    assert page.url == f"{base}/signin", await page.content()
    await page.goto(f"{base}/scope/{GROUP}")
    assert page.url == f"{base}/signin"


async def test_content_that_looks_like_html_is_shown_as_text_and_never_runs(
    open_page: OpenPage,
) -> None:
    page, base = await open_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    await page.goto(f"{base}/scope/{GROUP}")
    assert HOSTILE in await page.inner_text("#shared")
    assert await page.evaluate("window.__pwned") is None
    await page.goto(f"{base}/search?q=pwned")
    assert HOSTILE in await page.inner_text("#results")
    await page.goto(f"{base}/audit")
    assert HOSTILE in await page.inner_text("#audit")
    assert await page.evaluate("window.__pwned") is None and dialogs == []
    assert await page.locator("img[src=x]").count() == 0


async def test_a_wrong_token_shows_nothing_and_is_rate_limited(open_page: OpenPage) -> None:
    page, base = await open_page(signed_in=False)
    for _ in range(5):
        assert await sign_in(page, base, "not-the-token") == 401
        assert "not right" in await page.inner_text("#problem")
        assert GROUP not in await page.content()
    await shot(page, "signin-refused")
    assert await sign_in(page, base, "still-wrong") == 429
    # Even the right token waits: a guesser learns nothing more this minute.
    assert await sign_in(page, base, TOKEN) == 429
    assert "Too many sign-in attempts" in await page.inner_text("#problem")
    await page.goto(f"{base}/")
    assert page.url == f"{base}/signin"


async def test_dm_scopes_are_private_unless_the_operator_shows_them(open_page: OpenPage) -> None:
    page, base = await open_page()
    response = await page.goto(f"{base}/scope/telegram:direct:9")
    assert response is not None and response.status == 404
    await page.goto(f"{base}/search?q=private")
    assert "secret-plan" not in await page.content()
    assert await page.locator("text=Direct chats").count() == 0
    page, base = await open_page(show_direct=True)
    await page.click("text=Direct chats")
    await page.click("text=telegram:direct:9")
    assert "A private DM note." in await page.content()
    await page.goto(f"{base}/search?q=private")
    assert "secret-plan" in await page.inner_text("#results")


async def test_audit_filters_usage_chart_and_search(open_page: OpenPage) -> None:
    page, base = await open_page()
    await page.goto(f"{base}/audit")
    await page.fill("input[name=who]", "7")
    await page.click("form.filters button")
    rows = await page.inner_text("#audit")
    assert "rules" in rows and "other" in rows and "hostile" not in rows
    await page.goto(f"{base}/audit?group={GROUP}&kind=add&since=2026-11-30&until=2026-11-30")
    assert "hostile" in await page.inner_text("#audit")
    await page.goto(f"{base}/audit?since=yesterday")
    assert "should be a date like 2026-11-30" in await page.content()
    await shot(page, "audit")
    await page.goto(f"{base}/usage?days=7")
    assert await page.locator("#chart rect.bar").count() == 7
    titles = await page.locator("#chart rect.bar title").all_text_contents()
    assert "2026-11-30: 3,450 tokens" in titles and "2026-11-29: 0 tokens" in titles
    assert "telegram:42" in await page.inner_text("#users")
    await page.click("text=telegram:42")
    assert "Usage of telegram:42" in await page.inner_text("h1")
    await shot(page, "usage")
    await page.goto(f"{base}/search")
    await page.fill("input[name=q]", "SPAM")
    await page.click("form.filters button")
    assert "rules" in await page.inner_text("#results")
    await shot(page, "search")


async def test_malformed_or_out_of_range_parameters_are_a_400_with_a_message(
    open_page: OpenPage,
) -> None:
    page, base = await open_page()
    for query, message in (
        ("/audit?page=99999999999999999999", "Page should be a whole number"),
        ("/audit?page=-1", "Page should be a whole number"),
        ("/audit?until=9999-12-31", "To should be a year from 1970 to 9998"),
        ("/audit?since=0001-01-01", "From should be a year"),
        ("/audit?since=yesterday", "From should be a date like"),
        ("/audit?kind=delete", "Change should be one of add, edit"),
        ("/usage?days=99999999999999999999", "Days should be a whole number from 1 to 366"),
        ("/usage?days=0", "Days should be a whole number"),
        ("/usage?user=42", "User should be written platform:id"),
    ):
        response = await page.goto(base + query)
        assert response is not None and response.status == 400, query
        assert message in await page.inner_text("main"), query
    response = await page.goto(base + "/audit?page=2&kind=edit&until=2026-12-01")
    assert response is not None and response.status == 200


async def test_the_session_cookie_is_httponly_strict_and_secure_when_asked(
    open_page: OpenPage,
) -> None:
    for secure in (False, True):
        _, base = await open_page(signed_in=False, secure_cookie=secure)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{base}/signin", data={"token": TOKEN}, allow_redirects=False) as sent,
        ):
            cookie = sent.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert ("Secure" in cookie) is secure
        assert sent.headers["Content-Security-Policy"].startswith("default-src 'none'")


async def test_pinbot_web_refuses_to_start_without_its_token(tmp_path: Path) -> None:
    env = {"PINBOT_WEB_TOKEN": "", "HOME": str(tmp_path)}
    code, out, err = await run_pinbot_here("web", env=env)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "PINBOT_WEB_TOKEN" in err


async def test_pinbot_web_serves_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "web.yaml"
    settings = {"storage": {"path": str(tmp_path / "db.sqlite3")}, "web": {"port": port}}
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        *(PINBOT, "web", "--config", str(config)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PINBOT_WEB_TOKEN": TOKEN},
    )
    assert process.stdout is not None
    said = await asyncio.wait_for(process.stdout.readline(), 60)  # once it serves
    assert f"http://127.0.0.1:{port}/" in said.decode()
    jar = aiohttp.CookieJar(unsafe=True)
    async with (
        aiohttp.ClientSession(cookie_jar=jar) as session,
        session.post(f"http://127.0.0.1:{port}/signin", data={"token": TOKEN}) as signed,
    ):
        assert signed.status == 200 and "Overview" in await signed.text()
    process.send_signal(signal.SIGTERM)
    out, err = await process.communicate()
    assert process.returncode == 0, err
    assert TOKEN.encode() not in out + err


async def test_pinbot_web_prints_its_address_and_database_at_any_log_level(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "web.yaml"
    settings = {
        "storage": {"path": "pins.sqlite3"},  # relative: the config file's neighbour
        "web": {"port": port},
        "logging": {"level": "error"},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        "web",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PINBOT_WEB_TOKEN": "t" * 32},
        cwd="/",  # started from elsewhere
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    process.send_signal(signal.SIGTERM)
    _, err = await process.communicate()
    assert process.returncode == 0, err
    assert line == (
        f"pinbot web: http://127.0.0.1:{port}/ (sign in with $PINBOT_WEB_TOKEN); "
        f"database SQLite {tmp_path.resolve() / 'pins.sqlite3'}\n"
    )
    assert err == b""
