"""Every way a block changes takes one road (one change, one review, one write): each door
that once forgot a rule of `/pin` (undo, restore, import with history, proposals) keeps it now,
tried as a user meets it (`pinbot console`, `pinbot import`) on SQLite and on PostgreSQL; and a
proposal is decided once, whichever of two processes decides first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.core.blocks.review import RULE_TEXTS, Rule
from bot.core.entry.pinbot import Pinbot
from bot.llm.offline import OfflineChatModel
from storage import Store, open_store
from storage.decisions import PROPOSALS
from storage.models import NewProposal, ProposalStatus
from tests.conftest import ask, group, make_config, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.integration.test_console import console, tool_results
from tests.pg import fresh_database
from tests.process import run_pinbot

URL_VARIABLE = "PINBOT_ROAD_DB"
GROUP = ["--group", "-100", "--user"]
SHARED = "console:group:-100"
RACE_ROUNDS = 20


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The PostgreSQL database of this test (None: SQLite)."""
    if request.param == "sqlite":
        return None
    found = await fresh_database(request.getfixturevalue("pg_cluster"))
    monkeypatch.setenv(URL_VARIABLE, found)
    return found


def configure(tmp_path: Path, url: str | None, **sections: Any) -> Path:
    """A config on this test's database (the same file every time it is written again)."""
    storage: dict[str, str] = {"path": str(tmp_path / "pins.sqlite3")}
    if url:
        storage["url_env"] = URL_VARIABLE
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**sections, "storage": storage}), encoding="utf-8")
    return path


async def blocks_of(tmp_path: Path, url: str | None, scope: str) -> list[tuple[str, ...]]:
    async with await open_store(path=str(tmp_path / "pins.sqlite3"), url=url) as store:
        return [
            (b.label, b.content, b.level.value, b.state.value) for b in await store.blocks([scope])
        ]


async def test_undo_needs_the_rights_a_level_change_needs(tmp_path: Path, url: str | None) -> None:
    """A strong user makes a block strong, then loses strong rights: undoing that change
    would change a strong block, so it is refused as `/pin level` is."""
    pins: dict[str, Any] = {"enable_in_group": True, "group_strong_user_ids": [77]}
    config = configure(tmp_path, url, pins=pins)
    lines = ["/pin add-context r Be exact.", "/pin level r strong"]
    code, out, err = await console(config, lines, *GROUP, "77")
    assert code == 0, err and "Block 'r' is now strong." in out
    config = configure(tmp_path, url, pins={**pins, "group_strong_user_ids": []})
    code, out, err = await console(config, ["/pin level r context", "/pin undo"], *GROUP, "77")
    assert code == 0, err
    level, undo = out.splitlines()
    assert level == undo and "pins.group_strong_user_ids" in undo
    mine = "console:group:-100::u:77"
    assert await blocks_of(tmp_path, url, mine) == [("r", "Be exact.", "strong", "active")]


async def test_restore_meets_the_label_rule_of_now(tmp_path: Path, url: str | None) -> None:
    label = "a-label-of-24-characters"
    config = configure(tmp_path, url, pins={"max_label_length": 30})
    code, out, err = await console(
        config, [f"/pin add {label} Kept.", f"/pin remove {label}"], "--user", "42"
    )
    assert code == 0, err
    config = configure(tmp_path, url, pins={"max_label_length": 10})
    code, out, err = await console(config, [f"/pin restore {label}"], "--user", "42")
    too_long = RULE_TEXTS[Rule.LABEL_TOO_LONG].format(length=len(label), limit=10)
    assert out.strip() == f"'{label}' cannot come back as it was: {too_long}"
    assert await blocks_of(tmp_path, url, "console:direct:42") == []


def version(label: str, content: str, actor: str = "7") -> dict[str, Any]:
    return {
        "op": "0" * 32,
        "label": label,
        "kind": "edit",
        "detail": "",
        "actor": actor,
        "channel": "command",
        "origin": None,
        "at": "2026-01-01T00:00:00+00:00",
        "before": {"content": content, "level": "context", "state": "active", "priority": 0},
        "created_at": None,
        "undone_by": None,
    }


