"""The web page as a phone and a desktop show it, in Chromium: every page fits a 390 px screen
(the navigation and the blocks' content readable, nothing wider than the screen) and a desktop;
the usage chart's labels never overlap and are never cut off; removing a shared block asks
first; a save and a restore are one audit entry each, naming what they did; and the operator
guide's screenshot (docs/web-group.png) is the group page as it is now."""

from __future__ import annotations

import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page

from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.serving import serve_app
from bot.web.app import WebPage
from storage.models import UsageTotals
from tests.browser import WAIT_MS, shot, sign_in
from tests.conftest import OpenAIBots, ask, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
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
PINS = {"enable_in_group": True, "group_shared_admin_ids": [ADMIN], "max_total_chars": 2000}
PHONE, DESKTOP = 390, 1280
HEIGHT = 800
GUIDE_SCREENSHOT = Path(__file__).parents[2] / "docs" / "web-group.png"
# Set to 1 to write the guide's screenshot anew (see docs/operator-guide.md, "The web page").
UPDATE_SCREENSHOTS = "PINBOT_UPDATE_SCREENSHOTS"
Open = Callable[..., Awaitable[Page]]


async def said(bot: Pinbot, text: str, user: str = ADMIN) -> str:
    reply = await ask(bot, group(user, platform="telegram"), text)
    assert outcome_of(reply) is Result.DONE, text_of(reply)
    return text_of(reply)


@pytest_asyncio.fixture(loop_scope="module")
async def served(
    browser: Browser, openai_bots: OpenAIBots, clock: FakeClock
) -> AsyncIterator[tuple[Pinbot, str, Open]]:
    """A bot whose group has shared blocks (one waiting for keywords, one with an end), a
    member's personal block and some usage, its web page, and a way to open that page signed
    in at a width."""
    bot = await openai_bots(pins=PINS, web={"operator_name": "alice"})
    await said(bot, "/pin shared add rules Be kind.\nNo spam.\nAnswer in the language asked.")
    await said(
        bot,
        "/pin shared add deploy Deploys go out on Tuesdays after the review; the on-call "
        "person confirms in the channel. --when deploy,release --until 2031-01-01T09:00",
    )
    await said(bot, "/pin add style I prefer short answers with examples.", user="42")
    await bot.store.add_usage(
        platform="telegram",
        sender="42",
        day=clock.now.date().isoformat(),
        group_key=GROUP,
        usage=UsageTotals(1, 3400, 100, 50),
    )
    page_app = WebPage(bot.store, bot.config, TOKEN, clock=clock)
    runner, port = await serve_app(page_app.app(), host="127.0.0.1", port=0, port_setting="p")
    base = f"http://127.0.0.1:{port}"

    async def open_at(width: int) -> Page:
        context = await browser.new_context(viewport={"width": width, "height": HEIGHT})
        page = await context.new_page()
        page.set_default_timeout(WAIT_MS)
        assert await sign_in(page, base, TOKEN) == 200
        return page

    yield bot, base, open_at
    await runner.cleanup()


async def fits(page: Page, width: int) -> None:
    """Nothing on the page is wider than the screen: no sideways scrolling of the page."""
    wide = await page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"{page.url} is {wide} px wide at {width} px"


async def inside(page: Page, selector: str, width: int) -> int:
    """Each element of selector is on the screen from left to right, in a readable size; how
    many there are."""
    boxes = await page.eval_on_selector_all(
        selector,
        """found => found.map(e => {
            const box = e.getBoundingClientRect();
            return [box.left, box.right, parseFloat(getComputedStyle(e).fontSize),
                    e.checkVisibility()];
        })""",
    )
    for left, right, size, visible in boxes:
        assert visible and left >= 0 and right <= width, (selector, left, right, width)
        assert size >= 12, (selector, size)
    return len(boxes)


