"""A group's own settings on the web page, over HTTP (issue 49): the page shows each setting of
the group and of its topics with where it comes from, as `/group show` does, and its forms
change them through the same road as `/group` (the same parser, the same review of models and
the operator's caps, one version and one audit entry each, undo), logged as the web operator;
what the page sets applies to the group's next message, and bad input changes nothing."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from urllib.parse import quote

import aiohttp
import pytest

from bot.core.entry.pinbot import Pinbot
from bot.core.people import AdminLookup
from bot.web.app import WebPage
from tests.conftest import BotFactory, ask, group, text_of
from tests.fakes.clock import FakeClock
from tests.web.signed_in import shown, signed_in

TOKEN = "web-token-for-settings-tests-0123456789"
CHAT = "-100123"
GROUP = f"telegram:group:{CHAT}"
OWNER, MEMBER = "1", "42"
Page = tuple[Pinbot, aiohttp.ClientSession, str]


def platform_says(answer: bool) -> AdminLookup:
    async def lookup() -> bool | None:
        return answer

    return lookup


async def said(bot: Pinbot, who: str, text: str, *, topic: str | None = None) -> str:
    """The bot's reply in the group (the owner asked of the platform as the owner)."""
    reply = await ask(
        bot,
        group(who, CHAT, topic=topic, platform="telegram"),
        text,
        platform_admin=platform_says(who == OWNER),
    )
    return text_of(reply) or ""


@pytest.fixture
async def page(make_bot: BotFactory, clock: FakeClock) -> AsyncIterator[Page]:
    bot = make_bot(
        groups={"max_daily_tokens": 10_000},
        llm={"models": {"fast": {"model": "fast-1", "base_url": "http://127.0.0.1:9/v1"}}},
        web={"operator_name": "alice"},
    )
    app = WebPage(bot.store, bot.config, TOKEN, clock=clock)
    async with signed_in(app, TOKEN) as (session, root):
        yield bot, session, root


def group_page(base: str, topic: str | None = None) -> str:
    return f"{base}/scope/{quote(GROUP, safe='')}" + (f"?topic={topic}" if topic else "")


def rows(text: str, place: str) -> dict[str, tuple[str, str]]:
    """Each setting of place on the page: (what applies, where it comes from)."""
    found = re.search(
        rf'<div class="card place-settings" data-place="{re.escape(place)}">(.*?)</table>',
        text,
        re.S,
    )
    assert found is not None, place
    return {
        name: (re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", value))).strip(), source)
        for name, value, source in re.findall(
            r'<tr data-name="(\w+)">\s*<td>\w+</td>\s*<td class="value">(.*?)</td>\s*'
            r'<td class="source">(\w+)</td>',
            found.group(1),
            re.S,
        )
    }


async def change(
    session: aiohttp.ClientSession, base: str, setting: str, **fields: str
) -> tuple[str, str]:
    """Send a settings form as the page fills it; the flash's kind and words on the page it
    leads to."""
    text = await shown(session, group_page(base))
    csrf = re.search(r'name="csrf" value="([^"]+)"', text)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "setting": setting, "topic": "", **fields}
    async with session.post(f"{group_page(base)}/settings", data=data) as sent:
        assert sent.status == 200
        after = await sent.text()
    flash = re.search(r'<p class="flash (\w+)" id="flash"[^>]*>(.*?)</p>', after, re.S)
    assert flash is not None, after
    return flash.group(1), html.unescape(flash.group(2))


async def test_the_page_shows_and_changes_a_groups_settings_as_group_does(page: Page) -> None:
    bot, session, base = page
    shown_first = rows(await shown(session, group_page(base)), GROUP)
    assert shown_first["pins"] == ("off", "config")
    assert shown_first["model"] == ("offline", "config")
    assert shown_first["admins"] == ("nobody (and from the config: nobody)", "config")
    assert "disabled in groups" in await said(bot, MEMBER, "/pin list")

    assert await change(session, base, "pins", value="on") == (
        "done",
        "pins for this group: on. /group undo takes it back.",
    )
    assert await change(session, base, "admins", verb="add", person=MEMBER) == (
        "done",
        f"{MEMBER} is now among the admins of this group. /group undo takes it back.",
    )
    # What the page set applies to the group's next message, and /group show tells it.
    assert "Saved" in await said(bot, MEMBER, "/pin shared add rule Be kind.")
    chat_show = await said(bot, MEMBER, "/group show")
    assert "- pins: on (from the group)" in chat_show
    assert f"- admins: {MEMBER} (from the group)" in chat_show
    now = rows(await shown(session, group_page(base)), GROUP)
    assert now["pins"] == ("on", "group")
    assert now["admins"] == (f"{MEMBER} (and from the config: nobody)", "group")

    # The same review as /group: a model not in llm.models, a budget over the cap.
    kind, said_ = await change(session, base, "model", value="slow")
    assert (kind, said_) == (
        "refused",
        "There is no model 'slow' here. The operator's models: fast.",
    )
    kind, said_ = await change(session, base, "budget_daily", value="20000")
    assert kind == "refused" and "at most 10,000 tokens here (groups.max_daily_tokens)" in said_
    assert (await change(session, base, "model", value="fast"))[0] == "done"
    assert (await change(session, base, "budget_daily", value="5,000"))[0] == "done"
    assert rows(await shown(session, group_page(base)), GROUP)["budget_daily"] == (
        "5,000 tokens",
        "group",
    )
    assert (await change(session, base, "budget_daily", value=""))[0] == "done"  # the config's

    # One version and one audit entry per change, each naming the web operator.
    versions = await bot.store.setting_versions(GROUP)
    assert [(v.name, v.actor, v.channel) for v in reversed(versions)] == [
        ("pins", "web:alice", "web"),
        ("admins", "web:alice", "web"),
        ("model", "web:alice", "web"),
        ("budget_daily", "web:alice", "web"),
        ("budget_daily", "web:alice", "web"),
    ]
    entries = await bot.store.audit_log(GROUP, 20)
    assert sum(e.kind.value == "setting" for e in entries) == 5

    # Undo from the page takes back the last change; the chat's /group undo the one before.
    assert await change(session, base, "undo") == (
        "done",
        "Undone: budget_daily back as before. /group undo again takes back the one before.",
    )
    assert rows(await shown(session, group_page(base)), GROUP)["budget_daily"][1] == "group"
    assert (await said(bot, OWNER, "/group undo")).startswith("Undone: budget_daily")
    assert (await change(session, base, "reset"))[0] == "done"
    assert await bot.store.settings_of([GROUP]) == {}


