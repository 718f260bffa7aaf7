"""A person's id is their data in a group's own settings too (issue 49): `/export me` lists the
groups and topics whose settings name them a shared admin or a strong user; `/forget me` takes
them out of each as a setting change (a version and an audit entry by `forget`), takes their id
out of those settings' history so that no `/group undo` brings it back, and names them "a former
member" where a change they made stays the group's. Through the core's one entry, on SQLite and
PostgreSQL; the scan reads every column of every table."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.entry import Pinbot
from bot.llm.offline import OfflineChatModel
from storage import Store
from tests.conftest import ask, dm, group, make_config, text_of
from tests.fakes.clock import FakeClock
from tests.integration.test_your_data import every_row, mentions_me
from tests.templates import migrated_database, migrated_sqlite

ME = "987654321"  # the person who asks to be forgotten (test_your_data's: mentions_me finds it)
OWNER, OTHER = "555000111", "444000222"
G1, G2 = "-1009990001", "-1009990002"
GROUP_ONE, GROUP_TWO = f"telegram:group:{G1}", f"telegram:group:{G2}"
TOPIC = f"{GROUP_ONE}:topic:5"


@pytest.fixture(params=["sqlite", "postgres"])
async def bot(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Pinbot]:
    url = None
    if request.param == "postgres":
        url = await migrated_database(request.getfixturevalue("pg_cluster"))
    else:
        await migrated_sqlite(tmp_path / "pins.sqlite3")
    async with await Store.open(tmp_path / "pins.sqlite3", url=url) as store:
        model = OfflineChatModel()
        config = make_config(pins={"enable_in_group": True}, limits={"pin_commands_per_minute": 0})
        yield Pinbot(config, store, model, clock=clock)
        await model.close()


async def platform_admin() -> bool | None:
    """The platform's answer: the sender administers the chat."""
    return True


async def said(bot: Pinbot, who: str, chat: str, text: str, *, topic: str | None = None) -> str:
    reply = await ask(
        bot,
        group(who, chat, topic=topic, platform="telegram"),
        text,
        platform_admin=platform_admin,
    )
    return text_of(reply) or ""


async def test_forget_me_takes_their_id_out_of_every_groups_settings_for_good(
    bot: Pinbot,
) -> None:
    store = bot.store
    assert "is now among the admins" in await said(bot, OWNER, G1, f"/group admins add {ME}")
    assert "is now among the admins" in await said(bot, OWNER, G1, f"/group admins add {OTHER}")
    strong = await said(bot, OWNER, G1, f"/group strong add {ME}", topic="5")
    assert "among the strong of this topic" in strong
    await said(bot, OWNER, G2, f"/group strong add {ME}")
    # A change they made themselves, as an admin of group two, stays the group's.
    assert "trigger for this group: all" in await said(bot, ME, G2, "/group trigger all")

    exported = await ask(bot, dm(ME, platform="telegram"), "/export me")
    assert exported is not None and exported.document is not None
    document = json.loads(exported.document.data)
    assert document["settings"] == [
        {"group": GROUP_ONE, "topic": None, "setting": "admins"},
        {"group": GROUP_ONE, "topic": "5", "setting": "strong"},
        {"group": GROUP_TWO, "topic": None, "setting": "strong"},
    ]
    asked = text_of(await ask(bot, dm(ME, platform="telegram"), "/forget me"))
    assert "3 group settings naming you" in asked
    done = text_of(await ask(bot, dm(ME, platform="telegram"), "/forget me confirm"))
    assert done.startswith("Done: I removed everything") and "3 group settings naming you" in done

    # Nothing of theirs is left in any table: not in a setting, its versions or audit entries.
    after = await every_row(store)
    found = {t: [r for r in rows if mentions_me(r)] for t, rows in after.items()}
    assert {t: rows for t, rows in found.items() if rows} == {}
    assert await store.settings_of([GROUP_ONE, TOPIC, GROUP_TWO]) == {
        GROUP_ONE: {"admins": f'["{OTHER}"]'},
        GROUP_TWO: {"trigger": '"all"'},
    }
    # Each removal is a setting change by `forget`, with its version and audit entry.
    (taken,) = [v for v in await store.setting_versions(GROUP_ONE) if v.actor == "forget"]
    assert (taken.name, taken.channel, taken.after) == ("admins", "forget", f'["{OTHER}"]')
    (newest,) = await store.setting_versions(GROUP_TWO, 1)
    assert (newest.name, newest.actor, newest.after) == ("strong", "forget", None)
    made = [v for v in await store.setting_versions(GROUP_TWO) if v.name == "trigger"]
    assert [v.actor for v in made] == ["a former member"]
    log = await said(bot, OWNER, G1, "/pin shared log 5")
    assert "· forget · removed a former member from strong (topic 5)" in log
    assert "· forget · removed a former member from admins" in log
    assert f"· {OWNER} · added {OTHER} to admins" in log
    assert f"· {OWNER} · added or removed a former member in admins" in log

    # No undo brings them back: their id is out of every earlier value too.
    for _ in range(4):
        await said(bot, OWNER, G1, "/group undo")
        await said(bot, OWNER, G1, "/group undo", topic="5")
        await said(bot, OWNER, G2, "/group undo")
    everything = await store.settings_of([GROUP_ONE, TOPIC, GROUP_TWO])
    assert ME not in json.dumps(everything)
    assert not [r for rows in (await every_row(store)).values() for r in rows if mentions_me(r)]
