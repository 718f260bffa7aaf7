"""PostgreSQL as users and operators meet it: `pinbot console` on a real server, `pinbot
migrate`, `pinbot transfer` SQLite → PostgreSQL → SQLite, and the URL's password in no output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from storage.schema import LATEST
from tests.pg import PgCluster, fresh_database
from tests.process import run_pinbot_here

PASSWORD = "pg-secret-password-0000"


def config(folder: Path, name: str, level: str = "info", **storage: Any) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"storage": storage, "logging": {"level": level}}), encoding="utf-8"
    )
    return path


async def test_the_console_on_postgresql(tmp_path: Path, pg_cluster: PgCluster) -> None:
    url = (await fresh_database(pg_cluster)).replace("postgres@", f"postgres:{PASSWORD}@")
    pg = config(tmp_path, "pg", level="debug", url_env="PINBOT_TEST_DB")  # even at debug
    env = {"PINBOT_TEST_DB": url}
    lines = b"/pin add tone Be brief.\nhello\n/pin list\n"
    code, out, err = await run_pinbot_here(
        "console", "--user", "1", "--config", str(pg), stdin=lines, env=env
    )
    assert code == 0, err
    assert "pinned blocks: tone (strong, personal)" in out and "1. tone (strong, active)" in out
    assert not (tmp_path / "pins.sqlite3").exists()  # nothing went to SQLite
    code, out, err = await run_pinbot_here("migrate", "--config", str(pg), env=env)
    assert code == 0 and f"PostgreSQL: schema version {LATEST}, up to date" in out
    for output in (out, err):
        assert PASSWORD not in output and url not in output


async def test_url_env_set_but_empty_is_an_error_never_sqlite(tmp_path: Path) -> None:
    pg = config(tmp_path, "pg", url_env="PINBOT_TEST_DB", path=str(tmp_path / "x.sqlite3"))
    code, out, err = await run_pinbot_here(
        "console", "--user", "1", "--config", str(pg), stdin=b"hi\n", env={"PINBOT_TEST_DB": ""}
    )
    assert code == 2 and out == "" and "PINBOT_TEST_DB" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.sqlite3").exists()


async def test_an_unreachable_server_is_one_line_without_the_password(tmp_path: Path) -> None:
    pg = config(tmp_path, "pg", url_env="PINBOT_TEST_DB")
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/nowhere"
    code, out, err = await run_pinbot_here(
        "migrate", "--config", str(pg), env={"PINBOT_TEST_DB": url}
    )
    assert code == 2 and "cannot connect to the PostgreSQL server" in err
    assert PASSWORD not in out + err and "Traceback" not in err


async def test_transfer_round_trip_gives_identical_exports(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    first = config(tmp_path, "first", path=str(tmp_path / "first.sqlite3"))
    pg = config(tmp_path, "pg", url_env="PINBOT_TEST_DB")
    back = config(tmp_path, "back", path=str(tmp_path / "back.sqlite3"))
    env = {"PINBOT_TEST_DB": await fresh_database(pg_cluster)}
    lines = (
        "/pin add tone Be brief.\n/pin add-context notes Reference 项目 --priority 5\n"
        "/pin idle notes\nhello\nsecond message\n"
    ).encode()
    await run_pinbot_here("console", "--user", "1", "--config", str(first), stdin=lines)
    await run_pinbot_here(
        "console", "--user", "2", "--group", "-7", "--config", str(first), stdin=b"hi\n"
    )
    for source, target in ((first, pg), (pg, back)):
        code, out, err = await run_pinbot_here(
            "transfer", "--from-config", str(source), "--to-config", str(target), env=env
        )
        assert code == 0, err
        assert "copied 2 blocks" in out and "6 history" in out and "2 usage" in out
    exports = []
    for source in (first, pg, back):
        code, out, err = await run_pinbot_here("export", "--config", str(source), env=env)
        assert code == 0, err
        document = json.loads(out)
        document.pop("exported_at")
        exports.append(document)
    assert exports[0] == exports[1] == exports[2]
    code, _, err = await run_pinbot_here(
        "transfer", "--from-config", str(first), "--to-config", str(back)
    )
    assert code == 2 and "not empty" in err  # never over data
