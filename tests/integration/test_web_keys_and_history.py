"""Issue 36 on `pinbot web` over HTTP: only scope keys the bot reads (finding 3), a long
history that stays cheap while other pages are served (finding 4), and every label the bot
accepts reachable, '/' and all (finding 6)."""

from __future__ import annotations

import asyncio
import html
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import quote, unquote

import aiohttp
import pytest
from aiohttp import web

from bot.core.blocks.ops import BlockOps, Target
from bot.core.blocks.review import BlockPolicy
from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.serving import serve_app
from bot.web import views
from bot.web.app import WebPage
from tests.conftest import BotFactory, ask, group, outcome_of
from tests.fakes.clock import FakeClock
from tests.integration.test_web import TOKEN

ADMIN = "7"
GROUP = "telegram:group:-100123"
PINS = {
    "enable_in_group": True,
    "group_shared_admin_ids": [ADMIN],
    "max_content_length": 20_000,
    "history_per_block": 60,
}
Served = tuple[Pinbot, aiohttp.ClientSession, str]
Serve = Callable[[], Awaitable[Served]]


async def said(bot: Pinbot, text: str) -> Result | None:
    return outcome_of(await ask(bot, group(ADMIN, platform="telegram"), text))


@pytest.fixture
async def serve(make_bot: BotFactory, clock: FakeClock) -> AsyncIterator[Serve]:
    opened: list[tuple[web.AppRunner, aiohttp.ClientSession]] = []

    async def begin() -> Served:
        bot = make_bot(pins=PINS)
        page = WebPage(bot.store, bot.config, TOKEN, clock=clock)
        runner, port = await serve_app(page.app(), host="127.0.0.1", port=0, port_setting="p")
        session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        opened.append((runner, session))
        base = f"http://127.0.0.1:{port}"
        async with session.post(f"{base}/signin", data={"token": TOKEN}) as signed:
            assert signed.status == 200
        return bot, session, base

    yield begin
    for runner, session in opened:
        await session.close()
        await runner.cleanup()


