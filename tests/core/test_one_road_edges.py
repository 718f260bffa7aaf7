"""Where two writers meet on the one road: a change decided on blocks that changed before it
landed is refused (idle cleanup, undo), an idle block that stays idle keeps its idle mark, and
an import's versions carry no text the rules of `/pin` would refuse."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.transfer import apply_import, plan_import
from bot.core.entry.pinbot import Pinbot
from storage import Store
from storage.decisions import PROPOSALS
from storage.models import (
    ABSENT,
    Author,
    BlockChange,
    BlockState,
    Channel,
    Level,
    NewProposal,
    State,
    Wanted,
    label_key,
)
from tests.conftest import BotFactory, ask, dm, group, make_config, text_of
from tests.fakes.clock import FakeClock

SHARED = "console:group:-100123"
ADMINS = {"enable_in_group": True, "group_shared_admin_ids": ["1", "3"]}


async def test_idle_cleanup_spares_a_block_brought_back_meanwhile(
    make_bot: BotFactory, store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    retention = {"idle_retention_days": 1, "idle_hard_retention_days": 1}
    bot = make_bot(pins={**retention, "idle_retention_calls": 0})
    await ask(bot, dm(), "/pin add tone Be brief.")
    await ask(bot, dm(), "/pin idle tone")
    clock.advance(days=2)
    read = store.start_model_call

    async def then_activated(scopes: Any) -> Any:
        found = await read(scopes)  # the turn decides on these: tone is due
        await ask(bot, dm(), "/pin activate tone")
        await ask(bot, dm(), "/pin edit tone Be brief, and kind.")
        return found

    monkeypatch.setattr(store, "start_model_call", then_activated)
    await ask(bot, dm(), "hello")
    monkeypatch.setattr(store, "start_model_call", read)
    (tone,) = await store.blocks(["console:direct:42"])
    assert (tone.content, tone.state.value) == ("Be brief, and kind.", "active")
    await ask(bot, dm(), "/pin idle tone")
    clock.advance(days=2)
    await ask(bot, dm(), "hello")  # due, and unchanged since read: cleaned up, kept as a version
    assert await store.blocks(["console:direct:42"]) == []
    (removed, *_) = await store.versions("console:direct:42", "tone")
    assert (removed.actor, removed.channel.value) == ("cleanup", "cleanup")


async def test_an_undo_overtaken_by_another_change_is_refused(
    make_bot: BotFactory, store: Store, monkeypatch: Any
) -> None:
    bot = make_bot(pins=ADMINS)
    await ask(bot, group("1"), "/pin shared add r v1")
    await ask(bot, group("1"), "/pin shared edit r v2")
    read = store.last_operation

    async def then_edited(scope: str) -> Any:
        found = await read(scope)
        await ask(bot, group("3"), "/pin shared edit r v3")  # lands between read and write
        return found

    monkeypatch.setattr(store, "last_operation", then_edited)
    reply = text_of(await ask(bot, group("1"), "/pin shared undo"))
    monkeypatch.setattr(store, "last_operation", read)
    assert reply.startswith("Block 'r' changed after this was asked for; nothing was saved.")
    assert [b.content for b in await store.blocks([SHARED])] == ["v3"]


async def test_an_idle_block_stays_idle_through_an_approval_and_an_undo(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot: Pinbot = make_bot(pins=ADMINS)
    await ask(bot, group("1"), "/pin shared add r v1")
    await ask(bot, group("1"), "/pin shared idle r")
    (idle,) = await store.blocks([SHARED])
    clock.advance(days=5)
    _, marks = await store.scope_now(SHARED)
    new = NewProposal(SHARED, "r", "v2", None, None, "", "model", 1, "v1", marks["r"])
    added = await store.add_decision(
        PROPOSALS, new, now=clock(), expires_at=clock() + timedelta(hours=5), max_pending=5
    )
    assert added is not None
    assert text_of(await ask(bot, group("1"), "/pin shared approve 1")).startswith("Approved")
    clock.advance(days=1)
    assert text_of(await ask(bot, group("1"), "/pin shared undo")).startswith("Undid edit")
    (after,) = await store.blocks([SHARED])
    assert (after.content, after.state.value) == ("v1", "idle")
    assert (after.idle_since, after.idle_calls) == (idle.idle_since, idle.idle_calls)


def _version(**fields: Any) -> dict[str, Any]:
    return {
        "op": "op1",
        "label": "rules",
        "kind": "edit",
        "detail": "",
        "actor": "7",
        "channel": "command",
        "origin": None,
        "at": "2026-01-01T00:00:00+00:00",
        "before": {"content": "Be kind.", "level": "context", "state": "active", "priority": 0},
        "created_at": None,
        "undone_by": None,
        **fields,
    }


async def test_import_history_text_meets_the_rules(store: Store, clock: FakeClock) -> None:
    key = "sk-proj-" + "a1B2c3D4" * 6
    history = [
        _version(actor=key),
        _version(op="op2", detail=f"level {key}"),
        _version(op="op3", undone_by="x\x00" + "y" * 5000),
        _version(op="op4", origin="proposal:abc"),
        _version(op="op5", actor="7\u202e8"),
        _version(op="op6"),
        _version(op="op6", label="ＲＵＬＥＳ"),  # the same label, by case and width
    ]
    document = {"scopes": {SHARED: {"blocks": [], "history": history}}}
    policy = BlockPolicy(make_config().pins)
    plan = plan_import(document, policy, clock())
    assert [p.split(": ", 1)[0] for p in plan.problems] == [
        f"scope '{SHARED}', history #{n}" for n in (1, 2, 3, 4, 5, 7)
    ], plan.problems
    assert "looks like" in plan.problems[0] and "looks like" in plan.problems[1]
    assert "U+0000" in plan.problems[2] and "origin must be" in plan.problems[3]
    assert "U+202E" in plan.problems[4] and "already has a version" in plan.problems[5]
    assert await apply_import(BlockOps(store, policy, clock), plan) == 0
    assert await store.export_versions() == {}


async def test_undo_and_restore_say_which_block_cannot_come_back(make_bot: BotFactory) -> None:
    bot = make_bot(pins={"max_content_length": 30})
    await ask(bot, dm(), "/pin add a " + "x" * 30)
    await ask(bot, dm(), "/pin edit a short")
    smaller = make_bot(pins={"max_content_length": 20})
    reply = text_of(await ask(smaller, dm(), "/pin undo"))
    assert reply.startswith("'a' cannot come back as it was: The content is 30 characters long")
    reply = text_of(await ask(smaller, dm(), "/pin restore a 2"))
    assert reply.startswith("'a' cannot come back as it was:")
    assert text_of(await ask(bot, dm(), "/pin clear confirm")).startswith("Deleted 1 block(s)")
    assert (
        text_of(await ask(bot, dm(), "/pin clear confirm"))
        == "You have no blocks. Nothing to clear."
    )


async def test_a_system_change_is_reviewed_with_the_systems_rights(
    store: Store, clock: FakeClock
) -> None:
    """commit_all (imports, the clean-up) reviews every change: no speaker is asked for rights
    (a shared scope takes the operator's change), every other rule holds, and a refused scope
    leaves every scope of the operation as it was."""
    ops = BlockOps(store, BlockPolicy(make_config().pins), clock)
    by_import = Author("import", Channel.IMPORT)

    def adding(scope: str, label: str, content: str) -> BlockChange:
        state = BlockState(content, Level.CONTEXT, State.ACTIVE)
        return BlockChange(scope, (Wanted(label, state),), by_import, {label_key(label): ABSENT})

    fine = adding(SHARED, "rules", "Be kind.")
    secret = "sk-proj-" + "a1B2c3D4" * 6
    refused = await ops.commit_all(
        [fine, adding("console:direct:42", "two words", "x"), adding(SHARED, "key", secret)]
    )
    assert isinstance(refused, dict)
    assert {scope: problem.code for scope, problem in refused.items()} == {
        "console:direct:42": "label-space",
        SHARED: "credential",
    }
    assert await store.blocks([SHARED, "console:direct:42"]) == []
    assert await ops.commit_all([fine], dry_run=True) == []
    assert await store.blocks([SHARED]) == []
    done = await ops.commit_all([fine])
    assert isinstance(done, list) and [applied.label for applied in done] == ["rules"]
    assert [b.label for b in await store.blocks([SHARED])] == ["rules"]