@pytest.mark.parametrize("width", [PHONE, DESKTOP], ids=["phone", "desktop"])
async def test_every_page_fits_the_screen_with_its_navigation_and_blocks_readable(
    served: tuple[Pinbot, str, Open], width: int
) -> None:
    _, base, open_at = served
    page = await open_at(width)
    group_page = f"{base}/scope/{GROUP}"
    pages = {
        "overview": f"{base}/",
        "group": group_page,
        "history": f"{group_page}/history?label=rules",
        "remove": f"{group_page}/remove?label=deploy",
        "audit": f"{base}/audit",
        "usage": f"{base}/usage",
        "search": f"{base}/search?q=kind",
        "person": f"{base}/person?user=telegram:42",
    }
    for name, url in pages.items():
        await page.goto(url)
        await fits(page, width)
        assert await inside(page, "header a, header button", width) == 6  # every link, and out
        await shot(page, f"layout-{name}-{width}")
    # The blocks' content, in full: shared, the member's, and in the audit log and search.
    await page.goto(group_page)
    assert await inside(page, "table.blocks pre.content", width) == 3
    assert await inside(page, "table.blocks td.label", width) == 3
    contents = await page.locator("#shared table.blocks pre.content").all_inner_texts()
    assert contents[0] == "Be kind.\nNo spam.\nAnswer in the language asked."
    assert await inside(page, "form.edit textarea, form.edit button, #add button", width) == 5
    await page.goto(f"{base}/audit")
    assert await inside(page, "#audit pre.content", width) > 0
    await page.goto(f"{base}/search?q=kind")
    assert await inside(page, "#results pre.content", width) == 1
    if width == PHONE:  # each cell a line of the screen's width, saying what it is
        await page.goto(group_page)
        cells = await page.eval_on_selector_all(
            "table.blocks td, table.settings td",
            "found => found.map(e => e.getBoundingClientRect().width)",
        )
        assert cells and min(cells) >= width / 2, cells
        named = await page.eval_on_selector(
            "#shared table.blocks td:nth-child(5)",
            "cell => getComputedStyle(cell, '::before').content",
        )
        assert named == '"Content: "'


@pytest.mark.parametrize("width", [PHONE, DESKTOP], ids=["phone", "desktop"])
@pytest.mark.parametrize("days", [1, 7, 30, 90, 366])
async def test_the_usage_charts_labels_are_apart_and_whole(
    served: tuple[Pinbot, str, Open], width: int, days: int, clock: FakeClock
) -> None:
    _, base, open_at = served
    page = await open_at(width)
    await page.goto(f"{base}/usage?days={days}")
    await fits(page, width)
    charts = page.locator("svg.chart:visible")
    assert await charts.count() == 1
    chart = charts.first
    assert await chart.locator("rect.bar").count() == days
    chart_box = await chart.bounding_box()
    assert chart_box is not None and chart_box["x"] + chart_box["width"] <= width
    boxes = await chart.locator("text").evaluate_all(
        """texts => texts.map(t => {
            const box = t.getBoundingClientRect();
            return [t.textContent, box.left, box.top, box.right, box.bottom];
        })"""
    )
    shown = [text for text, *_ in boxes]
    assert clock.now.date().isoformat()[5:] in shown  # today's day is always named
    assert "3,450" in shown and "0" in shown  # the value axis: its top and zero
    right, bottom = chart_box["x"] + chart_box["width"], chart_box["y"] + chart_box["height"]
    for text, left, top, end, low in boxes:  # whole: inside the drawing
        assert chart_box["x"] <= left and end <= right and chart_box["y"] <= top, text
        assert low <= bottom, text
    for index, (text, left, top, end, low) in enumerate(boxes):  # apart: no two overlap
        for other, left2, top2, end2, low2 in boxes[index + 1 :]:
            apart = end <= left2 or end2 <= left or low <= top2 or low2 <= top
            assert apart, f"{text!r} overlaps {other!r} ({days} days at {width} px)"
    await shot(page, f"usage-{days}-days-{width}")


async def test_removing_a_shared_block_asks_first(served: tuple[Pinbot, str, Open]) -> None:
    bot, base, open_at = served
    page = await open_at(PHONE)
    await page.goto(f"{base}/scope/{GROUP}")
    async with page.expect_navigation():
        await page.click('form.remove[data-label="deploy"] button')
    assert "Remove deploy from" in await page.inner_text("h1")
    assert "Deploys go out on Tuesdays" in await page.inner_text("#to-remove")
    assert "restored" in await page.inner_text("#to-remove")
    await shot(page, "remove-confirm")
    labels = [b.label for b in await bot.store.blocks([GROUP])]
    assert labels == ["rules", "deploy"]  # asking changes nothing
    async with page.expect_navigation():
        await page.click("#cancel")
    assert GROUP in await page.inner_text("h1")
    assert [b.label for b in await bot.store.blocks([GROUP])] == ["rules", "deploy"]

    # A removal posted without the confirmation gets the question again, and changes nothing.
    await page.goto(f"{base}/scope/{GROUP}/remove?label=deploy")
    await page.evaluate("document.querySelector('#remove-form input[name=confirm]').remove()")
    async with page.expect_navigation() as unconfirmed:
        await page.click("#remove-form button")
    response = await unconfirmed.value
    assert response is not None and response.status == 400
    assert "Remove deploy from" in await page.inner_text("h1")
    assert [b.label for b in await bot.store.blocks([GROUP])] == ["rules", "deploy"]

    async with page.expect_navigation():
        await page.click("#remove-form button")
    assert "deploy" in await page.inner_text("#flash")
    assert [b.label for b in await bot.store.blocks([GROUP])] == ["rules"]
    assert "deploy" in await page.inner_text(".removed")  # and it can be brought back

    # A label the group has not: nothing to confirm.
    missing = await page.goto(f"{base}/scope/{GROUP}/remove?label=nothing")
    assert missing is not None and missing.status == 404