async def csrf_of(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as page:
        found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    return found.group(1)


async def test_keys_the_bot_never_reads_are_404_and_never_listed(serve: Serve) -> None:
    bot, session, base = await serve()
    assert await said(bot, "/pin shared add rules Be kind.") is Result.DONE
    csrf = await csrf_of(session, f"{base}/scope/{quote(GROUP, safe='')}")
    never_read = [
        "telegram:group:-100123x",
        "telegram:group:42",  # Telegram never gives a group a positive id
        f"telegram:group:-{'1' * 40}",
        "feishu:group:..",
        "TELEGRAM:group:-100123",
        "telegram:group:-0100123",
    ]
    form = {"csrf": csrf, "label": "sneaky", "content": "x", "version": "1"}
    for key in never_read:
        where = f"{base}/scope/{quote(key, safe='')}"
        for verb in ("add", "change", "remove", "restore"):
            async with session.post(f"{where}/{verb}", data=form, allow_redirects=False) as sent:
                assert sent.status == 404, (key, verb)
        for url in (where, f"{where}/history?label=rules", f"{where}/history/rules"):
            async with session.get(url) as shown:
                assert shown.status == 404, url
        assert await bot.store.blocks([key]) == []
    # Blocks written under such a key some other way (an older import, say) are no page's.
    ops = BlockOps(bot.store, BlockPolicy(bot.config.pins))
    for key in never_read[:2]:
        await ops.add(Target.operator(key, "test"), "old", "left over")
    async with session.get(f"{base}/") as overview:
        listed = (await overview.text()).split('<table id="groups">')[1].split("</table>")[0]
    assert GROUP in listed and "-100123x" not in listed and "telegram:group:42" not in listed
    async with session.get(f"{base}/search", params={"q": "left over"}) as searched:
        found = await searched.text()
    assert "-100123x" not in found and "telegram:group:42" not in found


LABELS = ["a/b", "why?", "c#", "100%", "%2F", "שלום/עולם", "..", "x&y=1+2"]


async def test_every_label_the_bot_accepts_has_its_history_and_restore(serve: Serve) -> None:
    bot, session, base = await serve()
    for label in LABELS:
        assert await said(bot, f"/pin shared add {label} first {label}") is Result.DONE, label
        assert await said(bot, f"/pin shared edit {label} second {label}") is Result.DONE
    assert await said(bot, "/pin shared add two words x") is Result.DONE  # 'two' is the label
    scope_url = f"{base}/scope/{quote(GROUP, safe='')}"
    async with session.get(scope_url) as page:
        text = await page.text()
    links = re.findall(r'<a class="history" href="([^"]+)"', text)
    by_label = {unquote(link.partition("?label=")[2]): html.unescape(link) for link in links}
    assert set(by_label) == {*LABELS, "two"}
    csrf = await csrf_of(session, scope_url)
    for label in LABELS:
        async with session.get(f"{base}{by_label[label]}") as history:
            shown = await history.text()
        assert history.status == 200, label
        assert f'History of <span class="label">{html.escape(label)}</span>' in shown
        assert f"+ second {html.escape(label)}" in shown
        form = {"csrf": csrf, "label": label, "version": "2"}
        async with session.post(f"{scope_url}/restore", data=form) as restored:
            assert restored.status == 200
            assert f"Restored &#39;{html.escape(label)}&#39; to version 2" in await restored.text()
    blocks = {b.label: b.content for b in await bot.store.blocks([GROUP])}
    assert all(blocks[label] == f"first {label}" for label in LABELS)
    # The form the issue tried, the label as the rest of the path, is the same page.
    async with session.get(f"{scope_url}/history/a/b") as raw:
        assert raw.status == 200 and "+ second a/b" in await raw.text()
    async with session.get(f"{scope_url}/history?label=no-such") as missing:
        assert missing.status == 404


def test_a_url_segment_encodes_every_reserved_character() -> None:
    for text in [*LABELS, "a b", "a\tb", "?#%&/+"]:
        encoded = views.segment(text)
        assert not set(encoded) & set("/?#& \t+") and unquote(encoded) == text


def content(version: int) -> str:
    """A 100-line block whose every line each edit changes: ndiff's worst case."""
    return "\n".join(
        f"line {n} of the rules, as edited {version} times, and more" for n in range(100)
    )


async def long_history(bot: Pinbot) -> str:
    """A shared admin's 49 edits of a 100-line block, from the chat; the page's URL path."""
    assert await said(bot, f"/pin shared add big {content(0)}") is Result.DONE
    for version in range(1, 50):
        assert await said(bot, f"/pin shared edit big {content(version)}") is Result.DONE
    return f"/scope/{quote(GROUP, safe='')}/history?label=big"


async def timed(session: aiohttp.ClientSession, url: str) -> tuple[int, str, float]:
    started = time.monotonic()
    async with session.get(url) as answer:
        text = await answer.text()
    return answer.status, text, time.monotonic() - started


async def test_a_long_history_answers_in_time_and_the_overview_meanwhile(serve: Serve) -> None:
    bot, session, base = await serve()
    path = await long_history(bot)
    history = asyncio.create_task(timed(session, f"{base}{path}"))
    await asyncio.sleep(0)  # the history's request is on its way first
    status, _, overview_s = await timed(session, f"{base}/")
    assert status == 200
    status, page, history_s = await history
    assert status == 200
    # The page compares at most views.DIFF_LINES lines for at most views.DIFF_SECONDS (0.5 s),
    # off the event loop; the rest of its work is reading 50 versions and rendering a few
    # thousand lines, tens of milliseconds. The limits (2 s and 1 s) leave the
    # margin a machine shared by several test runs needs; before, these took 41 s and 36 s.
    assert history_s <= 2.0 and overview_s <= 1.0, (history_s, overview_s)
    # Too long to compare whole: it says so, and still offers every version.
    assert 'id="not-compared"' in page
    numbers = re.findall(r'class="inline restore" data-version="(\d+)"', page)
    assert numbers == [str(n) for n in range(2, 51)]
    assert page.count('class="diff"') == page.count('<pre class="diff">') >= 1
    assert "not-compared" in page.split('id="version-50"')[1]


async def test_the_history_is_compared_off_the_event_loop(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic, whatever the machine's speed: the first diff waits until the overview
    has been answered. Were the diff on the event loop, nothing could answer the overview and
    the wait would run out."""
    bot, session, base = await serve()
    path = await long_history(bot)
    entered, released, ran_out = threading.Event(), threading.Event(), []
    real = views.diff

    def held(numbered: views.Numbered, number: int) -> list[tuple[str, str]]:
        if number == 1:
            entered.set()
            ran_out.append(not released.wait(10))
        return real(numbered, number)

    monkeypatch.setattr(views, "diff", held)
    history = asyncio.create_task(timed(session, f"{base}{path}"))
    assert await asyncio.to_thread(entered.wait, 10)
    status, _, _ = await timed(session, f"{base}/")
    assert status == 200
    released.set()
    status, page, _ = await history
    assert status == 200 and ran_out == [False]
    assert "+ line 0 of the rules, as edited 49 times" in page


async def test_a_form_with_no_whole_number_is_refused_by_its_rule(serve: Serve) -> None:
    """A priority or a version that is no whole number (a form the page never makes) is
    refused with the rule's code and text, and changes nothing."""
    bot, session, base = await serve()
    assert await said(bot, "/pin shared add rules Be kind.") is Result.DONE
    assert await said(bot, "/pin shared edit rules Be kind, always.") is Result.DONE
    before = await bot.store.blocks([GROUP])
    scope_url = f"{base}/scope/{quote(GROUP, safe='')}"
    csrf = await csrf_of(session, scope_url)
    priority = 'data-rule="priority">Priority must be a whole number from -1000 to 1000.</p>'
    version = (
        'data-rule="no-version">&#39;rules&#39; has versions 1 to 3 in this group&#39;s shared '
        "blocks; send /pin shared history rules to see them.</p>"
    )
    sent = [
        ("add", {"label": "new", "content": "x", "priority": "high"}, priority),
        ("change", {"label": "rules", "content": "x", "priority": "1.5"}, priority),
        ("restore", {"label": "rules", "version": "two"}, version),
        ("restore", {"label": "rules", "version": "0"}, version),
    ]
    for verb, form, flash in sent:
        async with session.post(f"{scope_url}/{verb}", data={"csrf": csrf, **form}) as page:
            assert page.status == 200 and flash in await page.text(), (verb, form)
    assert await bot.store.blocks([GROUP]) == before
