"""Changing a group's shared blocks on the web page, in a real browser: through the same rules
as `/pin shared` (the same refusals), logged as the web operator, seen by the next model
request; forms without their session's token, or from another site, change nothing."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page

from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.serving import serve_app
from bot.web.app import WebPage
from tests.browser import WAIT_MS, shot, sign_in
from tests.conftest import OpenAIBots, ask, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.test_web import TOKEN

# The module's tests share its event loop and Playwright driver (tests/module_loop.py).
from tests.module_loop import (  # noqa: F401
    IN_MODULE_LOOP,
    in_module_browser,
    in_module_fake_openai,
    in_module_openai_bots,
    in_module_playwright,
)

pytestmark = IN_MODULE_LOOP

ADMIN = "7"
GROUP = "telegram:group:-100123"
PINS = {"enable_in_group": True, "group_shared_admin_ids": [ADMIN], "max_total_chars": 200}
Started = tuple[Page, str, Pinbot]
Start = Callable[..., Awaitable[Started]]


def admin() -> Any:
    return group(ADMIN, platform="telegram")


async def said(bot: Pinbot, text: str) -> str:
    """The bot's reply to the group's admin."""
    return text_of(await ask(bot, admin(), text))


@pytest_asyncio.fixture(loop_scope="module")
async def start(
    browser: Browser, openai_bots: OpenAIBots, clock: FakeClock
) -> AsyncIterator[Start]:
    runners = []

    async def begin(**web: Any) -> Started:
        bot = await openai_bots(pins=PINS, web=web)
        added = await ask(bot, admin(), "/pin shared add rules Be kind.")
        assert outcome_of(added) is Result.DONE
        page_app = WebPage(bot.store, bot.config, TOKEN, clock=clock)
        runner, port = await serve_app(page_app.app(), host="127.0.0.1", port=0, port_setting="p")
        runners.append(runner)
        base = f"http://127.0.0.1:{port}"
        page = await (await browser.new_context()).new_page()
        page.set_default_timeout(WAIT_MS)
        assert await sign_in(page, base, TOKEN) == 200
        await page.goto(f"{base}/scope/{GROUP}")
        return page, base, bot

    yield begin
    for runner in runners:
        await runner.cleanup()


async def submit(page: Page, selector: str) -> None:
    async with page.expect_navigation():
        await page.click(selector)


async def model_sees(bot: Pinbot, fake_openai: FakeOpenAI) -> str:
    """The system message of the group's next model request."""
    await ask(bot, group("42", platform="telegram"), "hello", mentioned=True)
    return str(fake_openai.messages()[0]["content"])


async def shared(bot: Pinbot) -> list[tuple[str, str, str, str, int]]:
    blocks = await bot.store.blocks([GROUP])
    return [(b.label, b.content, b.level.value, b.state.value, b.priority) for b in blocks]


async def test_a_change_on_the_page_reaches_the_next_request_and_the_log(
    start: Start, fake_openai: FakeOpenAI
) -> None:
    page, _, bot = await start(operator_name="alice")
    edit = 'form.edit[data-label="rules"]'
    await page.fill(f"{edit} textarea", "Be kind and brief.")
    await page.select_option(f"{edit} select[name=level]", "strong")
    await page.fill(f"{edit} input[name=priority]", "5")
    await submit(page, f"{edit} button")
    assert "rules" in await page.inner_text("#flash")
    assert "Be kind and brief." in await page.inner_text("#shared")
    await shot(page, "group-edit")
    assert "Be kind and brief." in await model_sees(bot, fake_openai)
    log = await said(bot, "/pin shared log")
    assert "web:alice" in log and "Be kind and brief." in log

    # Add, idle, activate, pin, unpin and remove, each as /pin shared would.
    await page.fill("#add input[name=label]", "tone")
    await page.fill("#add textarea", "Answer in French.")
    await page.select_option("#add select[name=level]", "strong")
    await submit(page, "#add button")
    assert "Saved strong block 'tone'" in await page.inner_text("#flash")
    assert "Answer in French." in await model_sees(bot, fake_openai)
    tone = 'form.edit[data-label="tone"]'
    for state in ("idle", "active", "pinned", "active"):
        await page.select_option(f"{tone} select[name=state]", state)
        await submit(page, f"{tone} button")
        assert (await shared(bot))[1][3] == state
    await page.select_option(f"{tone} select[name=state]", "idle")
    await submit(page, f"{tone} button")
    assert "Answer in French." not in await model_sees(bot, fake_openai)
    await submit(page, 'form.remove[data-label="tone"] button')  # asks first
    await submit(page, "#remove-form button")
    assert [row[0] for row in await shared(bot)] == ["rules"]
    actions = (await said(bot, "/pin shared log 20")).splitlines()
    assert sum("web:alice" in line for line in actions) >= 6


