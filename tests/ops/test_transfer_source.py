"""`pinbot transfer` from a SQLite source that is not there is an error, not an empty copy
(issue 36, finding 8)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.process import run_pinbot_here

DOCUMENT = {"scopes": {"telegram:direct:42": {"blocks": [{"label": "tone", "content": "Brief."}]}}}


def sqlite_config(folder: Path, name: str, database: Path) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({"storage": {"path": str(database)}}), encoding="utf-8")
    return path


async def test_a_missing_source_exits_2_naming_it_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "pins.sqlite3"
    target = tmp_path / "target.sqlite3"
    source_config = sqlite_config(tmp_path, "from.yaml", missing)
    target_config = sqlite_config(tmp_path, "to.yaml", target)
    code, out, err = await run_pinbot_here(
        "transfer", "--from-config", str(source_config), "--to-config", str(target_config)
    )
    assert code == 2 and out == "", (out, err)
    assert len(err.splitlines()) == 1
    assert f"storage.path of {source_config}" in err and str(missing) in err
    assert "does not exist" in err and "nothing was copied" in err
    assert not missing.parent.exists() and not target.exists()


async def test_a_directory_as_the_source_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    code, out, err = await run_pinbot_here(
        "transfer",
        "--from-config",
        str(sqlite_config(tmp_path, "from.yaml", folder)),
        "--to-config",
        str(sqlite_config(tmp_path, "to.yaml", tmp_path / "target.sqlite3")),
    )
    assert code == 2 and out == "" and "is a directory, not a database file" in err, err
    assert not (tmp_path / "target.sqlite3").exists()


async def test_an_existing_source_is_still_copied(tmp_path: Path) -> None:
    source = sqlite_config(tmp_path, "from.yaml", tmp_path / "source.sqlite3")
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    code, _, err = await run_pinbot_here("import", str(blocks), "--config", str(source))
    assert code == 0, err
    target = sqlite_config(tmp_path, "to.yaml", tmp_path / "target.sqlite3")
    code, out, err = await run_pinbot_here(
        "transfer", "--from-config", str(source), "--to-config", str(target)
    )
    assert code == 0 and "copied 1 blocks" in out, (out, err)
