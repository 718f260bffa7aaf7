"""`pinbot check-config` (its main, in this process): each problem printed with its key, and the
exit status."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from storage.schema import LATEST
from tests.pg import PgCluster, fresh_database
from tests.process import run_pinbot_here


async def check(
    tmp_path: Path, settings: dict[str, Any], *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    unset: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("TELEGRAM_", "FEISHU_", "OPENAI_"))
    }
    code, out, err = await run_pinbot_here(
        "check-config", "--config", str(config), *args, env={**unset, **(env or {})}
    )
    return code, out + err


async def test_a_good_configuration(tmp_path: Path) -> None:
    code, out = await check(tmp_path, {"storage": {"path": str(tmp_path / "db.sqlite3")}})
    assert code == 0 and "configuration ok" in out


async def test_every_problem_is_named_with_its_key(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    settings = {
        "storage": {"path": str(locked / "sub" / "db.sqlite3")},
        "llm": {
            "backend": "openai",
            "api_key_env": "PINBOT_CHECK_KEY",
            "models": {"fast": {"model": "fast-1", "api_key_env": "PINBOT_FAST_KEY"}},
        },
        "pins": {
            "group_shared_admin_ids": ["telegram:direct:5::u:1", 7],
            "group_strong_user_ids": ["a:b"],
            "group_whitelist": ["x:y"],
        },
        "telegram": {"mode": "webhook"},
        "feishu": {"app_id": "cli_1"},
    }
    code, out = await check(tmp_path, settings, "--platform", "telegram")
    locked.chmod(0o700)
    assert code == 1
    for key in (
        "llm.api_key_env: the environment variable PINBOT_CHECK_KEY",
        "llm.models.fast.api_key_env: the environment variable PINBOT_FAST_KEY",
        "pins.group_shared_admin_ids: 'telegram:direct:5::u:1'",
        "pins.group_strong_user_ids: 'a:b'",
        "pins.group_whitelist: 'x:y'",
        "telegram.token_env",
        "telegram.webhook_url",
        "telegram.webhook_secret_env",
        "feishu.app_secret_env",
        "feishu.verification_token_env",
    ):
        assert key in out, key
    if os.geteuid() != 0:  # root may write anywhere
        assert "storage.path" in out
    code, out = await check(
        tmp_path,
        settings,
        env={
            "PINBOT_CHECK_KEY": "k",
            "PINBOT_FAST_KEY": "f",
            "FEISHU_APP_SECRET": "s",
            "FEISHU_VERIFICATION_TOKEN": "t",
        },
    )
    assert "PINBOT_CHECK_KEY" not in out and "feishu" not in out and "llm.models" not in out


async def test_invalid_yaml_keys_are_reported(tmp_path: Path) -> None:
    code, out = await check(tmp_path, {"pins": {"max_label_lenght": 3}})
    assert code == 2 and "pins.max_label_lenght" in out


async def test_a_bad_header_label_is_refused(tmp_path: Path) -> None:
    code, out = await check(tmp_path, {"pins": {"header_label": "rules [v2]"}})
    assert code == 2 and "pins.header_label: must not contain [ or ]" in out
    code, out = await check(tmp_path, {"pins": {"header_label": "y" * 61}})
    assert code == 2 and "pins.header_label: is 61 characters long; the limit is 60" in out


async def test_access_entries_and_storage_shapes(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    settings = {
        "storage": {"path": str(folder)},
        "access": {
            "allowed_users": ["foo bar", "nope:nope", "42", "telegram:direct:42"],
            "allowed_groups": ["nope:nope", "-100", "telegram:group:-1:topic:3", "a b"],
        },
    }
    code, out = await check(tmp_path, settings)
    assert code == 1
    assert "storage.path:" in out and "is a directory" in out
    assert "access.allowed_users: 'foo bar'" in out and "access.allowed_users: 'nope:nope'" in out
    assert "access.allowed_groups: 'nope:nope'" in out and "access.allowed_groups: 'a b'" in out
    assert out.count("problem: access.") == 4  # 42, telegram:direct:42, -100 and a topic pass
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    settings = {
        "storage": {"path": str(blocker / "db.sqlite3")},
        "access": {"allowed_users": ["42"], "allowed_groups": ["*"]},
    }
    code, out = await check(tmp_path, settings)
    assert code == 1 and "is a file, not a folder" in out
    assert "warning: access.allowed_users is set, but access.allowed_groups lists '*'" in out


async def test_a_web_page_open_to_other_machines_without_a_secure_cookie_is_a_warning(
    tmp_path: Path,
) -> None:
    storage = {"path": str(tmp_path / "db.sqlite3")}
    code, out = await check(tmp_path, {"storage": storage, "web": {"host": "0.0.0.0"}})
    assert code == 0 and "warning: web.host is 0.0.0.0" in out and "web.secure_cookie" in out
    secure = {"host": "0.0.0.0", "secure_cookie": True}
    code, out = await check(tmp_path, {"storage": storage, "web": secure})
    assert code == 0 and "warning" not in out


async def test_a_budget_in_money_for_a_model_without_a_price_is_a_warning(tmp_path: Path) -> None:
    storage = {"path": str(tmp_path / "db.sqlite3")}
    budgets = {"user_daily_cost": 0.5}
    code, out = await check(tmp_path, {"storage": storage, "budgets": budgets})
    assert code == 0 and "warning: a budget is set in money but llm.model (gpt-4o-mini)" in out
    priced = {"models": {"gpt-4o-mini": {"prompt": 0.15, "completion": 0.6}}}
    code, out = await check(tmp_path, {"storage": storage, "budgets": budgets, "pricing": priced})
    assert code == 0 and "warning" not in out
    # A model a group may pick is priced too.
    fast = {"models": {"fast": {"model": "fast-1", "api_key_env": "PINBOT_FAST_KEY"}}}
    settings = {"storage": storage, "budgets": budgets, "pricing": priced, "llm": fast}
    code, out = await check(tmp_path, settings, env={"PINBOT_FAST_KEY": "f"})
    assert code == 0 and "no price in pricing.models: fast (fast-1);" in out


async def test_the_store_is_checked_offline_and_read_online_without_a_write(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    variable = "PINBOT_TEST_DB"
    pg = {"storage": {"url_env": variable, "path": str(tmp_path / "stray.sqlite3")}}
    code, out = await check(tmp_path, pg)
    assert code == 1 and f"storage.url_env: the environment variable {variable} is not set" in out
    for url, reason in (
        ("postgresql://u:Pw/Tail9@127.0.0.1:5432/db", "percent-encode"),
        ("mysql://u:Pw@127.0.0.1/db", "not a postgresql:// URL"),
        ("postgresql://u:Pw@127.0.0.1:port/db", "the port after the host is not a number"),
    ):
        code, out = await check(tmp_path, pg, env={variable: url})
        assert code == 1 and reason in out and "Tail9" not in out, out
    url = await fresh_database(pg_cluster)
    code, out = await check(tmp_path, pg, "--online", env={variable: url})
    assert code == 1
    assert f"storage: schema 0, this release expects {LATEST}: run pinbot migrate" in out
    code, out = await check(tmp_path, pg, "--online", env={variable: url})
    assert f"storage: schema 0, this release expects {LATEST}" in out  # still: nothing migrated
    config = tmp_path / "config.yaml"
    assert (await run_pinbot_here("migrate", "--config", str(config), env={variable: url}))[0] == 0
    code, out = await check(tmp_path, pg, "--online", env={variable: url})
    assert code == 0 and f", schema {LATEST})" in out and "storage: ok (PostgreSQL 1" in out
    away = "postgresql://postgres:Secret9@127.0.0.1:1/nowhere"
    code, out = await check(tmp_path, pg, "--online", env={variable: away})
    assert code == 1 and "storage: failed:" in out and "Secret9" not in out
    assert not (tmp_path / "stray.sqlite3").exists()


async def test_a_sqlite_store_is_read_online_without_being_created_or_migrated(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite3"
    settings = {"storage": {"path": str(path)}}
    code, out = await check(tmp_path, settings, "--online")
    assert code == 0 and "does not exist yet; pinbot creates it on first use" in out
    assert not path.exists()
    shutil.copy(Path(__file__).parents[1] / "storage/fixtures/release-5d1093f.sqlite3", path)
    code, out = await check(tmp_path, settings, "--online")
    assert code == 1 and f"storage: schema 8, this release expects {LATEST}" in out
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 8  # untouched


async def test_the_retention_in_effect_is_printed_with_where_each_comes_from(
    tmp_path: Path,
) -> None:
    storage = {"path": str(tmp_path / "db.sqlite3")}
    code, out = await check(tmp_path, {"storage": storage})
    assert code == 0
    for line in (
        "retention in effect (a daily job removes what is older):",
        "  conversation history              90 days: retention.conversation_days (default)",
        "  block versions                    30 days: pins.history_days (default)",
        "  usage                            400 days: retention.usage_days (default)",
        "  audit trail of shared blocks     180 days: pins.audit_retention_days (default)",
        "  processed updates (inbox)          7 days: retention.inbox_days (default)",
        "  a removed group's data            30 days after the bot was removed: "
        "retention.removed_group_days (default)",
    ):
        assert line in out.splitlines(), line
    settings = {
        "storage": storage,
        "pins": {"history_days": 60, "audit_retention_days": 90},
        "retention": {"versions_days": 14, "inbox_days": 2},
    }
    code, out = await check(tmp_path, settings)
    assert code == 0
    for line in (
        "  block versions                    14 days: retention.versions_days",
        "  audit trail of shared blocks      90 days: pins.audit_retention_days",
        "  processed updates (inbox)          2 days: retention.inbox_days",
        "warning: pins.history_days (60) is replaced by retention.versions_days (14): remove "
        "one of the two",
    ):
        assert line in out.splitlines(), line


async def test_a_database_the_console_could_not_create_is_a_problem_even_for_root(
    tmp_path: Path,
) -> None:
    """Permission bits pass root everywhere, /proc included: the check makes a file where the
    database would go (and removes it), and begins a write in a file that exists."""
    code, out = await check(tmp_path, {"storage": {"path": "/proc/nope/pinbot.sqlite3"}})
    assert code == 1
    assert "storage.path: cannot create /proc/nope/pinbot.sqlite3: /proc takes no new files" in out
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("hello, these are notes\n" * 100, encoding="utf-8")
    code, out = await check(tmp_path, {"storage": {"path": str(not_a_database)}})
    assert code == 1 and f"storage.path: {not_a_database} cannot be written" in out
    assert list(Path("/proc").glob(".pinbot-check-*")) == []


async def test_an_unreachable_postgresql_server_gets_a_next_step(tmp_path: Path) -> None:
    url = "postgresql://pinbot@127.0.0.1:9/pinbot"  # nothing listens on port 9
    code, out = await check(
        tmp_path,
        {"storage": {"url_env": "PINBOT_CHECK_DB"}},
        "--online",
        env={"PINBOT_CHECK_DB": url},
    )
    assert code == 1
    assert "storage: failed:" in out and "Next: check that PostgreSQL runs and listens" in out
    assert "pg_isready" in out
