"""Nothing pinned is lost for good: every change to a block is kept, `/pin history` shows it,
`/pin undo` takes changes back one operation at a time, `/pin restore` brings a version back
(removed blocks too), under the rules of now; kept for pins.history_days and at most
pins.history_per_block versions a block; export and import carry it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.transfer import apply_import, export_document, plan_import
from bot.core.replies import Result
from storage import Store
from storage.models import State
from tests.conftest import BotFactory, OpenAIBots, ask, dm, group, make_config, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

ADMINS = {"enable_in_group": True, "group_shared_admin_ids": ["7", "8"]}


async def contents(store: Store, scope: str = "console:direct:42") -> dict[str, str]:
    return {b.label: b.content for b in await store.blocks([scope])}


async def say(bot: Any, text: str, conversation: Any = None) -> str:
    return text_of(await ask(bot, conversation or dm(), text))


async def test_history_lists_every_version_newest_first_and_undo_walks_back(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot()
    await say(bot, "/pin add tone Be brief.")
    clock.advance(minutes=1)
    await say(bot, "/pin edit tone Be brief and kind.")
    clock.advance(minutes=1)
    await say(bot, "/pin idle tone")
    history = (await say(bot, "/pin history TONE")).splitlines()
    assert history[0].startswith("History of 'tone' in your blocks, newest first (kept 30 days")
    assert history[1].startswith("1. (now) 2026-01-01 00:02 UTC · 42 · state idle")
    assert history[1].endswith("[strong, idle] Be brief and kind.")
    assert "2. 2026-01-01 00:01 UTC · 42 · edit · [strong, active] Be brief and kind." in history
    assert "3. 2026-01-01 00:00 UTC · 42 · add strong · [strong, active] Be brief." in history
    assert "4. before its kept history · (no block)" in history
    undone = await say(bot, "/pin undo")
    assert "Undid state idle of 'tone' by 42 at 2026-01-01 00:02 UTC" in undone
    (block,) = await store.blocks(["console:direct:42"])
    assert block.state is State.ACTIVE and block.content == "Be brief and kind."
    assert "Undid edit of 'tone'" in await say(bot, "/pin undo")  # one change further back
    assert await contents(store) == {"tone": "Be brief."}
    assert "Undid add strong of 'tone'" in await say(bot, "/pin undo")
    assert await contents(store) == {}
    nothing = await ask(bot, dm(), "/pin undo")  # undo never undoes its own undos
    assert outcome_of(nothing) is Result.REFUSED and "nothing to undo" in text_of(nothing)
    # An undo is a version too, so a restore takes it back.
    assert "Restored 'tone' to version 2" in await say(bot, "/pin restore tone")
    assert await contents(store) == {"tone": "Be brief."}


async def test_a_clear_is_undone_as_one_step_in_creation_order(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot()
    for label in ("first", "second", "third"):
        await say(bot, f"/pin add {label} text of {label}")
    before = [b.label for b in await store.blocks(["console:direct:42"])]
    assert "/pin undo brings them back, for 30 days" in await say(bot, "/pin clear")
    cleared = await say(bot, "/pin clear confirm")
    assert "Deleted 3 block(s)" in cleared and "/pin undo brings them back" in cleared
    undone = await say(bot, "/pin undo")
    assert "Undid clear of 'first', 'second', 'third'" in undone and "Back:" in undone
    assert [b.label for b in await store.blocks(["console:direct:42"])] == before


async def test_shared_undo_is_for_shared_admins_whoever_made_the_change(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins=ADMINS)
    await say(bot, "/pin shared add rule Be kind.", group("7"))
    await say(bot, "/pin shared edit rule Be kind, always.", group("8"))
    history = await say(bot, "/pin shared history rule", group("42"))  # members may read it
    assert "1. (now)" in history and "· 8 · edit ·" in history
    refused = await ask(bot, group("42"), "/pin shared undo")
    assert outcome_of(refused) is Result.REFUSED
    assert await contents(store, "console:group:-100123") == {"rule": "Be kind, always."}
    undone = await say(bot, "/pin shared undo", group("7"))
    assert "Undid edit of 'rule' by 8" in undone
    assert await contents(store, "console:group:-100123") == {"rule": "Be kind."}
    log = await say(bot, "/pin shared log", group("42"))
    assert "7 · edit 'rule'" in log  # the undo is in the audit trail, as the admin's change
    personal = await say(bot, "/pin undo", group("42"))  # a member's own scope: nothing there
    assert "nothing to undo in your personal blocks in this group" in personal


async def test_what_the_model_changed_the_user_can_undo(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True})
    await say(bot, "/pin add tone Be brief.")
    fake_openai.script = [
        tool_calls(("pin_set", {"label": "tone", "content": "Be verbose."})),
        completion("Changed it."),
    ]
    assert await say(bot, "please change my tone") == "Changed it."
    assert await contents(bot.store) == {"tone": "Be verbose."}
    assert "· model · edit (tool) ·" in await say(bot, "/pin history tone")
    assert "Undid edit (tool) of 'tone' by model" in await say(bot, "/pin undo")
    assert await contents(bot.store) == {"tone": "Be brief."}


async def test_idle_clean_up_can_be_undone_and_the_idle_time_restarts(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot(pins={"idle_hard_retention_days": 2})
    await say(bot, "/pin add old stale note")
    await say(bot, "/pin idle old")
    clock.advance(days=3)
    await say(bot, "hello")  # the model request cleans up the idle block
    assert await contents(store) == {}
    assert "· cleanup · remove (cleanup) ·" in await say(bot, "/pin history old")
    assert "Back: 'old'" in await say(bot, "/pin undo")
    (block,) = await store.blocks(["console:direct:42"])
    assert block.state is State.IDLE and block.idle_since is not None
    assert clock() - block.idle_since < timedelta(seconds=1)  # counted from the undo


async def test_restore_brings_back_a_removed_block_within_the_limits_of_now(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins={"max_blocks_per_session": 2})
    await say(bot, "/pin add a one")
    await say(bot, "/pin edit a one, edited")
    await say(bot, "/pin add b two")
    await say(bot, "/pin remove a")
    await say(bot, "/pin add c three")
    refused = await ask(bot, dm(), "/pin restore a")
    assert outcome_of(refused) is Result.REFUSED
    assert "Your blocks would hold 3 blocks; the limit is 2" in text_of(refused)
    await say(bot, "/pin remove c")
    assert "Restored 'a' to version 2" in await say(bot, "/pin restore a")
    assert (await contents(store))["a"] == "one, edited"
    assert "Restored 'a' to version 4" in await say(bot, "/pin restore a 4")  # over it: an edit
    assert (await contents(store))["a"] == "one"
    bad = await ask(bot, dm(), "/pin restore a 99")
    assert outcome_of(bad) is Result.REFUSED and "versions 1 to" in text_of(bad)


async def test_versions_are_kept_for_a_while_and_a_few_per_block(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot(pins={"history_per_block": 3, "history_days": 30})
    await say(bot, "/pin add tone v0")
    for n in range(1, 6):
        await say(bot, f"/pin edit tone v{n}")
    history = (await say(bot, "/pin history tone")).splitlines()
    assert [line.split(".")[0] for line in history[1:-1]] == ["1", "2", "3", "4"]
    assert history[-2].startswith("4. before its kept history") and history[-2].endswith("v2")
    await store.register_worker(now=clock())
    clock.advance(days=31)
    await bot.jobs.run_due()  # the periodic job, never the turn path
    refused = await ask(bot, dm(), "/pin history tone")
    assert outcome_of(refused) is Result.REFUSED and "No changes" in text_of(refused)


async def test_export_with_history_round_trips_and_an_import_without_it_is_a_version(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    bot = make_bot(pins=ADMINS)
    await say(bot, "/pin add tone Be brief.")
    await say(bot, "/pin edit tone Be kind.")
    await say(bot, "/pin shared add rule One.", group("7"))
    await say(bot, "/pin undo")
    first = json.loads(json.dumps(await export_document(store, clock(), with_history=True)))
    assert len(first["scopes"]["console:direct:42"]["history"]) == 3
    policy = BlockPolicy(make_config().pins)
    async with await Store.open(tmp_path / "copy.sqlite3") as copy:
        plan = plan_import(first, policy, clock())
        assert plan.problems == []
        await apply_import(BlockOps(copy, policy, clock), plan)
        second = json.loads(json.dumps(await export_document(copy, clock(), with_history=True)))
        assert {k: v for k, v in second.items() if k != "exported_at"} == {
            k: v for k, v in first.items() if k != "exported_at"
        }
        plain = {"scopes": {"console:direct:42": {"blocks": [{"label": "tone", "content": "X"}]}}}
        await apply_import(BlockOps(copy, policy, clock), plan_import(plain, policy, clock()))
        versions = await copy.versions("console:direct:42", "tone")
        assert versions[0].channel.value == "import" and versions[0].actor == "import"


async def test_undo_after_an_import_of_many_scopes_reverts_only_the_senders_scope(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot()
    await say(bot, "/pin add tone Be brief.")
    await say(bot, "/pin add tone Be kind.", dm("43"))
    policy = BlockPolicy(make_config().pins)
    document = {
        "scopes": {
            "console:direct:42": {"blocks": [{"label": "tone", "content": "Imported A."}]},
            "console:direct:43": {"blocks": [{"label": "style", "content": "Imported B."}]},
        }
    }
    await apply_import(BlockOps(store, policy, clock), plan_import(document, policy, clock()))
    assert "Undid import (import) of 'tone' by import" in await say(bot, "/pin undo")
    assert await contents(store) == {"tone": "Be brief."}
    # The other scope's part of the same import is still there and still its own to undo.
    assert await contents(store, "console:direct:43") == {"style": "Imported B."}
    assert "of 'style', 'tone' by import" in await say(bot, "/pin undo", dm("43"))
    assert await contents(store, "console:direct:43") == {"tone": "Be kind."}


async def test_history_shows_keyword_and_end_changes_and_undo_and_restore_bring_them_back(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot()
    await say(bot, '/pin add runbook --when deploy,"release notes" Run the checks first.')
    clock.advance(minutes=1)
    assert "Updated block 'runbook'" in await say(bot, "/pin edit runbook --when -")
    (block,) = await store.blocks(["console:direct:42"])
    assert block.triggers == ()
    history = (await say(bot, "/pin history runbook")).splitlines()
    assert history[1] == (
        "1. (now) 2026-01-01 00:01 UTC · 42 · keywords none (sent always) · [strong, active] "
        "Run the checks first."
    )
    assert history[2].endswith(
        "· [strong, active, when deploy, release notes] Run the checks first."
    )
    undone = await say(bot, "/pin undo")
    assert "Undid keywords none (sent always) of 'runbook'" in undone, undone
    (block,) = await store.blocks(["console:direct:42"])
    assert block.triggers == ("deploy", "release notes")

    clock.advance(minutes=1)
    await say(bot, "/pin edit runbook --until 2026-12-24")
    clock.advance(minutes=1)
    await say(bot, "/pin edit runbook --until -")
    history = (await say(bot, "/pin history runbook")).splitlines()
    assert " · 42 · end none (never ends) · " in history[1]
    assert " · 42 · end 2026-12-25 00:00 UTC · " in history[2]
    assert history[2].endswith(
        "[strong, active, when deploy, release notes, until 2026-12-25 00:00 UTC] "
        "Run the checks first."
    )
    assert "Restored 'runbook' to version 2" in await say(bot, "/pin restore runbook 2")
    (block,) = await store.blocks(["console:direct:42"])
    assert block.ends_at is not None and block.ends_at.isoformat() == "2026-12-25T00:00:00+00:00"
    assert block.triggers == ("deploy", "release notes")


async def test_restore_of_a_label_never_here_says_there_is_no_such_block(
    make_bot: BotFactory,
) -> None:
    bot = make_bot()
    reply = text_of(await ask(bot, dm(), "/pin restore nothere"))
    assert reply.startswith("There is no block labelled 'nothere' in your blocks.")