async def test_an_import_with_history_meets_every_rule(tmp_path: Path, url: str | None) -> None:
    """Versions an import brings meet the rules their blocks would: no credential where the
    group reads it (`/pin shared history`), content and labels within today's limits, no
    control or direction characters, no NUL in an actor; and nothing is written."""
    history = [
        version("key", "the key is sk-proj-" + "a1B2c3D4" * 6),
        version("long", "x" * 5000),
        version("evil\u202elabel", "text"),
        version("l" * 120, "text"),
        version("fine", "text", actor="7\x00"),
    ]
    document = {"scopes": {SHARED: {"blocks": [], "history": history}}}
    file = tmp_path / "import.json"
    file.write_text(json.dumps(document), encoding="utf-8")
    config = configure(tmp_path, url)
    code, out, _ = await run_pinbot("import", str(file), "--config", str(config))
    assert code == 1
    problems = [line for line in out.splitlines() if line.startswith("problem:")]
    assert len(problems) == 5, out
    assert "looks like" in problems[0] and "5000 characters long" in problems[1]
    assert "U+202E" in problems[2] and "120 characters long" in problems[3]
    assert "actor contains a control character (U+0000)" in problems[4]
    assert "nothing was imported" in out
    async with await open_store(path=str(tmp_path / "pins.sqlite3"), url=url) as store:
        assert await store.export_versions() == {}


async def test_a_proposal_made_on_an_older_block_is_never_applied(
    tmp_path: Path, url: str | None, fake_openai: FakeOpenAI
) -> None:
    """Proposed against a block that was then removed and added again, an approval is refused
    (the label's newest version differs, whatever its revision says); a reason holding a
    credential is refused like such content, and never posted in the group."""
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_ROAD_KEY",
        "system_prompt": "",
        "max_retries": 0,
        "agent_tools": True,
    }
    pins = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
    config = configure(tmp_path, url, llm=llm, pins=pins)
    env = {"PINBOT_ROAD_KEY": "k"}
    code, out, err = await console(
        config, ["/pin shared add deadline Friday."], *GROUP, "7", env=env
    )
    assert code == 0, err
    secret = "the key is sk-proj-" + "a1B2c3D4" * 6
    fake_openai.script = [
        tool_calls(
            ("pin_propose", {"label": "deadline", "content": "Monday."}),
            ("pin_propose", {"label": "key", "content": "Ask the admin.", "reason": secret}),
        ),
        completion("Proposed."),
    ]
    code, out, err = await console(config, ["Move the deadline"], *GROUP, "42", env=env)
    assert code == 0, err
    results = tool_results(fake_openai.requests[1])
    assert results[0].startswith("Proposal #1 is posted")
    assert results[1].startswith("Refused: Not saved: this looks like") and secret not in out
    assert out.count("[message") == 1
    lines = [
        "/pin shared remove deadline",
        "/pin shared add deadline Sunday.",
        "/pin shared approve 1",
        "/pin shared approve 1",
    ]
    code, out, err = await console(config, lines, *GROUP, "7", env=env)
    assert code == 0, err
    assert "Proposal #1 could not be applied: Block 'deadline' changed after this was asked" in out
    assert "Proposal #1 was approved, but could not be applied already." in out
    assert await blocks_of(tmp_path, url, SHARED) == [("deadline", "Sunday.", "context", "active")]


@pytest.fixture
async def two_workers(tmp_path: Path, url: str | None) -> AsyncIterator[tuple[Pinbot, Pinbot]]:
    """Two bots on one database, each with its own connections, as two processes have."""
    stores = [await Store.open(tmp_path / "race.sqlite3", url=url) for _ in range(2)]
    config = make_config(pins={"enable_in_group": True, "group_shared_admin_ids": ["7", "8"]})
    clock = FakeClock()
    bots = [Pinbot(config, store, OfflineChatModel(), clock=clock) for store in stores]
    yield bots[0], bots[1]
    for store in stores:
        await store.close()


async def test_approve_and_reject_at_once_decide_once(two_workers: tuple[Pinbot, Pinbot]) -> None:
    approver, rejecter = two_workers
    store, now = approver.store, approver.clock()
    split = []
    for round_ in range(RACE_ROUNDS):
        label = f"rule{round_}"
        proposed = NewProposal(SHARED, label, "Be kind.", None, None, "", "model")
        added = await store.add_decision(
            PROPOSALS,
            proposed,
            now=now,
            expires_at=now + timedelta(hours=1),
            max_pending=RACE_ROUNDS,
        )
        assert added is not None
        number = added.number
        approved, rejected = await asyncio.gather(
            ask(approver, group("7", "-100"), f"/pin shared approve {number}"),
            ask(rejecter, group("8", "-100"), f"/pin shared reject {number}"),
        )
        decided = await store.decision(PROPOSALS, SHARED, number)
        assert decided is not None
        saved = [b.label for b in await store.blocks([SHARED])]
        applied = decided.status is ProposalStatus.APPLIED
        said = (text_of(approved).startswith("Approved"), text_of(rejected).startswith("Rejected"))
        if (label in saved) != applied or said != (applied, not applied):
            split.append((round_, decided.status, saved, text_of(approved), text_of(rejected)))
        assert decided.status in (ProposalStatus.APPLIED, ProposalStatus.REJECTED)
    assert split == []
