"""What an operator is promised at the command line: every subcommand on the configured
backend (never a stray SQLite file), a URL's password in no output however it is written, an
import with a repeated key refused, and an impossible bot token a configuration error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from storage import Store
from tests.pg import PgCluster, fresh_database
from tests.process import run_pinbot_here

VARIABLE = "PINBOT_TEST_DB"
DOCUMENT = {"scopes": {"telegram:direct:42": {"blocks": [{"label": "tone", "content": "Brief."}]}}}


def config(folder: Path, **sections: Any) -> Path:
    path = folder / "pg.yaml"
    sections.setdefault("storage", {"url_env": VARIABLE, "path": str(folder / "stray.sqlite3")})
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


async def test_every_subcommand_uses_postgresql_when_configured(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    pg, url = config(tmp_path), await fresh_database(pg_cluster)
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    env = {VARIABLE: url}
    code, out, err = await run_pinbot_here(
        "import", str(blocks), "--config", str(pg), "--dry-run", env=env
    )
    assert code == 0, err
    assert "telegram:direct:42: add tone" in out and "nothing was written" in out
    code, out, err = await run_pinbot_here("import", str(blocks), "--config", str(pg), env=env)
    assert code == 0 and "imported 1 block(s)" in out, err
    async with await Store.open(url=url) as store:
        assert [b.content for b in await store.blocks(["telegram:direct:42"])] == ["Brief."]
    code, out, _ = await run_pinbot_here("export", "--config", str(pg), env=env)
    assert code == 0
    assert json.loads(out)["scopes"]["telegram:direct:42"]["blocks"][0]["label"] == "tone"
    blocks.write_text(out, encoding="utf-8")  # what PostgreSQL holds, times and all
    code, out, err = await run_pinbot_here(
        "import", str(blocks), "--config", str(pg), "--dry-run", env=env
    )
    assert code == 0 and "no changes" in out, err  # compared against PostgreSQL
    for args in (("usage", "--json"), ("migrate",)):
        code, _, err = await run_pinbot_here(*args, "--config", str(pg), env=env)
        assert code == 0, err
    assert not (tmp_path / "stray.sqlite3").exists()


async def test_an_unset_variable_or_a_server_away_is_one_line_and_no_sqlite_file(
    tmp_path: Path,
) -> None:
    pg = config(tmp_path)
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    away = "postgresql://postgres:secret-pw@127.0.0.1:1/nowhere"
    for env in ({}, {VARIABLE: away}):
        for args in (
            ("import", str(blocks)),
            ("import", str(blocks), "--dry-run"),
            ("export",),
            ("usage",),
            ("migrate",),
        ):
            code, out, err = await run_pinbot_here(*args, "--config", str(pg), env=env)
            assert code == 2 and len(err.splitlines()) == 1, (args, env, err)
            assert VARIABLE in err and "secret-pw" not in out + err
    assert not (tmp_path / "stray.sqlite3").exists()


async def test_a_password_with_reserved_characters_is_named_never_printed(tmp_path: Path) -> None:
    pg = config(tmp_path)
    for password in ("Pw/Slash", "Pw#Hash9", "Pw?Query", "Pw[Open"):
        url = f"postgresql://postgres:{password}Tail9@127.0.0.1:5432/db"
        code, out, err = await run_pinbot_here("migrate", "--config", str(pg), env={VARIABLE: url})
        assert code == 2 and len(err.splitlines()) == 1, err
        assert VARIABLE in err and "percent-encode" in err
        assert "Tail9" not in out + err and password not in out + err
        code, out, err = await run_pinbot_here(
            "check-config", "--config", str(pg), env={VARIABLE: url}
        )
        assert code == 1 and "percent-encode" in out and "Tail9" not in out + err
    code, out, err = await run_pinbot_here(
        "migrate", "--config", str(pg), env={VARIABLE: "mysql://u:Secret7@h/db"}
    )
    assert code == 2 and "postgresql://" in err and "Secret7" not in out + err


async def test_an_import_with_a_repeated_key_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    sqlite = tmp_path / "sqlite.yaml"
    sqlite.write_text(yaml.safe_dump({"storage": {"path": str(tmp_path / "db.sqlite3")}}))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    assert (await run_pinbot_here("import", str(good), "--config", str(sqlite)))[0] == 0
    scope = '{"blocks": [{"label": "x", "content": "y"}]}'
    twice = f'"telegram:direct:42": {scope}, "telegram:direct:42": {{"blocks": []}}'
    for text, key in (
        ('{"scopes": {' + twice + "}}", "telegram:direct:42"),
        (
            '{"scopes": {"telegram:direct:42": {"blocks": [], "blocks": []}}}',
            "blocks",
        ),
    ):
        bad = tmp_path / "bad.json"
        bad.write_text(text, encoding="utf-8")
        code, out, _ = await run_pinbot_here("import", str(bad), "--config", str(sqlite))
        assert code == 1 and f"the key {key!r} appears more than once" in out
        assert "nothing was imported" in out
    code, out, _ = await run_pinbot_here("export", "--config", str(sqlite))
    assert json.loads(out)["scopes"]["telegram:direct:42"]["blocks"][0]["content"] == "Brief."


async def test_an_impossible_bot_token_is_a_configuration_error(tmp_path: Path) -> None:
    settings = tmp_path / "tg.yaml"
    settings.write_text(yaml.safe_dump({"storage": {"path": str(tmp_path / "db.sqlite3")}}))
    for token in ("123456:ABCdef\nghiJKL", "123456:ABC def", "not-a-token"):
        env = {"TELEGRAM_BOT_TOKEN": token}
        code, out, err = await run_pinbot_here("telegram", "--config", str(settings), env=env)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert "TELEGRAM_BOT_TOKEN" in err and "@BotFather" in err
        assert "ABCdef" not in out + err and "ABC def" not in out + err
        code, out, err = await run_pinbot_here(
            "check-config", "--config", str(settings), "--platform", "telegram", env=env
        )
        assert code == 1 and "telegram.token_env" in out and "ABC" not in out + err
