"""A person's data on the web page (issue 47, item 4), over real HTTP to the app on 127.0.0.1:
their counts by kind, the export `/export me` gives them as a download, and a forget that asks
to confirm and then runs what `pinbot forget --user … --yes` runs. Forms are driven in Chromium;
what needs no browser (the download, requests a browser would never send) with aiohttp. Nothing
is shown, downloaded or removed without signing in, without the form's token, or for a person
mistyped; the web page logs each export and forget, naming only the person."""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import Browser, Page

from bot.core.blocks import BlockOps, BlockPolicy, Rule, refusal
from bot.core.commands import PersonCommands, PersonData
from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.serving import serve_app
from bot.web.app import WebPage
from storage.models import Channel
from tests.browser import WAIT_MS, shot, sign_in
from tests.conftest import BotFactory, ask, dm, group, outcome_of
from tests.fakes.clock import FakeClock
from tests.integration.test_web import TOKEN

ME = "4242"  # the person the operator looks up
OTHER = "77"  # someone else, whose data must stay as it was
PERSON = f"telegram:{ME}"
CHAT = "-100123"
PINS = {"enable_in_group": True}
DIET = "Vegan, no nuts"  # what the person wrote: in no log line


@dataclass
class Served:
    """The web page over a bot's store, and where it listens."""

    bot: Pinbot
    page: WebPage
    base: str

    def url(self, path: str, user: str = PERSON) -> str:
        return f"{self.base}{path}?user={quote(user, safe='')}"

    def at(self, url: str, path: str) -> bool:
        """Whether url is path's for the person (':' encoded or not)."""
        return unquote(url) == unquote(self.url(path))

    async def held(self, user: str = ME) -> dict[str, Any]:
        """Everything held about user, as the export has it (but its moment)."""
        data = PersonData(self.bot.store, self.page.ops, self.page.clock)
        document = await data.export("telegram", user)
        del document["exported_at"]
        return document


Serve = Callable[..., Awaitable[Served]]


async def said(bot: Pinbot, conversation: Any, text: str) -> Result | None:
    return outcome_of(await ask(bot, conversation, text))


@pytest.fixture
async def serve(make_bot: BotFactory, clock: FakeClock) -> AsyncIterator[Serve]:
    """Starts the page over a bot in which the person has blocks in their direct chat and in a
    group, and conversation; someone else has a block and conversation too."""
    runners: list[web.AppRunner] = []

    async def begin(**web_settings: Any) -> Served:
        bot = make_bot(pins=PINS, web=web_settings)
        me, other = dm(ME, platform="telegram"), dm(OTHER, platform="telegram")
        assert await said(bot, me, f"/pin add diet {DIET}") is Result.DONE
        assert await said(bot, me, "hello there") is Result.DONE
        in_group = group(ME, CHAT, platform="telegram")
        assert await said(bot, in_group, "/pin add mine Short answers here.") is Result.DONE
        assert await said(bot, other, "/pin add note Their own note.") is Result.DONE
        assert await said(bot, other, "hi") is Result.DONE
        page = WebPage(bot.store, bot.config, TOKEN, clock=clock)
        runner, port = await serve_app(page.app(), host="127.0.0.1", port=0, port_setting="p")
        runners.append(runner)
        return Served(bot, page, f"http://127.0.0.1:{port}")

    yield begin
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def sessions() -> AsyncIterator[Callable[[], aiohttp.ClientSession]]:
    """HTTP clients that keep cookies for 127.0.0.1, closed after the test."""
    opened: list[aiohttp.ClientSession] = []

    def client() -> aiohttp.ClientSession:
        opened.append(aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)))
        return opened[-1]

    yield client
    for session in opened:
        await session.close()


async def signed_in(session: aiohttp.ClientSession, base: str) -> aiohttp.ClientSession:
    async with session.post(f"{base}/signin", data={"token": TOKEN}) as signed:
        assert signed.status == 200
    return session


