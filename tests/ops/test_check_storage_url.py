"""`pinbot check-config` reads a storage URL exactly as the store does (asyncpg's own parser):
what it passes every command can connect with, what it refuses every command refuses, the part
at fault named and the password never printed (issue 36, finding 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from storage import Store
from storage.errors import Unavailable
from tests.pg import PgCluster, fresh_database
from tests.process import run_pinbot_here

VARIABLE = "PINBOT_TEST_DB"
SECRETS = ("AlphaQ", "BravoR")


def config(folder: Path) -> Path:
    path = folder / "pg.yaml"
    storage = {"url_env": VARIABLE, "path": str(folder / "stray.sqlite3")}
    path.write_text(yaml.safe_dump({"storage": storage}), encoding="utf-8")
    return path


async def verdicts(pg: Path, url: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """(check-config's exit status and output, migrate's exit status and output) for url."""
    env = {VARIABLE: url}
    checked, out, err = await run_pinbot_here("check-config", "--config", str(pg), env=env)
    migrated, out2, err2 = await run_pinbot_here("migrate", "--config", str(pg), env=env)
    return (checked, out + err), (migrated, out2 + err2)


async def test_an_unencoded_at_in_the_password_is_refused_by_both_and_never_printed(
    tmp_path: Path,
) -> None:
    pg = config(tmp_path)
    url = "postgresql://postgres:AlphaQ@BravoR@host/db"
    (checked, said), (migrated, told) = await verdicts(pg, url)
    assert checked == 1 and "configuration ok" not in said, said
    assert f"storage.url_env: ${VARIABLE}: the password holds an @" in said and "%40" in said
    assert migrated == 2 and "the password holds an @" in told and "%40" in told, told
    assert not any(secret in said + told for secret in SECRETS)
    assert not (tmp_path / "stray.sqlite3").exists()


async def test_an_unencoded_at_in_the_user_name_is_named_as_such(tmp_path: Path) -> None:
    (checked, said), (migrated, told) = await verdicts(
        config(tmp_path), "postgresql://AlphaQ@BravoR:pw@host/db"
    )
    assert checked == 1 and "the user name holds an @" in said, said
    assert migrated == 2 and "the user name holds an @" in told, told
    assert not any(secret in said + told for secret in SECRETS)


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("postgresql://u:AlphaQ@h1,,h2/db", "a host in the list of hosts is empty"),
        ("postgresql://u:AlphaQ@127.0.0.1:0/db", "the port after the host is not a number"),
        ("postgresql://u:AlphaQ@127.0.0.1:99999/db", "the port after the host is not a number"),
        ("postgresql://u:AlphaQ@127.0.0.1/db?sslmode=bogus", "`sslmode` parameter must be one"),
        ("postgresql://u:AlphaQ@127.0.0.1/db?password", "the query after ? is not name=value"),
        ("postgresql://u:AlphaQ@[::1/db", "the host is not a host name or address"),
    ],
)
async def test_what_asyncpg_cannot_use_is_refused_by_both_naming_the_part(
    tmp_path: Path, url: str, part: str
) -> None:
    (checked, said), (migrated, told) = await verdicts(config(tmp_path), url)
    assert checked == 1 and part in said, said
    assert migrated == 2 and part in told, told
    assert "AlphaQ" not in said + told


async def test_what_check_config_passes_a_command_connects_with(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    pg = config(tmp_path)
    url = await fresh_database(pg_cluster)  # postgresql://postgres@127.0.0.1:PORT/NAME
    host_and_db = url.partition("@")[2]
    for good in (
        f"postgresql://postgres:AlphaQ%40BravoR@{host_and_db}",  # the @ percent-encoded
        f"postgresql://postgres:AlphaQ:BravoR@{host_and_db}",  # a colon needs no encoding
        f"postgres://postgres:AlphaQ%2FBravoR@{host_and_db}?sslmode=disable",
    ):
        (checked, said), (migrated, told) = await verdicts(pg, good)
        assert checked == 0 and "configuration ok" in said, said
        assert migrated == 0, told
        assert not any(secret in said + told for secret in SECRETS)
    assert not (tmp_path / "stray.sqlite3").exists()


async def test_the_store_itself_refuses_the_url_before_connecting() -> None:
    with pytest.raises(Unavailable, match="the password holds an @") as refused:
        await Store.open(url="postgresql://postgres:AlphaQ@BravoR@127.0.0.1:1/db")
    assert not any(secret in str(refused.value) for secret in SECRETS)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@host/db?application_name=a@b",  # an @ in the query is not the password's
        "postgresql://u:p@host/db#x@y",
        "postgresql://u:p%40w@host/db",
    ],
)
def test_an_at_after_the_host_or_an_encoded_one_is_no_problem(url: str) -> None:
    from storage.dialect import url_problem

    assert url_problem(url) is None
