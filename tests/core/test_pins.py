"""/pin commands end to end through Pinbot.handle: replies, limits, bad input, lifecycle."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.llm.offline import OfflineChatModel
from storage import Store
from storage.models import Level, State
from tests.conftest import BotFactory, ask, dm, group, make_config, outcome_of, text_of

DM_SCOPE = "console:direct:42"


async def blocks(store: Store, scope: str = DM_SCOPE) -> list[tuple[Any, ...]]:
    return [(b.label, b.content, b.level, b.state, b.priority) for b in await store.blocks([scope])]


async def test_dm_add_defaults_strong_and_group_add_defaults_context(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    assert "Saved strong block 'r'" in text_of(await ask(bot, dm(), "/pin add r Be brief"))
    assert "Saved context block 'g'" in text_of(await ask(bot, group(), "/pin add g Note"))
    assert "Saved context block 's'" in text_of(await ask(bot, group("7"), "/pin shared add s x"))
    assert await blocks(store) == [("r", "Be brief", Level.STRONG, State.ACTIVE, 0)]
    assert await blocks(store, "console:group:-100123::u:42") == [
        ("g", "Note", Level.CONTEXT, State.ACTIVE, 0)
    ]


async def test_full_command_cycle_in_a_dm(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add-context proj 项目 is pinbot\nsecond line --pinned")
    assert await blocks(store) == [
        ("proj", "项目 is pinbot\nsecond line", Level.CONTEXT, State.PINNED, 0)
    ]
    await ask(bot, dm(), "/pin level PROJ strong")
    await ask(bot, dm(), "/pin edit proj -- new --pinned")
    await ask(bot, dm(), "/pin unpin proj")
    assert await blocks(store) == [("proj", "new --pinned", Level.STRONG, State.ACTIVE, 0)]
    await ask(bot, dm(), "/pin idle proj")
    assert (await store.blocks([DM_SCOPE]))[0].state is State.IDLE
    await ask(bot, dm(), "/pin activate proj")
    await ask(bot, dm(), "/pin pin proj")
    assert (await store.blocks([DM_SCOPE]))[0].state is State.PINNED
    reply = text_of(await ask(bot, dm(), "/pin clear"))
    assert reply and "1 block(s)" in reply and "1 of them pinned" in reply
    assert len(await store.blocks([DM_SCOPE])) == 1
    reply = text_of(await ask(bot, dm(), "/pin clear confirm"))
    assert reply and "Deleted 1 block(s)" in reply
    assert await store.blocks([DM_SCOPE]) == []


async def test_edit_keeps_creation_order(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add old first")
    await ask(bot, dm(), "/pin add new second")
    await ask(bot, dm(), "/pin edit old first, edited")
    listing = text_of(await ask(bot, dm(), "/pin list")) or ""
    assert listing.index("1. new") < listing.index("2. old")


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("/pin add " + "x" * 21 + " c", "limit is 20"),
        ("/pin add lbl " + "y" * 501, "limit is 500"),
        ("/pin add lbl bad\x07bell", "control character (U+0007)"),
        ("/pin add bad\x00lbl c", "control character (U+0000)"),
        ("/pin add a\u200bb c", "invisible or control character (U+200B)"),
        ("/pin add lbl two\nlines\tand a bell\x07", "control character (U+0007)"),
        ("/pin add --weird c", "cannot start with '--'"),
        ("/pin add r", "needs content"),
        ("/pin edit nope text", "no block labelled 'nope'"),
        ("/pin remove nope", "no block labelled 'nope'"),
        ("/pin level nope strong", "no block labelled 'nope'"),
        ("/pin frobnicate", "Unknown subcommand"),
        ("/pin edit keep " + "z" * 501, "limit is 500"),
        ("/pin add KEEP dup", "already exists"),
    ],
)
async def test_bad_input_gets_a_clear_reply_and_changes_nothing(
    make_bot: BotFactory, store: Store, command: str, fragment: str
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add keep original")
    before = await blocks(store)
    reply = text_of(await ask(bot, dm(), command))
    assert reply is not None and fragment in reply
    assert await blocks(store) == before


async def test_limit_of_blocks_per_scope(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot(pins={"max_blocks_per_session": 2})
    await ask(bot, dm(), "/pin add a 1")
    await ask(bot, dm(), "/pin add b 2")
    reply = text_of(await ask(bot, dm(), "/pin add c 3"))
    assert reply and "limit" in reply and "/pin remove" in reply
    assert [b[0] for b in await blocks(store)] == ["a", "b"]


async def test_fifty_concurrent_pin_adds_leave_twenty(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot()
    replies = await asyncio.gather(*(ask(bot, dm(), f"/pin add b{i} text {i}") for i in range(50)))
    assert sum(1 for r in replies if r and r.outcome is Result.DONE) == 20
    assert len(await store.blocks([DM_SCOPE])) == 20


async def test_character_budget_on_add_and_edit(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot(pins={"max_total_chars": 10})
    assert outcome_of(await ask(bot, dm(), "/pin add a 123456")) is Result.DONE
    reply = text_of(await ask(bot, dm(), "/pin add b 12345"))
    assert reply and "over the budget of 10" in reply
    reply = text_of(await ask(bot, dm(), "/pin edit a 12345678901"))
    assert reply and "pins.max_total_chars" in reply
    assert outcome_of(await ask(bot, dm(), "/pin edit a 1234567890")) is Result.DONE
    assert [b[1] for b in await blocks(store)] == ["1234567890"]


async def test_list_shows_everything_and_the_token_estimate(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins={"token_warning_threshold": 10})
    await ask(bot, dm(), "/pin add rules Antworte auf Deutsch.\nZweite Zeile")
    await ask(bot, dm(), "/pin add-context note " + "n" * 60)
    listing = text_of(await ask(bot, dm(), "/pin list")) or ""
    assert "1. note (context, active)" in listing
    assert "2. rules (strong, active)\nAntworte auf Deutsch.\nZweite Zeile" in listing
    assert "tokens to every request" in listing
    assert "Warning" in listing and "10 tokens" in listing
    quiet = make_bot(pins={"token_warning_threshold": 0})
    assert "tokens" not in text_of(await ask(quiet, dm(), "/pin list"))


async def test_help_and_bare_pin(make_bot: BotFactory) -> None:
    bot = make_bot()
    for text in ("/pin", "/pin help", "/PIN help"):
        reply = text_of(await ask(bot, dm(), text)) or ""
        assert "/pin add <label> <content>" in reply and "strong here" in reply


async def test_command_for_another_bot_is_ignored(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot()
    bot.known_as("pin_bot")
    assert await ask(bot, dm(), "/pin@other_bot add a b") is None
    assert outcome_of(await ask(bot, dm(), "/pin@Pin_Bot add a b")) is Result.DONE


_nasty = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            _nasty,
            st.sampled_from(["add", "edit", "k", "--", "--pinned", "shared", "level", "strong"]),
        ),
        max_size=6,
    ).map(" ".join)
)
def test_any_pin_text_gets_a_reply_and_never_raises(text: str) -> None:
    async def run() -> None:
        async with await Store.open(":memory:") as store:
            bot = Pinbot(make_config(), store, OfflineChatModel())
            await ask(bot, dm(), "/pin add k original")
            reply = text_of(await ask(bot, dm(), "/pin " + text))
            assert reply is not None and reply.strip()
            for block in await store.blocks([DM_SCOPE]):
                assert block.content == block.content.strip() and block.content

    asyncio.run(run())