async def test_a_save_and_a_restore_are_one_audit_entry_each_naming_what_they_did(
    served: tuple[Pinbot, str, Open],
) -> None:
    bot, base, open_at = served
    page = await open_at(DESKTOP)
    await page.goto(f"{base}/scope/{GROUP}")
    edit = 'form.edit[data-label="rules"]'
    await page.fill(f"{edit} textarea", "Be kind and brief.")
    await page.select_option(f"{edit} select[name=level]", "strong")
    await page.fill(f"{edit} input[name=priority]", "5")
    async with page.expect_navigation():
        await page.click(f"{edit} button")
    assert "rules" in await page.inner_text("#flash")

    await page.goto(f"{base}/audit?group={GROUP}")
    actions = await page.locator("#audit td.action").all_inner_texts()
    assert actions[0] == "edit content; level strong; priority 5"
    # deploy's and rules' own adds, one entry each, keywords and end included
    assert actions[1:] == [
        "add context; triggers deploy, release; ends 2031-01-01T09:00+00:00",
        "add context",
    ]
    log = await said(bot, "/pin shared log")
    assert "web:alice · edit content; level strong; priority 5 'rules'" in log
    assert log.count("'rules'") == 2  # the add and the save

    # Version 2 is the block before the save: bringing it back is a restore, said so.
    await page.goto(f"{base}/scope/{GROUP}/history?label=rules")
    async with page.expect_navigation():
        await page.click('form.restore[data-version="2"] button')
    assert "Restored 'rules' to version 2" in await page.inner_text("#flash")
    await page.goto(f"{base}/audit?group={GROUP}")
    actions = await page.locator("#audit td.action").all_inner_texts()
    assert actions[0] == "restore content; level context; priority 0"
    assert len(actions) == 4
    await page.goto(f"{base}/audit?group={GROUP}&kind=restore")
    assert await page.locator("#audit td.action").all_inner_texts() == [actions[0]]
    await shot(page, "audit-restore")
    log = await said(bot, "/pin shared log")
    assert "web:alice · restore content; level context; priority 0 'rules'" in log

    # A removed block brought back from the chat is a restore too.
    await said(bot, "/pin shared remove deploy")
    await said(bot, "/pin shared restore deploy")
    log = await said(bot, "/pin shared log 1")
    restored = "restore add context; triggers deploy, release; ends 2031-01-01T09:00+00:00"
    assert f"{ADMIN} · {restored} 'deploy'" in log


def png_size(png: bytes) -> tuple[int, int]:
    """A PNG's width and height, from its header."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


async def test_the_guides_screenshot_is_the_group_page_as_it_is(
    served: tuple[Pinbot, str, Open],
) -> None:
    """docs/web-group.png is this test's screenshot of a group's page at a desktop's width,
    whole. With PINBOT_UPDATE_SCREENSHOTS=1 the test writes it; otherwise it checks that the
    page still has the screenshot's size (a page that gained or lost a part, or whose layout
    changed, has another), and says how to write it anew."""
    _, base, open_at = served
    page = await open_at(DESKTOP)
    await page.goto(f"{base}/scope/{GROUP}")
    png = await page.screenshot(full_page=True)
    await shot(page, "web-group")
    if os.environ.get(UPDATE_SCREENSHOTS) == "1":
        GUIDE_SCREENSHOT.write_bytes(png)
    assert png_size(GUIDE_SCREENSHOT.read_bytes()) == png_size(png), (
        f"{GUIDE_SCREENSHOT} is not the group page as it is now: run this test with "
        f"{UPDATE_SCREENSHOTS}=1 to write it anew"
    )