async def csrf_of(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as page:
        found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    return found.group(1)


async def in_browser(browser: Browser, served: Served) -> Page:
    page = await (await browser.new_context()).new_page()
    page.set_default_timeout(WAIT_MS)
    assert await sign_in(page, served.base, TOKEN) == 200
    return page


async def counts_shown(page: Page) -> dict[str, int]:
    rows = page.locator("#counts tr[data-kind]")
    shown = {}
    for n in range(await rows.count()):
        kind = await rows.nth(n).get_attribute("data-kind")
        assert kind is not None
        shown[kind] = int((await rows.nth(n).locator("td.num").inner_text()).replace(",", ""))
    return shown


async def test_a_persons_page_shows_their_counts_and_is_linked_where_they_are_named(
    serve: Serve, browser: Browser
) -> None:
    served = await serve(show_direct=True)
    page = await in_browser(browser, served)
    await page.fill("#person-lookup input[name=user]", f"  Telegram:{ME} ")
    async with page.expect_navigation():
        await page.click("#person-lookup button")
    assert f"A person's data: {PERSON}" in await page.inner_text("h1")
    assert await page.input_value("#lookup input[name=user]") == PERSON
    held = await served.held()
    shown = await counts_shown(page)
    assert shown == await served.page.person_data.counts("telegram", ME)
    assert shown["blocks"] == 2 == len(held["blocks"])
    assert shown["turns"] == len(held["turns"]) >= 2
    assert "Pinned blocks" in await page.inner_text("#counts")
    await shot(page, "person")
    # Someone the bot never met: nothing held, said so.
    await page.fill("#lookup input[name=user]", "telegram:5")
    async with page.expect_navigation():
        await page.click("#lookup button")
    assert "Nothing held" in await page.inner_text("#nothing-held")
    assert await page.locator("#counts").count() == 0
    # Where a page names the person, it links to their page.
    await page.goto(f"{served.base}/direct")
    async with page.expect_navigation():
        await page.click(f'#direct a.person[href$="{ME}"]')
    assert served.at(page.url, "/person")
    await page.goto(f"{served.base}/scope/telegram:group:{CHAT}")
    async with page.expect_navigation():
        await page.click(f".member a.person:text('{ME}')")
    assert served.at(page.url, "/person")
    await page.goto(f"{served.base}/usage")
    async with page.expect_navigation():
        await page.click(f'#users a.person[href$="{ME}"]')
    assert served.at(page.url, "/person")


async def test_the_download_is_the_file_export_me_gives_them(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession], caplog: pytest.LogCaptureFixture
) -> None:
    served = await serve(show_direct=True, operator_name="alice")
    session = await signed_in(sessions(), served.base)
    async with session.get(served.url("/person")) as person:
        assert 'id="export"' in await person.text()
    with caplog.at_level(logging.INFO, logger="bot.web.app"):
        async with session.get(served.url("/person/export")) as download:
            assert download.status == 200
            disposition = download.headers["Content-Disposition"]
            assert download.content_type == "application/json"
            got = json.loads(await download.read())
    ops = BlockOps(served.bot.store, BlockPolicy(served.bot.config.pins), served.page.clock)
    commands = PersonCommands(PersonData(served.bot.store, ops, served.page.clock))
    reply = await commands.export_me("telegram", ME, True, "me")
    assert reply.document is not None
    assert disposition == f'attachment; filename="{reply.document.name}"'
    expected = json.loads(reply.document.data)
    assert {k: v for k, v in got.items() if k != "exported_at"} == {
        k: v for k, v in expected.items() if k != "exported_at"
    }
    assert {b["label"] for b in got["blocks"]} == {"diet", "mine"} and got["turns"]
    logged = [r.getMessage() for r in caplog.records if r.name == "bot.web.app"]
    assert logged == [f"web:alice exported the data of {PERSON} from the web page"]


async def test_the_export_stays_off_the_page_while_direct_chats_are_private(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession]
) -> None:
    served = await serve()  # web.show_direct: false, the default
    session = await signed_in(sessions(), served.base)
    async with session.get(served.url("/person")) as person:
        text = await person.text()
    assert 'id="export"' not in text and f"pinbot export --user {PERSON}" in text
    async with session.get(served.url("/person/export")) as download:
        assert download.status == 403 and download.content_type == "text/html"
        text = await download.text()
    assert "gives no export while it keeps direct chats private" in html_text(text)
    assert "keeps direct chats private (<code>web.show_direct</code> is off)" in text
    assert DIET not in text
    assert "Content-Disposition" not in download.headers


async def test_forget_asks_to_confirm_and_then_removes_everything_of_theirs(
    serve: Serve, browser: Browser, caplog: pytest.LogCaptureFixture
) -> None:
    served = await serve()
    before, others = await served.held(), await served.held(OTHER)
    page = await in_browser(browser, served)
    await page.goto(served.url("/person"))
    async with page.expect_navigation():
        await page.click("#forget")
    confirm = await page.inner_text("#to-remove")
    assert "It cannot be undone." in confirm and "a former member" in confirm
    assert await counts_shown(page) == await served.page.person_data.counts("telegram", ME)
    await shot(page, "person-forget-confirm")
    # Without ticking the box the browser does not send the form: nothing goes.
    await page.click("#forget-form button")
    assert served.at(page.url, "/person/forget")
    assert await served.held() == before
    await page.check("#forget-form input[name=confirm]")
    with caplog.at_level(logging.INFO, logger="bot.web.app"):
        async with page.expect_navigation():
            await page.click("#forget-form button")
    assert served.at(page.url, "/person")
    flash = await page.inner_text("#flash")
    assert flash.startswith(f"Done: I removed everything I held about {PERSON}")
    assert "2 pinned blocks" in flash
    assert "Nothing held" in await page.inner_text("#nothing-held")
    await shot(page, "person-forgotten")
    after = await served.held()
    assert after["blocks"] == after["turns"] == after["usage"] == []
    assert after["versions"] == {}
    assert await served.bot.store.blocks([f"telegram:direct:{ME}"]) == []
    assert await served.held(OTHER) == others  # everyone else's as it was
    logged = [r.getMessage() for r in caplog.records if r.name == "bot.web.app"]
    assert logged == [f"web forgot {PERSON} from the web page: done"]
    assert DIET not in caplog.text


