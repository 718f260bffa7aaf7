"""The `sensitive` flag held through every road (issue 44), driven as a user's message goes: the
model never makes a block plain (delete and re-create included), an undo or a restore to a
version from before the block was made sensitive keeps it sensitive, and `||marks||` in content
make a block sensitive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BotFactory, OpenAIBots, ask, dm, group, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.integration.test_sticky import pinbot_import, slot

GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
TOOLS = {"agent_tools": True}
DM_SCOPE = "console:direct:42"
GROUP_SCOPE = "console:group:-100123"
JUMP = "10.11.12.13"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")


def sent(request: dict[str, Any]) -> str:
    """Everything a request carries, as one text."""
    return json.dumps(request["messages"], ensure_ascii=False)


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def _block(bot: Any, scope: str, label: str) -> Any:
    return next(b for b in await bot.store.blocks([scope]) if b.label == label)


async def test_the_models_delete_and_re_create_keeps_the_block_sensitive(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm=TOOLS)
    await ask(bot, dm(), f"/pin add srv Jump host {JUMP} --sensitive")
    fake_openai.script = [
        tool_calls(("pin_set", {"label": "srv", "content": "Jump host x", "sensitive": False})),
        tool_calls(("pin_delete", {"label": "srv"})),
        tool_calls(("pin_set", {"label": "srv", "content": f"Jump host {JUMP}"})),
        completion("Done."),
        completion("next turn"),
    ]
    assert text_of(await ask(bot, dm(), "make srv plain")) == "Done."
    refused, removed, created = (tool_results(fake_openai.requests[i])[-1] for i in (1, 2, 3))
    assert refused.startswith("Refused: Block 'srv' is sensitive.")
    assert removed == "Removed block 'srv'."
    assert created.startswith("Saved strong block 'srv', sensitive")
    assert "'srv' stays sensitive, as it was: only the user can make it plain" in created
    block = await _block(bot, DM_SCOPE, "srv")
    assert block.sensitive and block.content == f"Jump host {JUMP}"
    await ask(bot, dm(), "and now?")
    assert JUMP not in sent(fake_openai.requests[-1])
    # The user (a person, by command) may make it plain; then the model's re-create is plain.
    await ask(bot, dm(), "/pin sensitive srv off")
    assert not (await _block(bot, DM_SCOPE, "srv")).sensitive


async def test_a_removed_sensitive_label_outlives_the_history_retention(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    """Past pins.history_days the newest version of a removed sensitive label stays, its content
    withheld, so the model's re-create a month later is still sensitive; every other old
    version goes."""
    bot = await openai_bots(llm=TOOLS)
    await ask(bot, dm(), f"/pin add srv Jump host {JUMP} --sensitive")
    await ask(bot, dm(), "/pin add note plain words")
    await ask(bot, dm(), "/pin edit note other words")
    fake_openai.script = [tool_calls(("pin_delete", {"label": "srv"})), completion("Removed.")]
    await ask(bot, dm(), "delete srv")
    clock.advance(days=31)
    assert "retention" in await bot.jobs.run_due()
    (kept,) = await bot.store.versions(DM_SCOPE, "srv")
    assert kept.before is not None and kept.before.sensitive and JUMP not in kept.before.content
    assert await bot.store.versions(DM_SCOPE, "note") == []
    fake_openai.script = [
        tool_calls(("pin_set", {"label": "srv", "content": "Jump host from memory"})),
        completion("Done."),
    ]
    await ask(bot, dm(), "recreate srv")
    assert (await _block(bot, DM_SCOPE, "srv")).sensitive


async def test_a_user_may_re_create_a_removed_sensitive_label_plain(
    openai_bots: OpenAIBots,
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), f"/pin add srv Jump host {JUMP} --sensitive")
    await ask(bot, dm(), "/pin remove srv")
    saved = text_of(await ask(bot, dm(), "/pin add srv Jump host moved"))
    assert saved == "Saved strong block 'srv'."
    assert not (await _block(bot, DM_SCOPE, "srv")).sensitive


async def test_a_shared_restore_to_a_version_before_sensitive_keeps_it_sensitive(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins=GROUPS)
    admin, member = group("7"), group("42")
    await ask(bot, admin, f"/pin shared add srv Jump host {JUMP}")
    await ask(bot, admin, "/pin shared edit srv Jump host 10.11.12.14")
    await ask(bot, admin, "/pin shared sensitive srv on")
    restored = text_of(await ask(bot, admin, "/pin shared restore srv 3"))
    assert restored.startswith("Restored 'srv' to version 3")
    assert "'srv' stays sensitive, as it was" in restored
    block = await _block(bot, GROUP_SCOPE, "srv")
    assert block.sensitive and block.content == f"Jump host {JUMP}"
    assert JUMP not in text_of(await ask(bot, member, "/pin shared list"))
    await ask(bot, member, "@bot where is the jump host?")
    assert JUMP not in sent(fake_openai.requests[-1])


async def test_a_restore_of_a_removed_sensitive_block_keeps_it_sensitive(
    openai_bots: OpenAIBots,
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), f"/pin add srv Jump host {JUMP}")
    await ask(bot, dm(), "/pin sensitive srv on")
    await ask(bot, dm(), "/pin remove srv")
    # Version 3 is the plain first content, from before the block was made sensitive.
    assert text_of(await ask(bot, dm(), "/pin restore srv 3")).startswith("Restored 'srv'")
    assert (await _block(bot, DM_SCOPE, "srv")).sensitive


async def test_undo_of_an_edit_keeps_sensitive_but_undo_of_sensitive_on_is_the_users_off(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), f"/pin add srv Jump host {JUMP}")
    await ask(bot, dm(), "/pin edit srv Jump host 10.11.12.14 --sensitive")
    undone = text_of(await ask(bot, dm(), "/pin undo"))
    assert "'srv' stays sensitive, as it was" in undone
    block = await _block(bot, DM_SCOPE, "srv")
    assert block.sensitive and block.content == f"Jump host {JUMP}"
    await ask(bot, dm(), "where?")
    assert JUMP not in sent(fake_openai.requests[-1])
    # Undoing "/pin sensitive on" alone is the same as "/pin sensitive off", by the same user.
    await ask(bot, dm(), "/pin sensitive srv off")
    await ask(bot, dm(), "/pin sensitive srv on")
    assert "stays sensitive" not in text_of(await ask(bot, dm(), "/pin undo"))
    assert not (await _block(bot, DM_SCOPE, "srv")).sensitive


async def test_marks_save_a_block_sensitive_and_hide_it_from_the_model(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    saved = text_of(await ask(bot, dm(), "/pin add door code ||4821||"))
    assert saved.startswith("Saved strong block 'door', sensitive")
    assert "because its content has parts marked ||like this||" in saved
    block = await _block(bot, DM_SCOPE, "door")
    assert block.sensitive and block.content == "code ||4821||"
    await ask(bot, dm(), "what is the door code?")
    request = sent(fake_openai.requests[-1])
    assert "[hidden]" in request and "4821" not in request
    # Marks keep it sensitive: the user is told to remove them first.
    kept = text_of(await ask(bot, dm(), "/pin sensitive door off"))
    assert "because its content has parts marked" in kept
    assert (await _block(bot, DM_SCOPE, "door")).sensitive


async def test_marks_make_a_block_sensitive_through_edit_and_the_tools(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm=TOOLS)
    await ask(bot, dm(), "/pin add wifi the network is home")
    edited = text_of(await ask(bot, dm(), "/pin edit wifi home, password ||swordfish||"))
    assert "because its content has parts marked" in edited
    assert (await _block(bot, DM_SCOPE, "wifi")).sensitive
    fake_openai.script = [
        tool_calls(("pin_set", {"label": "gate", "content": "gate code ||1234||"})),
        completion("Saved."),
    ]
    await ask(bot, dm(), "remember the gate code, secret")
    assert "parts marked" in tool_results(fake_openai.requests[-1])[-1]
    assert (await _block(bot, DM_SCOPE, "gate")).sensitive


async def test_marks_make_an_imported_slot_sensitive(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    document = {"version": 1, "slots": {"door": slot("door code ||4821||")}}
    out = await pinbot_import(tmp_path, document, "--scope", DM_SCOPE)
    assert out.splitlines()[-1] == "imported 1 slot(s) into console:direct:42"
    bot = await openai_bots()
    assert (await _block(bot, DM_SCOPE, "door")).sensitive
    await ask(bot, dm(), "the door?")
    request = sent(fake_openai.requests[-1])
    assert "[hidden]" in request and "4821" not in request


async def test_a_label_cannot_hold_marks(make_bot: BotFactory) -> None:
    """A label is always shown: `||…||` there would hide nothing, so it is refused, saying why."""
    bot = make_bot()
    reply = text_of(await ask(bot, dm(), "/pin add ||k|| value")) or ""
    assert "cannot hold '||'" in reply
    assert await bot.store.blocks(["console:direct:42"]) == []