@pytest.mark.parametrize(
    ("form", "fill", "command"),
    [
        (
            "#add",
            {"label": "a-label-far-too-long-to-keep", "content": "x"},
            "/pin shared add a-label-far-too-long-to-keep x",
        ),
        (
            'form.edit[data-label="rules"]',
            {"content": "y" * 300},
            "/pin shared edit rules " + "y" * 300,
        ),
        (
            'form.edit[data-label="rules"]',
            {"content": "Our key is sk-proj-4f9aQ2vX7LmN8pR3tY6uW1zB5cD0eF"},
            "/pin shared edit rules Our key is sk-proj-4f9aQ2vX7LmN8pR3tY6uW1zB5cD0eF",
        ),
        (
            "#add",
            {"label": "db", "content": "我的密码是Xk9mQ2vLp7，别外传"},
            "/pin shared add db 我的密码是Xk9mQ2vLp7，别外传",
        ),
        (
            'form.edit[data-label="rules"]',
            {"content": '{"password": "Tr0ub4dor&3"}'},
            '/pin shared edit rules {"password": "Tr0ub4dor&3"}',
        ),
    ],
    ids=["label too long", "over the budget", "a credential", "a password in Chinese", "JSON"],
)
async def test_a_refused_change_shows_the_same_refusal_and_changes_nothing(
    start: Start, form: str, fill: dict[str, str], command: str
) -> None:
    page, _, bot = await start()
    before = await shared(bot)
    for name, value in fill.items():
        field = "textarea" if name == "content" else f"input[name={name}]"
        await page.fill(f"{form} {field}", value)
    await submit(page, f"{form} button")
    refusal = await page.inner_text("#flash")
    assert refusal == await said(bot, command)  # word for word what the chat says
    for name, value in fill.items():  # what was typed is still there to fix
        field = "textarea" if name == "content" else f"input[name={name}]"
        assert await page.input_value(f"{form} {field}") == value
    assert await shared(bot) == before
    await shot(page, "group-refused")


async def test_forms_without_their_token_or_from_elsewhere_get_403(start: Start) -> None:
    page, base, bot = await start()
    before = await shared(bot)
    # In the browser: the form posted without its hidden token.
    await page.evaluate("document.querySelector('#add input[name=csrf]').remove()")
    await page.fill("#add input[name=label]", "sneaky")
    await page.fill("#add textarea", "x")
    async with page.expect_navigation() as navigation:
        await page.click("#add button")
    response = await navigation.value
    assert response is not None and response.status == 403
    # Another session's token, another site's origin, a member's personal scope.
    sessions = []
    for _ in range(2):
        session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        await session.post(f"{base}/signin", data={"token": TOKEN})
        async with session.get(f"{base}/scope/{GROUP}") as got:
            token = re.search(r'name="csrf" value="([^"]+)"', await got.text())
        assert token is not None
        sessions.append((session, token.group(1)))
    (first, first_token), (second, second_token) = sessions
    add = {"label": "sneaky", "content": "x"}
    try:
        for session, data, headers, status in (
            (first, {**add, "csrf": second_token}, {}, 403),
            (first, {**add, "csrf": first_token}, {"Origin": "http://evil.example"}, 403),
            (first, {**add, "csrf": first_token}, {"Origin": "null"}, 403),
            (second, {**add, "csrf": ""}, {}, 403),
        ):
            url = f"{base}/scope/{GROUP}/add"
            async with session.post(url, data=data, headers=headers, allow_redirects=False) as sent:
                assert sent.status == status
        member = f"{base}/scope/{GROUP}::u:42/add"
        data = {**add, "csrf": first_token}
        async with first.post(member, data=data, allow_redirects=False) as sent:
            assert sent.status == 404  # personal blocks are their owners'
        # Only keys the bot itself reads: an agent: alias of a real group, or a platform the
        # bot does not serve, would be blocks no request carries, past the group's limit.
        for key in (f"agent:x:{GROUP}", "agent%3Ax%3Aconsole%3Agroup%3A-77", "irc:group:-1"):
            for verb in ("add", "change", "remove"):
                url = f"{base}/scope/{key}/{verb}"
                async with first.post(url, data=data, allow_redirects=False) as sent:
                    assert sent.status == 404, (key, verb)
            async with first.get(f"{base}/scope/{key}") as shown:
                assert shown.status == 404
    finally:
        await first.close()
        await second.close()
    assert await shared(bot) == before


