"""Hostile input through the `pinbot` command (console, import, check-config; its main in this
process, a real process for the files it creates): no input from a user, the model, a file or
the network stops it, prints a traceback, or loses data."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage import Store
from tests.fakes.openai_server import FakeOpenAI, completion
from tests.process import PINBOT, PROCESS_TIMEOUT_S, run_pinbot, run_pinbot_here


def write_config(tmp_path: Path, **sections: Any) -> Path:
    sections.setdefault("storage", {"path": str(tmp_path / "pins.sqlite3")})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


def bad_calls() -> dict[str, Any]:
    """A tool round with the calls some servers and models really send."""
    body = completion("")
    body["choices"][0]["finish_reason"] = "tool_calls"
    body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": "c1",
            "type": "function",
            "function": {
                "name": "pin_set",
                "arguments": json.dumps({"label": "big", "content": "x", "priority": 10**20}),
            },
        },
        {  # arguments as a JSON object, not a string
            "id": "c2",
            "type": "function",
            "function": {"name": "pin_set", "arguments": {"label": "obj", "content": "fine"}},
        },
        {"id": "c3", "type": "function"},  # no function at all
    ]
    return body


async def test_bad_tool_calls_never_stop_the_console(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = [bad_calls(), completion("done with tools")]
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_HOSTILE_KEY",
        "agent_tools": True,
    }
    config = write_config(tmp_path, llm=llm)
    lines = b"use the tools\n/pin list\nand again\n"
    code, out, err = await run_pinbot_here(
        "console",
        "--user",
        "1",
        "--config",
        str(config),
        stdin=lines,
        env={"PINBOT_HOSTILE_KEY": "sk-hostile-0000"},
    )
    assert code == 0, err
    assert "Traceback" not in err
    assert out.startswith("done with tools\n")
    results = {
        m["tool_call_id"]: m["content"]
        for m in fake_openai.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert "from -1000 to 1000" in results["c1"]
    assert results["c2"].startswith("Saved strong block 'obj'")
    assert "c3" not in results
    assert "1. obj (strong, active)" in out and "big" not in out
    assert out.rstrip().endswith("reply 3")  # the next line was served


async def test_invalid_utf8_on_the_console(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await run_pinbot_here(
        "console",
        "--user",
        "1",
        "--config",
        str(config),
        stdin=b"bad \xff\xfe byte\n/pin add ok Still here.\nhello\n",
    )
    assert code == 0 and "Traceback" not in err
    first, second, third = out.splitlines()
    assert first.startswith("That line is not valid UTF-8 (byte 0xff at position 4)")
    assert second == "Saved strong block 'ok'."
    assert third.endswith("Earlier messages: 0. You said: hello")  # the bad line never reached it


def hostile_documents() -> list[tuple[str, str]]:
    block = {"label": "a", "content": "b"}
    return [
        (
            json.dumps({"scopes": {"console:direct:1": {"blokcs": [block]}}}),
            "did you mean 'blocks'",
        ),
        (
            json.dumps(
                {
                    "scopes": {
                        "console:direct:1": {"blocks": [block]},
                        "agent:a:console:direct:1": {"blocks": []},
                    }
                }
            ),
            "names the same scope",
        ),
        (
            json.dumps(
                {"scopes": {"console:direct:1": {"blocks": [{**block, "priority": 10**20}]}}}
            ),
            "from -1000 to 1000",
        ),
        (
            json.dumps({"scopes": {"console:direct:1": {"model_calls": 10**25, "blocks": []}}}),
            "model_calls must be a whole number",
        ),
        (
            json.dumps(
                {
                    "scopes": {
                        "console:direct:1": {
                            "blocks": [{**block, "created_at": "9999-12-31T23:59:59-14:00"}]
                        }
                    }
                }
            ),
            "outside the years",
        ),
        (
            '{"scopes": {"console:direct:1": {"blocks": [{"label": "a\\ud800", "content": "b"}]}}}',
            "U+D800",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"scopes": {"console:direct:1\\u0000": {"blocks": []}}}', "not a scope key"),
    ]


@pytest.fixture(scope="module")
def kept_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database in which the console saved one block, 'keep'; made once, and copied by each
    test that needs it (one process start instead of one per test)."""
    folder = tmp_path_factory.mktemp("kept")
    subprocess.run(
        [PINBOT, "console", "--user", "1", "--config", str(write_config(folder))],
        input=b"/pin add keep Me.\n",
        capture_output=True,
        timeout=PROCESS_TIMEOUT_S,
        check=True,
    )
    assert not (folder / "pins.sqlite3-wal").exists()  # all of it is in the one file
    return folder / "pins.sqlite3"


@pytest.mark.xdist_group("hostile-imports")  # on one parallel worker: kept_database made once
@pytest.mark.parametrize(("text", "problem"), hostile_documents())
async def test_hostile_imports_list_problems_and_write_nothing(
    tmp_path: Path, kept_database: Path, text: str, problem: str
) -> None:
    config = write_config(tmp_path)
    shutil.copy2(kept_database, tmp_path / "pins.sqlite3")
    file = tmp_path / "import.json"
    file.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, out, err = await run_pinbot_here("import", str(file), "--config", str(config))
    assert code == 1 and "Traceback" not in err
    assert problem in out + err
    async with await Store.open(tmp_path / "pins.sqlite3") as store:
        assert [b.label for b in await store.blocks(["console:direct:1"])] == ["keep"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (
            b"pins:\n  max_blocks_per_session: 10000000000000000000000000\n",
            "max_blocks_per_session",
        ),
        (b"pins:\n  max_blocks_per_session: true\n", "max_blocks_per_session"),
        (b"pins:\n  enable_in_group: 1\n", "enable_in_group"),
        (b"llm:\n  system_prompt: caf\xe9\n", "not UTF-8 text (byte 0xe9"),
    ],
)
async def test_config_values_that_cannot_be_right(tmp_path: Path, raw: bytes, needle: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(raw)
    for command in (["check-config"], ["console", "--user", "1"]):
        code, out, err = await run_pinbot_here(
            *command, "--config", str(config), stdin=b"/pin list\n"
        )
        assert code == 2 and out == "" and "Traceback" not in err
        assert needle in err and len(err.strip().splitlines()) == 1


async def test_files_we_create_are_private(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    await run_pinbot("console", "--user", "1", "--config", str(config), stdin=b"/pin add a b\n")
    export = tmp_path / "out.json"
    code, _, _ = await run_pinbot("export", "-o", str(export), "--config", str(config))
    assert code == 0
    for path in (tmp_path / "pins.sqlite3", export):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
