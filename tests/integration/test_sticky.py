"""What a Sticky Context user knows, through the console's path and the fake model: sensitive
blocks stored whole but sent, read and listed redacted; the model raising pinned and sensitive
and never taking them back; `/sticky raw`, `/sticky delete` and the preview of `/sticky`."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.core.blocks.review import Rule
from bot.core.blocks.sensitive import PREVIEW_CHARS
from bot.secrets import redact
from storage.models import ChangeKind, State
from tests.conftest import OpenAIBots, ask, dm, group, outcome_of, text_of
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.process import run_pinbot_here

GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
# Each kind redaction covers, as a user would write it, and the part that must not be shown.
KINDS = [
    ("ip", "the server is 192.168.1.20 now", "192.168.1.20"),
    ("host-port", "the database is db.internal.example.com:5432", "example.com:5432"),
    ("ssh-target", "deploy with ssh deploy@build-01", "deploy@build-01"),
    ("key-value", "export API_KEY=abc123xyz", "abc123xyz"),
    ("sk-token", "use sk-proj-abcdefghijklmnop1234", "sk-proj-abcdefghijklmnop1234"),
    ("ghp-token", "push with ghp_0123456789abcdefghijABCDEFGHIJ012345", "ghp_0123456789abcdef"),
    ("bearer", "send Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def", "eyJhbGciOiJIUzI1NiJ9"),
    ("email", "write to ops@example.org", "ops@example.org"),
    ("hex", "the hash is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c", "9f86d0818"),
    ("base64", "key dGhpcyBpcyBhIHZlcnkgbG9uZyBiYXNlNjQgc2VjcmV0IHN0cmluZw==", "dGhpcyBpcyBh"),
]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def sent(request: dict[str, Any]) -> str:
    """Everything a request carries, as one text."""
    return json.dumps(request["messages"], ensure_ascii=False)


@pytest.mark.parametrize(("kind", "text", "secret"), KINDS, ids=[k[0] for k in KINDS])
async def test_each_kind_is_kept_whole_but_never_reaches_the_model_or_a_group(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, kind: str, text: str, secret: str
) -> None:
    bot = await openai_bots(llm={"agent_tools": True, "tool_names": "sticky"}, pins=GROUPS)
    saved = text_of(await ask(bot, dm(), f"/pin add ops {text} --sensitive"))
    assert saved.startswith(
        "Saved strong block 'ops', sensitive (the model and listings see it redacted; masked: "
    )
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.content == text and block.sensitive  # the store keeps it whole
    fake_openai.script = [tool_calls(("sticky_get", {"key": "ops"})), completion("Read it.")]
    assert text_of(await ask(bot, dm(), "what is in ops?")) == "Read it."
    first, second = fake_openai.requests[-2:]
    assert secret not in sent(first)
    assert f"label=ops]\n{redact(text)}\n" in first["messages"][0]["content"]
    (got,) = tool_results(second)
    (record,) = json.loads(got)
    assert record["content"] == redact(text) and record["sensitive"] is True
    assert secret not in sent(second)
    # The owner reads it whole in a DM; in a group nothing of it is shown.
    raw = text_of(await ask(bot, dm(), "/sticky raw ops"))
    assert raw == f"Block 'ops' as stored:\n{text}"
    await ask(bot, group("42"), "/pin add ops " + text + " --sensitive")
    in_group = text_of(await ask(bot, group("42"), "/sticky raw ops"))
    assert in_group.startswith("/sticky raw shows a block as it is stored only in a private chat")
    for asked in ("/sticky raw ops", "/pin list", "/pin status", "/sticky", "/pin history ops"):
        assert secret not in text_of(await ask(bot, group("42"), asked)), asked
    for asked in ("/pin list", "/pin status", "/sticky", "/pin history ops"):
        assert secret not in text_of(await ask(bot, dm(), asked)), asked


async def test_a_dm_slot_of_the_issue_reaches_the_model_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), "/pin add creds API_KEY=abc123 ssh root@10.0.0.1 --sensitive")
    await ask(bot, dm(), "hello")
    system = fake_openai.messages()[0]["content"]
    assert "abc123" not in system and "10.0.0.1" not in system and "root@" not in system
    assert "label=creds]\nAPI_KEY=[secret] ssh [ssh-target]\n" in system
    # Token figures count what is sent: the redacted text, not the stored one.
    status = text_of(await ask(bot, dm(), "/pin status"))
    shown = len("API_KEY=[secret] ssh [ssh-target]")
    assert (
        "1. creds (strong, active, priority 0, sensitive, shown redacted (hides a password or "
        f"secret, an SSH target)): {shown} characters"
    ) in status


async def test_the_model_raises_pinned_and_sensitive_and_never_takes_them_back(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True, "tool_names": "sticky"})
    await ask(bot, dm(), "/pin add host the box is 10.1.2.3")
    await ask(bot, dm(), "/pin add task step one")
    fake_openai.script = [
        tool_calls(
            ("sticky_set", {"key": "host", "content": "the box is 10.1.2.3", "sensitive": True}),
            ("sticky_set", {"key": "task", "content": "step one", "pinned": True}),
        ),
        tool_calls(
            ("sticky_set", {"key": "host", "content": "the box is 10.1.2.3", "sensitive": False}),
            ("sticky_set", {"key": "task", "content": "step one", "pinned": False}),
            ("sticky_set", {"key": "new", "content": "db at 10.9.9.9", "sensitive": True}),
        ),
        completion("Done."),
    ]
    assert text_of(await ask(bot, dm(), "protect them")) == "Done."
    raised = tool_results(fake_openai.requests[1])
    assert raised == [
        "Block 'host' is now sensitive: kept whole, but the model, the tools and listings see "
        "it redacted (masked: an IP address). /pin sensitive host off undoes this. It applies "
        "from the next turn.",
        "Block 'task' is now pinned: sent to the model and kept until you remove it. It applies "
        "from the next turn.",
    ]
    lowered = tool_results(fake_openai.requests[2])[len(raised) :]
    assert lowered[:2] == [
        "Refused: Block 'host' is sensitive. The model may mark a block pinned or sensitive but "
        "never take that back; only the user can, with /pin sensitive host off.",
        "Refused: Block 'task' is pinned. The model may mark a block pinned or sensitive but "
        "never take that back; only the user can, with /pin unpin task.",
    ]
    assert lowered[2].startswith("Saved strong block 'new', sensitive")
    blocks = {b.label: b for b in await bot.store.blocks(["console:direct:42"])}
    assert blocks["host"].sensitive and blocks["task"].state.value == "pinned"
    assert blocks["new"].sensitive and blocks["new"].content == "db at 10.9.9.9"
    # The user may take both back.
    assert text_of(await ask(bot, dm(), "/pin sensitive host off")) == (
        "Block 'host' is no longer sensitive: the model reads it as it is."
    )
    assert text_of(await ask(bot, dm(), "/pin unpin task")) == "Block 'task' is now active."
    assert text_of(await ask(bot, dm(), "/pin sensitive host off")) == (
        "Block 'host' is already not sensitive."
    )


def test_the_lowering_rule_has_a_code_and_one_text() -> None:
    assert Rule.LOWERED.value == "lowered"


async def test_a_version_records_the_flag_and_undo_brings_it_back(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), "/pin add creds token sk-proj-abcdefghijklmnop1234 --sensitive")
    await ask(bot, dm(), "/pin sensitive creds off")
    history = text_of(await ask(bot, dm(), "/pin history creds"))
    assert "sensitive off" in history and "sk-proj-abcdefghijklmnop1234" in history
    assert "[strong, active, sensitive] token [token]" in history  # the version before
    assert outcome_of(await ask(bot, dm(), "/pin undo")) is not None
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.sensitive and block.content == "token sk-proj-abcdefghijklmnop1234"
    versions = await bot.store.versions("console:direct:42", "creds")
    assert [v.kind for v in versions][-2:] == [ChangeKind.SENSITIVE, ChangeKind.ADD]
    await ask(bot, dm(), "/pin restore creds 2")
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.sensitive  # a restore never makes a block plain (issue 44): only `off` does


async def test_sticky_delete_removes_pinned_blocks_too(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    await ask(bot, dm(), "/pin add safety Never run rm -rf --pinned")
    assert text_of(await ask(bot, dm(), "/sticky delete safety")) == "Removed block 'safety'."
    assert await bot.store.blocks(["console:direct:42"]) == []
    assert text_of(await ask(bot, dm(), "/sticky delete safety")) == (
        "There is no block labelled 'safety' in your blocks. Send /pin list to see them."
    )
    usage = text_of(await ask(bot, dm(), "/sticky delete"))
    assert usage.startswith("/sticky delete needs the key of one block.\nUsage: /sticky ")
    assert text_of(await ask(bot, dm(), "/sticky raw nothing")) == (
        "There is no block labelled 'nothing' in your blocks. Send /pin list to see them."
    )


async def test_sticky_previews_each_block_redacted_if_sensitive(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    long = "word " * 60
    await ask(bot, dm(), f"/pin add notes {long}")
    await ask(bot, dm(), "/pin add creds API_KEY=abc123 ssh root@10.0.0.1 --sensitive")
    view = text_of(await ask(bot, dm(), "/sticky")).splitlines()
    shown = " ".join(long.split())[:PREVIEW_CHARS] + "…"
    assert view[2:6] == [
        "1. creds (strong, active, priority 0, sensitive, shown redacted (hides a password or "
        "secret, an SSH target)): 33 characters, about 31 tokens",
        "   API_KEY=[secret] ssh [ssh-target]",
        "2. notes (strong, active, priority 0): 299 characters, about 98 tokens",
        f"   {shown}",
    ]
    # /pin status keeps its figures without previews.
    assert f"   {shown}" not in text_of(await ask(bot, dm(), "/pin status"))


# --- pinbot import of a Sticky Context file --------------------------------------------------


async def pinbot_import(tmp_path: Path, document: Any, *args: str, pins: str = "{}") -> str:
    """`pinbot import` of document into the database openai_bots opens; its output."""
    config = tmp_path / "import.yaml"
    config.write_text(
        f"storage: {{path: '{tmp_path / 'bot.sqlite3'}'}}\npins: {pins}\n", encoding="utf-8"
    )
    file = tmp_path / "sticky-context.json"
    file.write_text(json.dumps(document), encoding="utf-8")
    _, out, err = await run_pinbot_here("import", str(file), "--config", str(config), *args)
    return out + err


def slot(content: str, priority: int = 0, pinned: bool = False, **more: Any) -> dict[str, Any]:
    return {
        "content": content,
        "priority": priority,
        "pinned": pinned,
        "created": "2026-02-26T19:00:00.000Z",
        "updated": "2026-02-26T20:30:00.000Z",
        **more,
    }


async def test_a_version_1_file_comes_in_and_is_read_in_priority_order(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    document = {
        "version": 1,
        "slots": {
            "active-task": slot("Migrating the API to v2.", 50),
            "safety-rules": slot("Never run rm -rf.", 100, pinned=True),
            "notes": slot("Prefers short answers."),
        },
    }
    out = await pinbot_import(tmp_path, document, "--scope", "console:direct:42", "--dry-run")
    assert out.splitlines() == [
        "console:direct:42: add active-task, safety-rules, notes",
        "dry run: nothing was written",
    ]
    out = await pinbot_import(tmp_path, document, "--scope", "console:direct:42")
    assert out.splitlines()[-1] == "imported 3 slot(s) into console:direct:42"
    bot = await openai_bots()
    blocks = {b.label: b for b in await bot.store.blocks(["console:direct:42"])}
    safety = blocks["safety-rules"]
    assert (safety.state, safety.priority, safety.level.value) == (State.PINNED, 100, "strong")
    assert safety.created_at == datetime(2026, 2, 26, 19, tzinfo=UTC)
    assert safety.updated_at == datetime(2026, 2, 26, 20, 30, tzinfo=UTC)
    await ask(bot, dm(), "hello")
    system = fake_openai.messages()[0]["content"]
    order = [system.index(f"label={key}]") for key in ("safety-rules", "active-task", "notes")]
    assert order == sorted(order)
    # Imported again as it is, nothing differs: said once, nothing written
    # (test_sticky_start: an edited file updates the slots it changes).
    again = await pinbot_import(tmp_path, document, "--scope", "console:direct:42")
    assert again.splitlines() == ["no changes"]


async def test_a_version_2_file_keeps_sensitive_slots_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    document = {
        "version": 2,
        "slots": {
            "server": slot("API_KEY=abc123 ssh root@10.0.0.1", 10, sensitive=True),
            "style": slot("Answer in English.", sensitive=False),
        },
    }
    scope = ("--scope", "console:direct:42", "--level", "context")
    out = await pinbot_import(tmp_path, document, *scope)
    assert out.splitlines()[-1] == "imported 2 slot(s) into console:direct:42"
    bot = await openai_bots()
    await ask(bot, dm(), "hello")
    user = fake_openai.messages()[-1]["content"]  # context blocks go with the message
    assert "label=server]\nAPI_KEY=[secret] ssh [ssh-target]\n" in user
    assert "abc123" not in user and "10.0.0.1" not in user
    assert user.index("label=server]") < user.index("label=style]")
    assert text_of(await ask(bot, dm(), "/sticky raw server")).endswith(
        "API_KEY=abc123 ssh root@10.0.0.1"
    )


async def test_a_refused_slot_names_itself_and_its_rule_and_nothing_is_written(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    long_key = "a-key-of-the-sticky-design-up-to-64"
    slots = {
        "fine": slot("Fine."),
        long_key: slot("Fits."),
        "big": slot("x" * 1995),
        "odd": {**slot("Fine."), "priority": "high"},
    }
    document = {"version": 2, "slots": slots}
    out = await pinbot_import(tmp_path, document, "--scope", "console:direct:42")
    assert out.splitlines() == [
        f"problem: slot '{long_key}' refused (label-too-long): The label is 35 characters "
        "long; the limit is 20 (pins.max_label_length). Choose a shorter label.",
        "problem: slot 'big' refused (content-too-long): The content is 1995 characters long; "
        "the limit is 500 (pins.max_content_length). Shorten it and try again.",
        "problem: slot 'odd': priority must be a whole number",
        "3 problem(s); nothing was imported",
    ]
    # With the Sticky preset's limits, the same keys and contents fit; the budget still holds.
    preset = "{max_label_length: 64, max_content_length: 2000, max_total_chars: 2000}"
    del slots["odd"]
    out = await pinbot_import(tmp_path, document, "--scope", "console:direct:42", pins=preset)
    assert out.splitlines() == [
        "problem: slot 'big' refused (over-budget): That would bring your blocks to 2005 "
        "characters, over the budget of 2000 (pins.max_total_chars). Shorten or remove a "
        "block first.",
        "1 problem(s); nothing was imported",
    ]
    bot = await openai_bots()
    assert await bot.store.blocks(["console:direct:42"]) == []


async def test_a_group_scope_refuses_credentials_and_defaults_to_context(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    shared = "console:group:-100123"
    document = {"version": 1, "slots": {"deploy": slot("token sk-proj-" + "a1B2c3D4" * 6)}}
    out = await pinbot_import(tmp_path, document, "--scope", shared)
    assert "problem: slot 'deploy' refused (credential): Not saved: this looks like" in out
    document = {"version": 1, "slots": {"deploy": slot("Deploys go out on Fridays.")}}
    out = await pinbot_import(tmp_path, document, "--scope", shared)
    assert out.splitlines()[-1] == f"imported 1 slot(s) into {shared}"
    bot = await openai_bots()
    (block,) = await bot.store.blocks([shared])
    assert block.level.value == "context"
    missing = await pinbot_import(tmp_path, document)
    assert "this is a Sticky Context file: name the scope its slots go to with --scope" in missing
    wrong = await pinbot_import(tmp_path, {"version": 3, "slots": {}}, "--scope", shared)
    assert "unsupported Sticky Context version 3; this pinbot reads versions 1 and 2" in wrong


def sticky_preset() -> dict[str, Any]:
    """The Sticky Context preset as docs/designs.md shows it."""
    text = (Path(__file__).parents[2] / "docs" / "designs.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) if "STICKY" in b]
    found: dict[str, Any] = yaml.safe_load(block)
    return found


async def test_the_documented_sticky_preset_takes_what_fit_the_plugin(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    preset = sticky_preset()
    assert preset["pins"]["max_total_chars"] == preset["pins"]["max_content_length"] == 2000
    bot = await openai_bots(pins=preset["pins"], llm=preset["llm"])
    key, content = "k" * 64, "x" * 1800
    fake_openai.script = [
        tool_calls(("sticky_set", {"key": key, "content": content, "priority": 5})),
        completion("Saved."),
    ]
    assert text_of(await ask(bot, dm(), "keep this")) == "Saved."
    (result,) = tool_results(fake_openai.requests[-1])
    assert result.startswith(f"Saved strong block '{key}'")
    await ask(bot, dm(), "next")
    assert "[pin-" in fake_openai.messages()[0]["content"]
    assert "STICKY CONTEXT (survives compaction)" in fake_openai.messages()[0]["content"]
