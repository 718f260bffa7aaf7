"""Safe to run for real, through the `pinbot` command (its main in this process; a real process
where a signal stops it): every start-up failure ends with one line naming what to fix (exit 2)
or is retried with one warning line, no secret appears in any output, check-config --online asks
the servers, and a first run is guided."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FEISHU_IN_PROCESS
from tests.fakes.feishu_server import APP_ID, APP_SECRET, FakeFeishu
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.process import PINBOT, run_pinbot, run_pinbot_here

LLM_KEY = "sk-live-secret-key-0123456789"
SECRETS = (TOKEN, TOKEN.split(":")[1], LLM_KEY, APP_SECRET)


def config_file(tmp_path: Path, **sections: Any) -> Path:
    sections.setdefault("storage", {"path": str(tmp_path / "pins.sqlite3")})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


def problems(err: str) -> list[str]:
    """stderr's lines but the one saying which database is in use (logged at start)."""
    return [line for line in err.strip().splitlines() if " database: " not in line]


def assert_one_clean_line(out: str, err: str, *needles: str) -> None:
    """One line on stderr naming what to fix (beside which database is in use); no traceback,
    no secret anywhere."""
    assert out == ""
    assert len(problems(err)) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    for secret in SECRETS:
        assert secret not in out + err


async def test_a_rejected_token(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    config = config_file(tmp_path, telegram={"base_url": fake_telegram.base_url})
    wrong = "123456:WRONG-TOKEN-SECRET"
    code, out, err = await run_pinbot_here(
        "telegram", "--config", str(config), env={"TELEGRAM_BOT_TOKEN": wrong}
    )
    assert code == 2
    assert_one_clean_line(out, err, "rejected the bot token", "$TELEGRAM_BOT_TOKEN")
    assert wrong not in err and "WRONG-TOKEN-SECRET" not in err


async def test_a_wrong_base_url(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    base = f"http://127.0.0.1:{fake_telegram.port}/not-the-api/bot"
    config = config_file(tmp_path, telegram={"base_url": base})
    code, out, err = await run_pinbot_here(
        "telegram", "--config", str(config), env={"TELEGRAM_BOT_TOKEN": TOKEN}
    )
    assert code == 2
    assert_one_clean_line(out, err, "telegram.base_url", "does not answer like the Telegram")


@pytest.mark.parametrize(
    ("sections", "needles"),
    [
        ({"telegram": {"base_url": "http://127.0.0.1:1/"}}, ["telegram.base_url", "/bot"]),
        ({"llm": {"base_url": "localhost:8000/v1"}}, ["llm.base_url", "http"]),
        ({"telegram": {"token_env": TOKEN}}, ["telegram.token_env", "looks like the secret"]),
        ({"llm": {"api_key_env": LLM_KEY}}, ["llm.api_key_env", "looks like the secret"]),
        ({"telegram": {"token": "x"}}, ["telegram.token", "did you mean telegram.token_env"]),
    ],
)
async def test_config_shapes_that_cannot_work(
    tmp_path: Path, sections: dict[str, Any], needles: list[str]
) -> None:
    config = config_file(tmp_path, **sections)
    for command in ("telegram", "check-config"):
        code, out, err = await run_pinbot_here(command, "--config", str(config))
        assert code == 2
        assert_one_clean_line(out, err, *needles)


async def test_a_missing_config_file_and_an_unwritable_database(tmp_path: Path) -> None:
    code, out, err = await run_pinbot_here(
        "console", "--user", "1", "--config", str(tmp_path / "no.yaml")
    )
    assert code == 2
    assert_one_clean_line(out, err, "no.yaml")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    config = config_file(tmp_path, storage={"path": str(blocker / "pins.sqlite3")})
    code, out, err = await run_pinbot_here("console", "--user", "1", "--config", str(config))
    assert code == 2
    assert_one_clean_line(out, err, "storage.path", "cannot open the database")


async def test_a_port_in_use(tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_file(
            tmp_path,
            telegram={
                "base_url": fake_telegram.base_url,
                "mode": "webhook",
                "webhook_port": port,
                "webhook_url": "https://example.invalid/telegram",
            },
        )
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": "hook-secret"}
        code, out, err = await run_pinbot_here("telegram", "--config", str(config), env=env)
    assert code == 2
    assert_one_clean_line(out, err, "telegram.webhook_port", "choose a free port")


async def test_an_unreachable_server_is_retried_with_one_line_each(tmp_path: Path) -> None:
    config = config_file(tmp_path, telegram={"base_url": f"http://127.0.0.1:{free_port()}/bot"})
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        "telegram",
        "--config",
        str(config),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN},
    )
    assert process.stderr is not None
    first = await asyncio.wait_for(process.stderr.readline(), 30)
    if b" database: " in first:  # logged at start: the problem is the next line
        first += await asyncio.wait_for(process.stderr.readline(), 30)
    process.send_signal(signal.SIGTERM)  # a start that keeps retrying still stops on a signal
    rest = await asyncio.wait_for(process.stderr.read(), 30)
    await process.wait()
    err = (first + rest).decode()
    assert process.returncode == 0
    assert "cannot reach Telegram at telegram.base_url" in err and "retrying in" in err
    assert "Traceback" not in err and TOKEN not in err


@FEISHU_IN_PROCESS  # it starts a Feishu frontend in this process
async def test_feishu_credentials_rejected(tmp_path: Path, fake_feishu: FakeFeishu) -> None:
    config = config_file(
        tmp_path,
        feishu={"app_id": APP_ID, "base_url": fake_feishu.base_url, "webhook_port": free_port()},
    )
    env = {"FEISHU_APP_SECRET": "not-the-secret-0000", "FEISHU_VERIFICATION_TOKEN": "verify-0000"}
    code, out, err = await run_pinbot_here("feishu", "--config", str(config), env=env)
    assert code == 2
    assert_one_clean_line(out, err, "refused the app credentials", "$FEISHU_APP_SECRET")
    assert "not-the-secret-0000" not in err


async def test_check_config_online(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    fake_feishu: FakeFeishu,
) -> None:
    fake_openai.api_key = LLM_KEY
    llm = {"backend": "openai", "base_url": fake_openai.base_url, "model": "fake-model"}
    feishu = {"app_id": APP_ID, "base_url": fake_feishu.base_url}
    config = config_file(
        tmp_path, telegram={"base_url": fake_telegram.base_url}, llm=llm, feishu=feishu
    )
    good = {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "OPENAI_API_KEY": LLM_KEY,
        "FEISHU_APP_SECRET": APP_SECRET,
        "FEISHU_VERIFICATION_TOKEN": "verify-token-0000",
    }

    async def check(env: dict[str, str], path: Path = config) -> tuple[int, dict[str, str], str]:
        code, out, err = await run_pinbot_here(
            "check-config", "--online", "--config", str(path), env=env
        )
        for secret in SECRETS:
            assert secret not in out + err
        lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        return code, lines, out

    code, lines, out = await check(good)
    assert code == 0, out
    assert lines["telegram"] == "ok (@pin_bot)" and lines["llm"] == "ok" and lines["feishu"] == "ok"
    code, lines, _ = await check({**good, "TELEGRAM_BOT_TOKEN": "1:WRONG"})
    assert code == 1 and lines["telegram"].startswith("failed: 404 Not Found")
    code, lines, _ = await check({**good, "OPENAI_API_KEY": "sk-wrong-0000"})
    assert code == 1 and lines["llm"] == "failed: 401 Incorrect API key provided"
    code, lines, _ = await check({**good, "FEISHU_APP_SECRET": "wrong"})
    assert code == 1 and lines["feishu"].startswith("failed: 200 app secret invalid")
    (tmp_path / "other").mkdir()
    missing = config_file(
        tmp_path / "other",
        telegram={"base_url": fake_telegram.base_url},
        llm={**llm, "model": "gpt-9"},
    )
    code, lines, _ = await check({"OPENAI_API_KEY": LLM_KEY, "TELEGRAM_BOT_TOKEN": ""}, missing)
    assert code == 1
    assert (
        lines["llm"] == "failed: the server does not list llm.model 'gpt-9' (it lists: fake-model)"
    )
    assert lines["telegram"] == "not configured" and lines["feishu"] == "not configured"
    fake_openai.models = None  # a server without GET /models: the probe's calls tell as much
    code, lines, _ = await check(good)
    assert code == 0 and lines["llm"] == "ok"
    assert {what: found for what, found in lines.items() if what.startswith("llm ")} == {
        "llm completion limit": "max_completion_tokens",
        "llm usage in streams": "yes",
        "llm cached tokens": "not reported",
        "llm tools": "yes",
        "llm context window": "not stated",
    }
    # a server that ignores max_completion_tokens, takes no stream_options and refuses tools
    fake_openai.respond = lambda body: completion("13, 14, 15, 16, 17, 18, 19, 20, 21, 22")
    fake_openai.reject_stream_options = True
    fake_openai.refuse = {"tools": "This model does not support tools"}
    code, lines, out = await check(good)
    assert code == 0, out
    assert lines["llm completion limit"] == (
        "max_tokens (the server ignores max_completion_tokens: it wrote past a limit of 2 tokens)"
    )
    assert lines["llm usage in streams"].startswith("rejected stream_options")
    assert lines["llm tools"].startswith("refused")
    assert fake_openai.requests[-1]["max_tokens"] == 256


async def test_check_config_online_asks_each_llm_models_entrys_server(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Each `llm.models` entry's server is asked as llm's is, under the entry's name: its key,
    its model listed, what it supports; llm on the offline model still names no server."""
    fake_openai.api_key = LLM_KEY
    entry = {"base_url": fake_openai.base_url, "model": "fake-model", "api_key_env": "FAST_KEY"}
    models = {"fast": entry, "missing": {**entry, "model": "gpt-9"}, "keyless": {**entry}}
    models["keyless"]["api_key_env"] = "NO_SUCH_KEY"
    config = config_file(tmp_path, llm={"models": models})
    code, out, err = await run_pinbot_here(
        "check-config", "--online", "--config", str(config), env={"FAST_KEY": LLM_KEY}
    )
    assert LLM_KEY not in out + err
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert code == 1, out
    assert lines["llm"] == "not configured (the offline model needs no server)"
    assert lines["llm.models.fast"] == "ok"
    assert lines["llm.models.fast tools"] == "yes"
    assert lines["llm.models.missing"] == (
        "failed: the server does not list llm.models.missing.model 'gpt-9' (it lists: fake-model)"
    )
    assert lines["llm.models.keyless"] == "not configured"
    code, out, _ = await run_pinbot_here(
        "check-config", "--online", "--config", str(config), env={"FAST_KEY": "sk-wrong-0000"}
    )
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert code == 1 and lines["llm.models.fast"] == "failed: 401 Incorrect API key provided"


async def test_a_first_run_that_guides(tmp_path: Path) -> None:
    code, out, _ = await run_pinbot_here()
    assert code == 0 and "usage: pinbot" in out and "init" in out
    target = tmp_path / "config.yaml"
    code, out, _ = await run_pinbot_here("init", "--config", str(target))
    assert code == 0 and "pinbot console --config" in out and target.exists()
    code, _, err = await run_pinbot_here("init", "--config", str(target))
    assert code == 2 and "--force" in err
    code, out, err = await run_pinbot_here("check-config", "--config", str(target), cwd=tmp_path)
    assert code == 0, out + err
    for command, variable in (("telegram", "TELEGRAM_BOT_TOKEN"), ("feishu", "FEISHU_APP_SECRET")):
        code, out, _ = await run_pinbot_here(command, "--help")
        assert code == 0 and variable in out and "example:" in out
    code, out, err = await run_pinbot_here(
        "console",
        "--user",
        "1",
        "--config",
        str(target),
        env={"PYTHONUNBUFFERED": "1"},
        cwd=tmp_path,  # the starter config's database is ./pinbot.sqlite3, not in the checkout
    )
    assert code == 0 and out == "" and err == ""  # piped: no banner, no prompt, no log lines
    assert (tmp_path / "pinbot.sqlite3").exists()


async def test_init_prints_the_next_steps_as_they_will_run(tmp_path: Path) -> None:
    """From a venv not activated, the steps name the pinbot that ran, not a `pinbot` the shell
    cannot find."""
    bare = {"PATH": "/usr/bin:/bin"}  # the venv's bin folder not on it
    code, out, _ = await run_pinbot("init", "--config", str(tmp_path / "config.yaml"), env=bare)
    assert code == 0
    assert f"  1. Talk to the bot here:  {PINBOT} console --config" in out
    assert f"  3. Run it:                {PINBOT} telegram --config" in out
