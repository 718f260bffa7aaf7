"""`pinbot console` as a user meets it: fed lines on stdin, judged by its stdout, the blocks in
the database and the requests a fake OpenAI-compatible server receives. Its main runs in this
process; a real process where the test is about one (the model over HTTP, SIGKILL, a terminal)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage import Store, open_store
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.pg import fresh_database
from tests.process import PINBOT, run_pinbot, run_pinbot_here


async def console(
    config: Path,
    lines: list[str],
    *args: str,
    env: dict[str, str] | None = None,
    process: bool = False,
) -> tuple[int, str, str]:
    """`pinbot console --config CONFIG ARGS` fed lines: in this process unless process."""
    run = run_pinbot if process else run_pinbot_here
    stdin = "".join(f"{line}\n" for line in lines).encode()
    return await run("console", "--config", str(config), *args, stdin=stdin, env=env)


_BACKEND: dict[str, str | None] = {"url": None}  # the PostgreSQL database of this test, if any
URL_VARIABLE = "PINBOT_CONSOLE_DB"


@pytest.fixture(autouse=True, params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """Every console test here runs on SQLite and on a real PostgreSQL server."""
    if request.param == "postgres":
        url = await fresh_database(request.getfixturevalue("pg_cluster"))
        monkeypatch.setenv(URL_VARIABLE, url)
        _BACKEND["url"] = url
    yield str(request.param)
    _BACKEND["url"] = None


def write_config(tmp_path: Path, **sections: Any) -> Path:
    storage_section: dict[str, str] = {"path": str(tmp_path / "pins.sqlite3")}
    if _BACKEND["url"]:
        storage_section["url_env"] = URL_VARIABLE
    sections.setdefault("storage", storage_section)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


async def open_test_store(tmp_path: Path) -> Store:
    """The store the console of this test wrote to."""
    return await open_store(path=str(tmp_path / "pins.sqlite3"), url=_BACKEND["url"])


async def stored(tmp_path: Path, scope: str) -> list[tuple[str, str, str, str]]:
    async with await open_test_store(tmp_path) as store:
        return [
            (b.label, b.content, b.level.value, b.state.value) for b in await store.blocks([scope])
        ]


async def test_dm_session_on_the_offline_backend(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await console(
        config,
        [
            "/pin add tone Réponds brièvement.",
            "/pin add-context proj pinbot -- notes --pinned",
            "/pin list",
            "hello model",
            "/pin nonsense",
        ],
        "--user",
        "42",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Saved strong block 'tone'."
    assert lines[1].startswith("Saved context block 'proj', pinned")
    assert (
        "[offline model] pinned blocks: tone (strong, personal); proj (context, personal). "
        "Earlier messages: 0. You said: hello model"
    ) in lines
    assert "Unknown subcommand 'nonsense'" in out
    assert await stored(tmp_path, "console:direct:42") == [
        ("tone", "Réponds brièvement.", "strong", "active"),
        ("proj", "pinbot -- notes", "context", "pinned"),
    ]


async def test_group_roles_with_scoped_entries_across_runs(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": ["console:group:-100123::u:42"],
            "group_strong_user_ids": [77],
        },
    )
    group = ("--group", "-100123")
    code, out, _ = await console(
        config,
        ["/pin shared add-strong house Be kind.", "/pin add-strong mine Admin's rule"],
        "--user",
        "42",
        *group,
    )
    assert code == 0 and out.count("Saved strong block") == 2
    code, out, _ = await console(
        config,
        [
            "/pin shared add x y",
            "/pin add-strong s t",
            "/pin add note my note",
            "/pin shared list",
            "hi from a topic",
        ],
        "--user",
        "43",
        *group,
        "--topic",
        "7",
    )
    assert code == 0
    assert "Only shared admins" in out and "pins.group_strong_user_ids" in out
    assert "1. house (strong, active)\nBe kind." in out
    assert (
        "pinned blocks: house (strong, shared); note (context, personal). "
        "Earlier messages: 0. You said: hi from a topic"
    ) in out
    code, out, _ = await console(config, ["/pin add-strong s t"], "--user", "77", *group)
    assert out.startswith("Saved strong block 's'")
    assert await stored(tmp_path, "console:group:-100123") == [
        ("house", "Be kind.", "strong", "active")
    ]
    assert await stored(tmp_path, "console:group:-100123::u:43") == [
        ("note", "my note", "context", "active")
    ]


async def test_console_against_an_openai_compatible_server(
    tmp_path: Path, fake_openai: FakeOpenAI, backend: str
) -> None:
    config = write_config(
        tmp_path,
        llm={
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "model": "m",
            "api_key_env": "PINBOT_CONSOLE_KEY",
            "system_prompt": "",
            "max_retries": 0,
        },
    )
    code, out, err = await console(
        config,
        ["first", "second"],
        "--user",
        "42",
        env={"PINBOT_CONSOLE_KEY": "sk-console"},
        process=backend == "sqlite",  # the real command once; the same in process on PostgreSQL
    )
    assert code == 0, err
    assert out.splitlines() == ["reply 1", "reply 2"]
    assert fake_openai.messages() == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply 1"},
        {"role": "user", "content": "second"},
    ]
    assert "sk-console" not in err


async def test_missing_api_key_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    config = write_config(tmp_path, llm={"backend": "openai", "api_key_env": "PINBOT_NO_KEY"})
    code, _, err = await console(config, [], "--user", "1", env={"PINBOT_NO_KEY": ""})
    assert code == 2 and "PINBOT_NO_KEY" in err


async def test_config_errors_name_the_key_and_the_file(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"pins": {"max_blocks_per_sesion": 3}}, "pins.max_blocks_per_sesion"),
        ({"pins": {"max_content_length": -1}}, "pins.max_content_length"),
        ({"pins": {"enable_in_group": "maybe"}}, "pins.enable_in_group"),
        ({"llm": {"backend": "magic"}}, "llm.backend"),
    ]
    for bad, key in cases:
        config = write_config(tmp_path, **bad)
        code, out, err = await console(config, ["/pin list"], "--user", "1")
        assert code == 2 and out == ""
        assert key in err and str(config) in err


async def test_a_crash_mid_turn_loses_no_committed_history(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    import signal

    config = write_config(
        tmp_path,
        llm={
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "api_key_env": "PINBOT_KEY",
            "system_prompt": "",
            "max_retries": 0,
        },
    )
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        "console",
        "--config",
        str(config),
        "--user",
        "42",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PINBOT_KEY": "k"},
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"/pin add rule kept\nfirst\n")
    await process.stdin.drain()
    assert await process.stdout.readline() == b"Saved strong block 'rule'.\n"
    assert await process.stdout.readline() == b"reply 1\n"
    fake_openai.release = asyncio.Event()  # the next model call hangs
    process.stdin.write(b"second\n")
    await process.stdin.drain()
    await fake_openai.wait_for_requests(2)
    process.send_signal(signal.SIGKILL)
    await process.wait()
    fake_openai.release.set()
    async with await open_test_store(tmp_path) as store:
        assert [e.content for e in await store.history("console:direct:42")] == ["first", "reply 1"]
        assert [b.label for b in await store.blocks(["console:direct:42"])] == ["rule"]
        assert await store.integrity_ok()


async def test_console_refuses_users_outside_the_access_list(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    config = write_config(
        tmp_path,
        access={"allowed_users": ["7"]},
        llm={"backend": "openai", "base_url": fake_openai.base_url, "api_key_env": "PINBOT_KEY"},
    )
    code, out, _ = await console(
        config, ["hello", "/pin add a b"], "--user", "8", env={"PINBOT_KEY": "k"}
    )
    assert code == 0 and out.count("Your id is 8 (console:direct:8)") == 2
    assert fake_openai.requests == []
    assert await stored(tmp_path, "console:direct:8") == []
    code, out, _ = await console(config, ["hello"], "--user", "7", env={"PINBOT_KEY": "k"})
    assert out.strip() == "reply 1"


async def test_bad_identities_are_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    for args in (
        ("--user", "a:b"),
        ("--user", "1", "--group", "x y"),
        ("--user", "1", "--topic", "3"),
    ):
        code, out, err = await console(config, ["hi"], *args)
        assert (
            code == 2
            and out == ""
            and ("ids are 1 to 128 characters" in err or "--topic needs --group" in err)
        )


def test_a_terminal_gets_a_banner_and_a_prompt(tmp_path: Path) -> None:
    import pty
    import subprocess

    config = write_config(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [PINBOT, "console", "--config", str(config), "--user", "5"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(terminal)
    os.write(controller, b"/pin list\n\x04")  # a line, then Ctrl-D ends the input
    out, err = process.communicate(timeout=60)
    os.close(controller)
    assert process.returncode == 0, err
    lines = out.decode().splitlines()
    # The banner names the database in use: a console started elsewhere shows which it opened.
    head, _, tail = lines[0].partition(" on ")
    assert head == "pinbot console: console:direct:5"
    assert tail.startswith(("SQLite /", "PostgreSQL ($")), lines[0]
    assert tail.endswith(". /pin help for pins; Ctrl-D ends.")
    assert lines[1].startswith("> You have no blocks.")  # the prompt, then the reply
    assert err == b""


async def test_history_undo_and_restore_at_the_console(tmp_path: Path) -> None:
    config = write_config(tmp_path, pins={"max_blocks_per_session": 2})
    code, out, err = await console(
        config,
        [
            "/pin add tone Be brief.",
            "/pin edit tone Be brief and kind.",
            "/pin add notes Project notes",
            "/pin clear confirm",
            "/pin undo",
            "/pin history tone",
            "/pin undo",
            "/pin remove notes",
            "/pin add other filler",
            "/pin add third filler",
            "/pin restore notes",
        ],
        "--user",
        "42",
    )
    assert code == 0, err
    assert "Deleted 2 block(s) from your blocks. /pin undo brings them back, for 30 days." in out
    undid_clear = next(line for line in out.splitlines() if line.startswith("Undid clear of"))
    assert "'tone'" in undid_clear and "'notes'" in undid_clear and "by 42" in undid_clear
    assert "1. (now)" in out and "[strong, active] Be brief and kind." in out
    # Undo again steps over its own undo: the add of 'notes' before the clear goes.
    assert (
        "Undid add strong of 'notes' by 42" in out
        and "Undid clear" not in out.split("Undid add strong")[1]
    )
    assert "Your blocks would hold 3 blocks; the limit is 2" in out  # the limit of now
    assert await stored(tmp_path, "console:direct:42") == [
        ("tone", "Be brief and kind.", "strong", "active"),
        ("other", "filler", "strong", "active"),
    ]


# --- the two designs, exactly (issue 27) ----------------------------------------------------------


async def test_flags_are_strict_and_ignore_case(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await console(
        config,
        [
            "/pin add h Eight --priority",
            "/pin add g x --priority 5 --priority 6",
            "/pin add p x --prio 5",
            "/pin add q x --pined",
            "/pin add k Keep this --PINNED --Priority 7",
            "/pin add v run it --verbose",
            "/pin add lit -- Eight --priority",
            "/Pin List",
        ],
        "--user",
        "42",
    )
    assert code == 0, err
    usage = "Usage: /pin add <label> <content> [--pinned] [--priority <n>]"
    literal = "put -- after the label: /pin add <label> -- <content>"
    assert out.count(usage) == 4 and out.count(literal) == 4
    assert "--priority needs a number after it" in out
    assert "--priority is given twice" in out
    assert "'--prio' is not a flag. Did you mean --priority?" in out
    assert "'--pined' is not a flag. Did you mean --pinned?" in out
    assert "Saved strong block 'k', pinned" in out
    assert "1. k (strong, pinned, priority 7)\nKeep this" in out  # /Pin List works too
    assert sorted(await stored(tmp_path, "console:direct:42")) == [
        ("k", "Keep this", "strong", "pinned"),
        ("lit", "Eight --priority", "strong", "active"),
        ("v", "run it --verbose", "strong", "active"),
    ]


async def test_hints_name_the_subcommand_meant(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await console(
        config,
        [
            "/pin add tone Be brief.",
            "/pin delete tone",
            "/pin show",
            "/pin off tone",
            "/pin info",
            "/pin on tone",
        ],
        "--user",
        "42",
    )
    assert code == 0, err
    assert (
        "Unknown subcommand 'delete'. Did you mean 'remove'? Usage: /pin remove <label>. "
        "Send /pin help for the list."
    ) in out
    assert "Did you mean 'list'? Usage: /pin list." in out
    assert "Did you mean 'idle'? Usage: /pin idle <label>." in out
    assert "Did you mean 'status'? Usage: /pin status." in out
    assert "Did you mean 'activate'? Usage: /pin activate <label>." in out
    assert await stored(tmp_path, "console:direct:42") == [
        ("tone", "Be brief.", "strong", "active")
    ]
    code, out, _ = await console(config, ["/pin remove tone"], "--user", "42")
    assert out == "Removed block 'tone'.\n"
    assert await stored(tmp_path, "console:direct:42") == []


async def test_the_header_label_names_the_strong_section(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_CONSOLE_KEY",
        "system_prompt": "",
        "max_retries": 0,
    }
    title = "STICKY CONTEXT (survives compaction)"
    config = write_config(tmp_path, llm=llm, pins={"header_label": title})
    code, out, err = await console(
        config,
        ["/pin add safety Never run rm -rf.", "/pin add-context ref Notes", "hello"],
        "--user",
        "42",
        env={"PINBOT_CONSOLE_KEY": "k"},
    )
    assert code == 0, err
    system, user = (m["content"] for m in fake_openai.messages())
    first, *_, last = system.splitlines()
    assert first.endswith(f" {title}]") and last.endswith(f" end {title}]")
    assert 'this section ends with "[pin-' in system and f' end {title}]".' in system
    assert "pinned rules" not in system
    assert "pinned reference material]" in user  # the context section keeps its title
    for bad in ("rules [v2]", "x" * 61, "two\nlines"):
        config = write_config(tmp_path, llm=llm, pins={"header_label": bad})
        code, out, err = await console(config, ["hello"], "--user", "42")
        assert code == 2 and out == "" and "pins.header_label" in err and str(config) in err


async def test_sticky_shows_every_block_sent_then_idle_ones_then_the_totals(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": ["7"],
            "max_total_chars": 900,
            "token_warning_threshold": 600,
        },
    )
    group = ("--group", "-100123")
    code, _, err = await console(
        config,
        [
            "/pin shared add-context ref Reference notes",
            "/pin shared add-strong house Be kind.",
            "/pin shared add-strong top Safety first --priority 100 --pinned",
        ],
        "--user",
        "7",
        *group,
    )
    assert code == 0, err
    code, out, err = await console(
        config,
        ["/pin add mine My notes", "/pin add gone Old notes", "/pin idle gone", "/sticky"],
        "--user",
        "8",
        *group,
    )
    assert code == 0, err
    view = out[out.index("Sent with every request") :]
    assert view.splitlines() == [
        "Sent with every request here, in the order the model reads them (characters of "
        "content; estimated tokens with the block's boundary lines; under each, its first 120 "
        "characters):",
        "In the system prompt (strong blocks):",
        "1. top (shared, strong, pinned, priority 100): 12 characters, about 25 tokens",
        "   Safety first",
        "2. house (shared, strong, active, priority 0): 8 characters, about 25 tokens",
        "   Be kind.",
        "With your message (context blocks):",
        "3. ref (shared, context, active, priority 0): 15 characters, about 26 tokens",
        "   Reference notes",
        "4. mine (personal, context, active, priority 0): 8 characters, about 25 tokens",
        "   My notes",
        "Idle, not sent:",
        "- gone (personal, context, idle, priority 0): deleted once 7 more days and 10 more "
        "model calls have passed, or in 30 days at the latest",
        "   Old notes",
        "This group's shared blocks: 3 of 20 blocks, 35 of 900 characters (pins.max_total_chars).",
        "Your personal blocks in this group: 2 of 20 blocks, 17 of 900 characters "
        "(pins.max_total_chars).",
        "Every request here carries about 621 tokens of pinned blocks: this group's shared "
        "blocks about 75, your personal blocks in this group about 25, the wrappers (titles, "
        "rules, boundaries; counted once) about 521.",
        "Warning: that is over the warning threshold of 600 tokens; consider shortening, idling "
        "or removing blocks.",
    ]
    code, out, _ = await console(config, ["/pin shared status"], "--user", "8", *group)
    assert "3. ref (shared" in out and "mine" not in out and "gone" not in out
    assert "carries about 621 tokens" in out


async def test_no_figures_for_blocks_that_are_not_sent(tmp_path: Path) -> None:
    config = write_config(tmp_path, pins={"allow_prompt_injection": False})
    code, out, err = await console(
        config, ["/pin add tone Be brief.", "/pin list", "/pin status", "/sticky"], "--user", "42"
    )
    assert code == 0, err
    off = (
        "Injection is off (pins.allow_prompt_injection: false): blocks are kept, but none is "
        "sent to the model, so they add nothing to any request."
    )
    assert out.count(off) == 3
    assert "tokens" not in out
    assert out.count("1. tone (strong, active, priority 0): 9 characters\n") == 2


async def test_a_members_parts_add_up_to_the_total(tmp_path: Path) -> None:
    config = write_config(tmp_path, pins={"enable_in_group": True, "group_shared_admin_ids": [7]})
    group = ("--group", "-100123")
    await console(
        config,
        [
            "/pin shared add-strong rule " + "Keep answers short. " * 10,
            "/pin shared add ref Project notes: " + "pinbot " * 30,
        ],
        "--user",
        "7",
        *group,
    )
    code, out, err = await console(
        config, ["/pin add mine My own notes", "/pin list", "/pin status"], "--user", "8", *group
    )
    assert code == 0, err
    assert (
        "These blocks add about 26 tokens to every request here; with this group's shared "
        "blocks (about 150) and the wrappers (about 521), every request here carries about 697 "
        "tokens of pinned blocks."
    ) in out
    assert (
        "Every request here carries about 697 tokens of pinned blocks: this group's shared "
        "blocks about 150, your personal blocks in this group about 26, the wrappers (titles, "
        "rules, boundaries; counted once) about 521."
    ) in out
    assert "1. rule (shared, strong, active, priority 0): 199 characters, about 72 tokens" in out
    assert "2. ref (shared, context, active, priority 0): 224 characters, about 78 tokens" in out
    assert 150 == 72 + 78 and 697 == 150 + 26 + 521  # each part within a token of its sum


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_the_sticky_context_tools_by_their_documented_names(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_CONSOLE_KEY",
        "system_prompt": "",
        "max_retries": 0,
        "agent_tools": True,
        "tool_names": "sticky",
    }
    config = write_config(tmp_path, llm=llm)
    safety = (
        "Never delete files without explicit user confirmation. Never run rm -rf. Never "
        "modify STANDING_ORDERS.md without asking first."
    )
    task = "TASK: Migrating database schema v3 to v4. DONE: users, posts tables."
    fake_openai.script = [
        tool_calls(
            (
                "sticky_set",
                {"key": "safety-rules", "content": safety, "priority": 100, "pinned": True},
            ),
            (
                "sticky_set",
                {"key": "active-task", "content": task, "priority": 50, "pinned": False},
            ),
            ("sticky_get", {}),
        ),
        completion("Both slots are saved."),
        tool_calls(
            ("sticky_delete", {"key": "safety-rules"}),
            ("sticky_delete", {"key": "active-task"}),
            ("sticky_get", {"key": "safety-rules"}),
            ("sticky_set", {"key": "x", "content": "y", "level": "strong"}),
            ("pin_set", {"label": "x", "content": "y"}),
        ),
        completion("The safety rules are pinned; I removed the task."),
    ]
    code, out, err = await console(
        config,
        ["Create the slots", "Now delete both"],
        "--user",
        "42",
        env={"PINBOT_CONSOLE_KEY": "k"},
    )
    assert code == 0, err
    assert out.splitlines() == [
        "Both slots are saved.",
        "The safety rules are pinned; I removed the task.",
    ]
    offered = fake_openai.requests[0]["tools"]
    assert [tool["function"]["name"] for tool in offered] == [
        "sticky_set",
        "sticky_get",
        "sticky_delete",
    ]
    parameters = [tool["function"]["parameters"] for tool in offered]
    assert [list(p["properties"]) for p in parameters] == [
        ["key", "content", "priority", "pinned", "sensitive"],
        ["key"],
        ["key"],
    ]
    assert [p.get("required") for p in parameters] == [["key", "content"], None, ["key"]]
    saved, listed = (
        tool_results(fake_openai.requests[1])[0],
        tool_results(fake_openai.requests[1])[2],
    )
    assert saved.startswith("Saved strong block 'safety-rules', pinned")
    assert json.loads(listed) == [
        {
            "key": "safety-rules",
            "content": safety,
            "priority": 100,
            "pinned": True,
            "sensitive": False,
            "level": "strong",
            "state": "pinned",
            "when": [],
            "until": None,
        },
        {
            "key": "active-task",
            "content": task,
            "priority": 50,
            "pinned": False,
            "sensitive": False,
            "level": "strong",
            "state": "active",
            "when": [],
            "until": None,
        },
    ]
    second_turn = fake_openai.requests[2]
    assert f"label=safety-rules]\n{safety}" in second_turn["messages"][0]["content"]
    refused, removed, one, no_level, other_name = tool_results(fake_openai.requests[3])
    assert refused == (
        "Refused: Block 'safety-rules' is pinned; only the user can change or remove it, with /pin."
    )
    assert removed == "Removed block 'active-task'."
    assert [slot["key"] for slot in json.loads(one)] == ["safety-rules"]
    assert no_level == (
        "Refused: invalid arguments for sticky_set: level: unknown parameter; sticky_set takes "
        "key, content, priority, pinned, sensitive"
    )
    assert other_name == "Refused: there is no tool named 'pin_set'."
    assert await stored(tmp_path, "console:direct:42") == [
        ("safety-rules", safety, "strong", "pinned")
    ]


async def test_whoami_says_what_each_role_may_do_and_offers_only_missing_roles(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": ["console:group:-100123::u:7"],
            "group_strong_user_ids": [8],
        },
    )
    group = ("--group", "-100123")
    said: dict[str, str] = {}
    for user in ("7", "8", "9"):
        code, out, err = await console(config, ["/whoami"], "--user", user, *group)
        assert code == 0, err
        said[user] = out
    admin, strong, member = said["7"], said["8"], said["9"]
    assert (
        "Pins here: on. You are a shared admin: you may add and change your own strong and "
        "context blocks here, and add, change and remove this group's shared blocks with every "
        "/pin shared command."
    ) in admin
    assert "To make you" not in admin and "::u:" not in admin
    assert (
        "Pins here: on. You are a strong user: you may add and change your own strong and "
        "context blocks here, and view this group's shared blocks (/pin shared list, status and "
        "log). Changing shared blocks needs a shared admin."
    ) in strong
    assert (
        "To make you a shared admin, add one of these to pins.group_shared_admin_ids:\n"
        "  in every enabled group: 8\n"
        "  in this group only: console:group:-100123::u:8"
    ) in strong
    assert "pins.group_strong_user_ids" not in strong
    assert (
        "Pins here: on. You are a member: you may add and change your own context blocks here, "
        "remove or clear any of your own, and view this group's shared blocks (/pin shared "
        "list, status and log). Strong blocks need a strong user or a shared admin."
    ) in member
    assert (
        "To make you a shared admin, add one of these to pins.group_shared_admin_ids (for a "
        "strong user, to pins.group_strong_user_ids):\n"
        "  in every enabled group: 9\n"
        "  in this group only: console:group:-100123::u:9"
    ) in member
    code, out, _ = await console(config, ["/whoami"], "--user", "9")
    assert "You are a DM user: you may add, change and remove your own blocks here" in out
    assert "To make you" not in out


# --- proposals (issue 30) ----------------------------------------------------------------------


async def test_the_model_proposes_and_an_admin_approves_or_rejects_at_the_console(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_CONSOLE_KEY",
        "system_prompt": "",
        "max_retries": 0,
        "agent_tools": True,
    }
    pins = {"enable_in_group": True, "group_shared_admin_ids": ["7"], "max_pending_proposals": 2}
    config = write_config(tmp_path, llm=llm, pins=pins)
    group = ["--group", "-100", "--user"]
    env = {"PINBOT_CONSOLE_KEY": "k"}
    propose = {"label": "deadline", "content": "Release on Friday.", "reason": "agreed today"}
    fake_openai.script = [
        tool_calls(
            ("pin_propose", propose),
            ("pin_propose", {"label": "style", "content": "Use British spelling."}),
            ("pin_propose", {"label": "third", "content": "One too many."}),
            ("pin_propose", {"label": "bad label", "content": "x"}),
        ),
        completion("I proposed it."),
    ]
    code, out, err = await console(config, ["Let's keep the deadline"], *group, "42", env=env)
    assert code == 0, err
    assert "[message 1] Proposal #1 for this group's shared blocks:" in out
    assert "New block 'deadline':\nRelease on Friday.\nReason: agreed today" in out
    assert out.rstrip().endswith("I proposed it.")
    offered = [tool["function"]["name"] for tool in fake_openai.requests[0]["tools"]]
    assert offered == ["pin_set", "pin_get", "pin_delete", "pin_propose"]
    results = tool_results(fake_openai.requests[1])
    assert results[0].startswith("Proposal #1 is posted in the group and waits")
    assert "already has 2 pending proposals" in results[2]
    assert results[3].startswith("Refused: A label cannot contain spaces")
    assert await stored(tmp_path, "console:group:-100") == []  # nothing until an admin decides
    # A member sees the proposals but may not decide; the admin approves one, rejects the other.
    code, out, err = await console(
        config,
        ["/pin shared proposals", "/pin shared approve 1"],
        *group,
        "42",
        env=env,
    )
    assert "#1 add 'deadline': Release on Friday. Reason: agreed today (expires in 24 h)" in out
    assert "Only shared admins may change this group's shared blocks" in out
    code, out, err = await console(
        config,
        ["/pin shared approve 1", "/pin shared approve 1", "/pin shared reject 2", "/pin undo"],
        *group,
        "7",
        env=env,
    )
    assert code == 0, err
    assert "Approved proposal #1. Saved context block 'deadline'." in out
    assert "Proposal #1 was approved already." in out
    assert "Rejected proposal #2; nothing changed." in out
    assert await stored(tmp_path, "console:group:-100") == [
        ("deadline", "Release on Friday.", "context", "active")
    ]
    async with await open_test_store(tmp_path) as store:
        (version,) = await store.versions("console:group:-100", "deadline")
        assert version.actor == "7" and version.channel.value == "proposal"
        assert version.origin is not None and version.origin.proposal == 1
        (entry,) = await store.audit_log("console:group:-100", 5)
        assert entry.actor == "7" and entry.origin is not None and entry.origin.proposal == 1
    code, out, err = await console(config, ["/pin shared undo"], *group, "7", env=env)
    assert "Undid add" in out and "'deadline'" in out
    assert await stored(tmp_path, "console:group:-100") == []


async def test_metrics_listen_on_a_command_that_serves_none_is_said(tmp_path: Path) -> None:
    config = write_config(tmp_path, metrics={"listen": "127.0.0.1:0"})
    code, out, err = await console(config, ["/pin list"], "--user", "5")
    assert code == 0 and "You have no blocks" in out
    assert "metrics.listen is set, but this command serves no metrics" in err
    assert len(err.strip().splitlines()) == 1