async def test_a_topics_settings_are_shown_and_set_on_their_own(page: Page) -> None:
    bot, session, base = page
    topic = f"{GROUP}:topic:5"
    assert topic not in await shown(session, group_page(base))  # no topic sets anything yet
    assert f'data-place="{topic}"' in await shown(session, group_page(base, "5"))
    text = await shown(session, group_page(base))
    csrf = re.search(r'name="csrf" value="([^"]+)"', text)
    assert csrf is not None
    form = {"csrf": csrf.group(1), "topic": "5", "setting": "trigger", "value": "mention"}
    async with session.post(f"{group_page(base)}/settings", data=form) as sent:
        assert sent.url.query.get("topic") == "5"
        assert "trigger for this topic: mention" in html.unescape(await sent.text())
    assert "- trigger: mention (from the topic)" in await said(bot, OWNER, "/group show", topic="5")
    page_now = await shown(session, group_page(base))
    assert rows(page_now, topic)["trigger"] == ("mention", "topic")
    assert rows(page_now, GROUP)["trigger"] == ("mention (telegram.group_trigger)", "config")


@pytest.mark.parametrize(
    ("fields", "said_"),
    [
        ({"setting": "colour", "value": "red"}, "There is no setting 'colour'."),
        ({"setting": "admins", "verb": "add", "person": ""}, "Whom? Give the person's id"),
        ({"setting": "admins", "verb": "add", "person": "4 2"}, "'4 2' is more than one word"),
        ({"setting": "admins", "verb": "add", "person": "<b>"}, "'<b>' is not a user id."),
        ({"setting": "budget_daily", "value": "lots"}, "The budget is a whole number of tokens"),
        ({"setting": "trigger", "value": "sometimes"}, "I did not understand"),
        ({"setting": "pins", "value": "on", "topic": "a/b"}, "'a/b' is not a topic id"),
        ({"setting": "undo"}, "There is nothing to undo here."),
    ],
)
async def test_bad_input_is_told_and_changes_nothing(
    page: Page, fields: dict[str, str], said_: str
) -> None:
    bot, session, base = page
    kind, words = await change(session, base, **fields)
    assert kind == "refused" and words.startswith(said_), words
    assert "\n/group" not in words  # the page's refusal, without /group's usage
    assert await bot.store.setting_versions(GROUP) == []
    assert await bot.store.audit_log(GROUP, 5) == []


async def test_a_settings_form_without_its_token_changes_nothing(page: Page) -> None:
    bot, session, base = page
    data = {"csrf": "forged", "setting": "pins", "value": "on"}
    async with session.post(f"{group_page(base)}/settings", data=data) as sent:
        assert sent.status == 403
    assert await bot.store.settings_of([GROUP]) == {}


async def test_the_audit_page_and_pin_shared_log_tell_setting_changes_in_words(
    page: Page,
) -> None:
    bot, session, base = page
    await change(session, base, "trigger", value="all")
    await change(session, base, "trigger", value="mention")
    await change(session, base, "admins", verb="add", person=MEMBER)
    await change(session, base, "admins", verb="remove", person=MEMBER)
    audit = html.unescape(await shown(session, f"{base}/audit?kind=setting&group={GROUP}"))
    actions = re.findall(r'<td class="action">(.*?)</td>', audit)
    assert actions == [
        f"removed {MEMBER} from admins",
        f"added {MEMBER} to admins",
        "set trigger: all → mention",
        "set trigger: the config's → all",
    ]
    assert "web:alice" in audit
    assert "pins" not in actions  # only what changed is on record
    assert "Be kind" not in audit
    await said(bot, OWNER, "/group pins on")
    await said(bot, OWNER, "/group trigger all", topic="9")
    log = (await said(bot, OWNER, "/pin shared log 3")).splitlines()
    assert log[0] == "Last 3 change(s) to this group's shared blocks and settings, newest first:"
    assert [line.split(" · ", 1)[1] for line in log[1:]] == [
        f"{OWNER} · set trigger (topic 9): the config's → all",
        f"{OWNER} · set pins: the config's → on",
        f"web:alice · removed {MEMBER} from admins",
    ]