async def test_a_shared_blocks_history_shows_each_change_and_restores_a_version(
    start: Start, fake_openai: FakeOpenAI
) -> None:
    page, base, bot = await start()
    await said(bot, "/pin shared edit rules Be kind.\nNo spam.")
    await said(bot, "/pin shared edit rules Be kind.\nNo spam.\nStay on topic.")
    await page.goto(f"{base}/scope/{GROUP}")
    async with page.expect_navigation():
        await page.click('form.edit[data-label="rules"] a.history')
    assert "History of rules" in await page.inner_text("h1")
    newest = await page.inner_text("#version-1 pre.diff")
    assert "+ Stay on topic." in newest and "  No spam." in newest  # a line diff
    assert "- " not in newest
    second = await page.inner_text("#version-2 pre.diff")
    assert "+ No spam." in second
    await shot(page, "group-history")
    # Version 3 is the first text: restoring it is an edit, as /pin shared restore would make.
    await submit(page, 'form.restore[data-version="3"] button')
    assert "Restored 'rules' to version 3" in await page.inner_text("#flash")
    assert await shared(bot) == [("rules", "Be kind.", "context", "active", 0)]
    await model_sees(bot, fake_openai)
    assert "Be kind." in str(fake_openai.messages()[-1]["content"])  # the context section
    # A removed shared block is listed with a button that brings it back.
    await said(bot, "/pin shared remove rules")
    await page.goto(f"{base}/scope/{GROUP}")
    assert await shared(bot) == []
    await submit(page, 'div.removed[data-label="rules"] form.restore button')
    assert "Restored 'rules' to version 2" in await page.inner_text("#flash")
    assert await shared(bot) == [("rules", "Be kind.", "context", "active", 0)]
    log = await said(bot, "/pin shared log")
    assert "web · restore add context 'rules'" in log  # the page's change, a restore


async def test_sensitive_shared_blocks_are_masked_unless_the_operator_opens_the_raw_view(
    start: Start, fake_openai: FakeOpenAI
) -> None:
    page, base, bot = await start()
    secret = "10.20.30.40"
    await said(bot, f"/pin shared add vpn The gateway is {secret} --sensitive")
    await said(bot, f"/pin shared edit vpn The gateway is {secret}, port 51820")
    await page.goto(f"{base}/scope/{GROUP}")
    vpn = 'form.edit[data-label="vpn"]'
    assert secret not in await page.inner_text("main")
    assert "[ip]" in await page.inner_text("#shared")
    assert await page.locator(f"{vpn} textarea").count() == 0  # nothing masked to save back
    # Saving its other fields keeps the content whole.
    await page.fill(f"{vpn} input[name=priority]", "3")
    await submit(page, f"{vpn} button")
    (block,) = [b for b in await bot.store.blocks([GROUP]) if b.label == "vpn"]
    assert (block.content, block.priority, block.sensitive) == (
        f"The gateway is {secret}, port 51820",
        3,
        True,
    )
    async with page.expect_navigation():
        await page.click(f"{vpn} a.history")
    assert secret not in await page.inner_text("main")
    async with page.expect_navigation():
        await page.click("#open-raw")
    assert secret in await page.inner_text("#version-1") and await page.is_visible("#raw-view")
    await page.goto(f"{base}/scope/{GROUP}")
    async with page.expect_navigation():
        await page.click("#open-raw")
    assert secret in await page.inner_text("#shared")
    await model_sees(bot, fake_openai)
    assert secret not in str(fake_openai.messages())
    # The operator may take it back (as /pin shared sensitive vpn off), and add sensitive blocks.
    await page.uncheck(f"{vpn} input[name=sensitive]")
    await submit(page, f"{vpn} button")
    await model_sees(bot, fake_openai)
    assert secret in str(fake_openai.messages())
    await page.fill("#add input[name=label]", "db")
    await page.fill("#add textarea", "The database is db.internal.example.com:5432")
    await page.check("#add input[name=sensitive]")
    await submit(page, "#add button")
    await model_sees(bot, fake_openai)
    assert "example.com:5432" not in str(fake_openai.messages())
    # The group's log, which every member reads, keeps only the masked text of sensitive ones.
    log = await said(bot, "/pin shared log 20")
    assert "example.com:5432" not in log and "[host:port]" in log
    found = await (await page.context.request.get(f"{base}/search?q=example.com")).text()
    assert "example.com:5432" not in found