async def test_a_forget_the_review_refuses_says_why_and_removes_nothing(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = await serve()
    policy = served.page.ops.policy
    review = policy.review

    async def refusing(change: Any, where: Any, **kwargs: Any) -> Any:
        if change.by.channel is Channel.FORGET:
            return refusal(Rule.PINNED, where, label=change.wanted[0].label)
        return await review(change, where, **kwargs)

    monkeypatch.setattr(policy, "review", refusing)
    before = await served.held()
    session = await signed_in(sessions(), served.base)
    csrf = await csrf_of(session, served.url("/person/forget"))
    form = {"csrf": csrf, "user": PERSON, "confirm": "yes"}
    async with session.post(f"{served.base}/person/forget", data=form) as sent:
        assert sent.status == 200 and served.at(str(sent.url), "/person")
        text = html.unescape(await sent.text())
    assert 'class="flash refused"' in text
    assert re.search(r"Nothing was removed: Block '(diet|mine)' is pinned", text)
    assert await served.held() == before


async def test_nothing_is_shown_downloaded_or_forgotten_without_signing_in(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession]
) -> None:
    served = await serve(show_direct=True)
    before = await served.held()
    session = sessions()
    for path in ("/person", "/person/export", "/person/forget"):
        async with session.get(served.url(path), allow_redirects=False) as shown:
            assert shown.status == 303 and shown.headers["Location"] == "/signin", path
            assert ME not in await shown.text()
    form = {"user": PERSON, "confirm": "yes", "csrf": "guessed"}
    async with session.post(
        f"{served.base}/person/forget", data=form, allow_redirects=False
    ) as sent:
        assert sent.status == 303 and sent.headers["Location"] == "/signin"
    assert await served.held() == before


async def test_a_forget_without_its_forms_token_or_its_confirmation_changes_nothing(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession]
) -> None:
    served = await serve()
    before = await served.held()
    session = await signed_in(sessions(), served.base)
    theirs = await csrf_of(await signed_in(sessions(), served.base), f"{served.base}/person")
    forget = f"{served.base}/person/forget"
    for token in ({}, {"csrf": ""}, {"csrf": theirs}):  # none, empty, another session's
        async with session.post(forget, data={"user": PERSON, "confirm": "yes", **token}) as sent:
            assert sent.status == 403, token
    csrf = await csrf_of(session, f"{served.base}/person")
    async with session.post(
        forget, data={"user": PERSON, "confirm": "yes", "csrf": csrf}, headers={"Origin": "null"}
    ) as sent:
        assert sent.status == 403
    for confirm in ({}, {"confirm": "no"}):
        async with session.post(forget, data={"user": PERSON, "csrf": csrf, **confirm}) as sent:
            assert sent.status == 400
            text = await sent.text()
        assert "Nothing was removed: tick the box" in text and "It cannot be undone." in text
    assert await served.held() == before


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("4242", "'4242' is not a person. Write a person as platform:id"),
        ("slack:4242", "There is no platform 'slack' here (only console, feishu, telegram)"),
        ("telegram:bob", "'telegram:bob' is not a telegram person: write telegram:<user id>"),
        ("telegram:-100123", "is not a telegram person"),  # a group, not a person
        ("telegram:42:1", "is not a telegram person"),
        ("telegram:042", "is not a telegram person"),
        ("feishu:4242", "is not a feishu person: write feishu:<open_id> (ou_…)"),
        ("telegram:" + "9" * 500, "is not a telegram person"),
        ("telegram:", "is not a person"),
        (":4242", "is not a person"),
    ],
)
async def test_a_mistyped_person_is_told_how_to_write_one_and_nothing_changes(
    serve: Serve, sessions: Callable[[], aiohttp.ClientSession], typed: str, message: str
) -> None:
    served = await serve(show_direct=True)
    before = await served.held()
    session = await signed_in(sessions(), served.base)
    csrf = await csrf_of(session, f"{served.base}/person")
    for path in ("/person", "/person/export", "/person/forget"):
        async with session.get(served.url(path, typed)) as shown:
            assert shown.status == 400 and shown.content_type == "text/html", path
            text = await shown.text()
        assert message in html_text(text), path
        assert "Content-Disposition" not in shown.headers
    form = {"user": typed, "confirm": "yes", "csrf": csrf}
    async with session.post(f"{served.base}/person/forget", data=form) as sent:
        assert sent.status == 400
        assert message in html_text(await sent.text())
    assert await served.held() == before


def html_text(page: str) -> str:
    """The problem a page shows, as its reader reads it."""
    found = re.search(r'<p class="problem" id="problem">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))
