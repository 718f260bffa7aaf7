"""Abuse limits (per-sender rates, oversized messages) and the refusal of credentials in group
blocks, through Pinbot.handle."""

from __future__ import annotations

import pytest

from bot.core.replies import Result
from storage import Store
from tests.conftest import BotFactory, ask, dm, group, outcome_of, text_of
from tests.fakes.clock import FakeClock


async def test_pin_commands_are_rate_limited_per_sender(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot(limits={"pin_commands_per_minute": 3})
    for i in range(3):
        assert outcome_of(await ask(bot, dm("1"), f"/pin add b{i} x")) is Result.DONE
    reply = text_of(await ask(bot, dm("1"), "/pin add b3 x"))
    assert reply == "You are sending /pin commands too fast. Try again in 20 s."
    assert outcome_of(await ask(bot, dm("2"), "/pin add b x")) is Result.DONE  # others fine
    clock.advance(seconds=20)
    assert outcome_of(await ask(bot, dm("1"), "/pin add b3 x")) is Result.DONE
    assert len(await store.blocks(["console:direct:1"])) == 4


async def test_model_turns_are_rate_limited(make_bot: BotFactory, clock: FakeClock) -> None:
    bot = make_bot(limits={"model_turns_per_minute": 2})
    assert "[offline model]" in text_of(await ask(bot, dm(), "one"))
    assert "[offline model]" in text_of(await ask(bot, dm(), "two"))
    assert "too fast" in text_of(await ask(bot, dm(), "three"))
    assert text_of(await ask(bot, dm(), "/pin list")).startswith("You have no")
    clock.advance(seconds=30)
    assert "[offline model]" in text_of(await ask(bot, dm(), "four"))


async def test_zero_turns_a_limit_off(make_bot: BotFactory) -> None:
    bot = make_bot(limits={"pin_commands_per_minute": 0})
    for i in range(100):
        assert text_of(await ask(bot, dm(), "/pin list")).startswith("You have no"), i


async def test_oversized_messages_are_refused_before_parsing(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(limits={"max_message_chars": 50})
    reply = text_of(await ask(bot, dm(), "/pin add big " + "x" * 60))
    assert reply == (
        "Your message is 73 characters long; the limit is 50. Please send a shorter one."
    )
    assert "limit is 50" in text_of(await ask(bot, dm(), "y" * 51))
    assert await store.blocks(["console:direct:42"]) == []
    assert await store.history("console:direct:42") == []
    assert await ask(bot, group(platform="telegram"), "z" * 60) is None  # not for us: silent


SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAABCDEFGHIJKLMNOP",
    "-----BEGIN RSA PRIVATE KEY-----",
    "password=hunter22",
    "api_key: abcdef123456",
    "123456789:AAAbbbCCCdddEEEfffGGGhhhIIIjjjKKKlll",
    "postgres://admin:s3cret@db.example.com/app",
    "xoxb-123456789012-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
]


@pytest.mark.parametrize("secret", SECRETS)
async def test_group_blocks_refuse_credentials(
    make_bot: BotFactory, store: Store, secret: str
) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    for speaker, command in (
        (group("7"), f"/pin shared add k {secret}"),
        (group("42"), f"/pin add k {secret}"),
    ):
        reply = text_of(await ask(bot, speaker, command))
        assert reply and "looks like" in reply and "pins.refuse_secrets_in_groups" in reply
        assert secret not in reply
    assert await store.blocks(["console:group:-100123", "console:group:-100123::u:42"]) == []
    assert outcome_of(await ask(bot, dm(), f"/pin add k {secret}")) is Result.DONE


async def test_edit_and_switch_off(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot(pins={"enable_in_group": True})
    await ask(bot, group(), "/pin add k harmless")
    reply = text_of(await ask(bot, group(), "/pin edit k password: hunter22"))
    assert reply and "looks like a password" in reply
    relaxed = make_bot(pins={"enable_in_group": True, "refuse_secrets_in_groups": False})
    assert text_of(await ask(relaxed, group(), "/pin edit k password: hunter22")).startswith(
        "Saved"
    )


@pytest.mark.parametrize(
    "clean",
    [
        "Answer in French",
        "The password policy needs 12 chars",
        "Use the sk-learn library",
        "Meeting at 10:30",
    ],
)
async def test_ordinary_text_is_not_mistaken_for_a_secret(make_bot: BotFactory, clean: str) -> None:
    bot = make_bot(pins={"enable_in_group": True})
    assert outcome_of(await ask(bot, group(), f"/pin add k {clean}")) is Result.DONE
