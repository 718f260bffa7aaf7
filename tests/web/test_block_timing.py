"""A shared block's keywords and end on the web page, over HTTP: shown in the table, set and
taken away in its forms (keywords as `--when` takes them, the end a date-time in UTC), through
the same BlockOps and refusals as `/pin shared edit --when … --until …`; a form saved as it
was shown leaves them as they are, an ended block's too."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import quote

import aiohttp
import pytest

from bot.core.blocks.ops import Target
from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.web.app import WebPage
from storage.models import Block
from tests.conftest import BotFactory, ask, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.web.signed_in import shown, signed_in

TOKEN = "web-token-for-timing-tests-0123456789"
ADMIN = "7"
GROUP = "telegram:group:-100123"
PINS = {"enable_in_group": True, "group_shared_admin_ids": [ADMIN]}
NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
Page = tuple[Pinbot, aiohttp.ClientSession, str]


async def said(bot: Pinbot, text: str) -> str:
    reply = await ask(bot, group(ADMIN, platform="telegram"), text)
    assert outcome_of(reply) is Result.DONE, text_of(reply)
    return text_of(reply)


@pytest.fixture
async def page(make_bot: BotFactory, clock: FakeClock) -> AsyncIterator[Page]:
    clock.now = NOW
    bot = make_bot(pins=PINS)
    await said(bot, "/pin shared add rules Be kind.")
    app = WebPage(bot.store, bot.config, TOKEN, clock=clock)
    async with signed_in(app, TOKEN) as (session, root):
        yield bot, session, f"{root}/scope/{quote(GROUP, safe='')}"


def form_of(text: str, label: str) -> dict[str, str]:
    """The fields of a block's change form as the page fills them (what a browser sends when
    the operator saves it without touching anything)."""
    found = re.search(
        rf'<form[^>]*class="edit" data-label="{re.escape(label)}">(.*?)</form>', text, re.S
    )
    assert found is not None
    body = found.group(1)
    fields = {
        name: html.unescape(value)
        for name, value in re.findall(r'<input[^>]*name="(\w+)"[^>]*value="([^"]*)"', body)
    }
    fields.pop("sensitive", None)  # a checkbox: sent only when ticked
    content = re.search(r"<textarea[^>]*>(.*?)</textarea>", body, re.S)
    if content is not None:
        fields["content"] = html.unescape(content.group(1))
    for name in ("level", "state"):
        select = re.search(rf'<select name="{name}">(.*?)</select>', body, re.S)
        assert select is not None
        chosen = re.search(r"<option selected>(\w+)</option>", select.group(1))
        assert chosen is not None
        fields[name] = chosen.group(1)
    return fields


async def post(
    session: aiohttp.ClientSession, url: str, fields: dict[str, str]
) -> tuple[str, str, str]:
    """Send a form; the page it leads to, with its flash's kind and rule."""
    async with session.post(url, data=fields) as sent:
        text = await sent.text()
    flash = re.search(r'<p class="flash (\w+)" id="flash" data-rule="([\w-]*)">', text)
    assert flash is not None, text
    return text, flash.group(1), flash.group(2)


async def rules_of(bot: Pinbot) -> Block:
    (block,) = [b for b in await bot.store.blocks([GROUP]) if b.label == "rules"]
    return block


def table(text: str) -> str:
    found = re.search(r'<div id="shared">(.*?)</div>', text, re.S)
    assert found is not None
    return found.group(1)


async def test_the_page_shows_sets_and_takes_away_keywords_and_an_end(page: Page) -> None:
    bot, session, base = page
    text = await shown(session, base)
    assert '<td class="sent">always</td>' in table(text)
    assert '<td class="ends"><span class="muted">never</span></td>' in table(text)
    fields = form_of(text, "rules")
    assert (fields["when"], fields["until"]) == ("", "")

    fields.update(when='deploy, "release notes, v2"', until="2026-12-24T18:00")
    text, kind, _ = await post(session, f"{base}/change", fields)
    assert kind == "done"
    block = await rules_of(bot)
    assert block.triggers == ("deploy", "release notes, v2")
    assert block.ends_at == datetime(2026, 12, 24, 18, tzinfo=UTC)
    assert block.content == "Be kind."  # the rest as it was
    assert "deploy, &#34;release notes, v2&#34;" in table(text)
    assert '<td class="ends">2026-12-24 18:00</td>' in table(text)
    fields = form_of(text, "rules")
    assert (fields["when"], fields["until"]) == ('deploy, "release notes, v2"', "2026-12-24T18:00")
    versions = html.unescape(await shown(session, f"{base}/history?label=rules"))
    assert '~ keywords: always → deploy, "release notes, v2"' in versions
    assert "~ ends: never → 2026-12-24 18:00 UTC" in versions
    assert 'when a message mentions deploy, "release notes, v2", until 2026-12-24 18:00 UTC' in (
        versions
    )

    # Emptied, the block is sent always and never ends again.
    fields.update(when="", until="")
    text, kind, _ = await post(session, f"{base}/change", fields)
    assert kind == "done"
    block = await rules_of(bot)
    assert (block.triggers, block.ends_at) == ((), None)


async def test_a_form_saved_as_shown_keeps_keywords_it_cannot_write_and_a_passed_end(
    page: Page, clock: FakeClock
) -> None:
    bot, session, base = page
    ops = WebPage(bot.store, bot.config, TOKEN, clock=clock).ops
    target = Target.operator(GROUP, "test")
    # A keyword with a double quote (an import can bring one) has no --when spelling.
    await ops.change(target, "rules", triggers=('say "hi"', "deploy"))
    await said(bot, "/pin shared edit rules --for 1h")
    clock.advance(hours=2)  # the end has passed: it is no end a form could give now
    before = await rules_of(bot)
    fields = form_of(await shown(session, base), "rules")
    fields["content"] = "Be kind, always."
    text, kind, _ = await post(session, f"{base}/change", fields)
    assert kind == "done", text
    after = await rules_of(bot)
    assert after.content == "Be kind, always."
    assert (after.triggers, after.ends_at) == (before.triggers, before.ends_at)
    assert "(ended)" in table(text)


@pytest.mark.parametrize(
    ("changed", "rule", "problem"),
    [
        ({"when": "deploy,,release"}, "triggers", "a keyword is empty"),
        ({"when": "k" * 41}, "triggers", "longer than 40 characters"),
        ({"until": "24.12.2026"}, "ends", "is not a date or a date-time; give a date and time"),
        ({"until": "2026-01-01T00:00"}, "ends", "has already passed"),
    ],
)
async def test_keywords_or_an_end_the_rules_refuse_change_nothing_and_stay_typed(
    page: Page, changed: dict[str, str], rule: str, problem: str
) -> None:
    bot, session, base = page
    before = await rules_of(bot)
    fields = {**form_of(await shown(session, base), "rules"), "content": "Changed.", **changed}
    text, kind, code = await post(session, f"{base}/change", fields)
    assert (kind, code) == ("refused", rule)
    assert problem in html.unescape(text)
    assert await rules_of(bot) == before
    name, value = next(iter(changed.items()))
    assert form_of(text, "rules")[name] == value  # still in the form, to correct


async def test_the_add_form_takes_keywords_and_an_end(page: Page) -> None:
    bot, session, base = page
    text = await shown(session, base)
    csrf = re.search(r'name="csrf" value="([^"]+)"', text)
    assert csrf is not None
    fields = {
        "csrf": csrf.group(1),
        "form": "add",
        "label": "trip",
        "content": "Flight LH123 at 18:00.",
        "level": "context",
        "priority": "0",
        "when": "flight, hotel",
        "until": "2026-12-24T18:00",
    }
    text, kind, _ = await post(session, f"{base}/add", fields)
    assert kind == "done", text
    (trip,) = [b for b in await bot.store.blocks([GROUP]) if b.label == "trip"]
    assert trip.triggers == ("flight", "hotel")
    assert trip.ends_at == datetime(2026, 12, 24, 18, tzinfo=UTC)
    # Without them, as before: sent always, never ending.
    fields.update(label="plain", when="", until="")
    await post(session, f"{base}/add", fields)
    (plain,) = [b for b in await bot.store.blocks([GROUP]) if b.label == "plain"]
    assert (plain.triggers, plain.ends_at) == ((), None)
