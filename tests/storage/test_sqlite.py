"""What only the SQLite backend does: WAL, owner-only files, one process, and model-call counts
written behind (not on the hot path)."""

from __future__ import annotations

import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

from storage import Store
from storage.schema import LATEST

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_opens_empty_file_at_latest_schema_in_wal_mode_for_its_owner_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fresh.sqlite3"
    async with await Store.open(path):
        pass
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == LATEST
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"blocks", "scope_calls", "history", "shared_audit", "usage", "inbox"} <= tables
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_counted_calls_reach_the_disk_with_the_turn_and_on_close(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite3"

    def on_disk() -> dict[str, int]:
        with sqlite3.connect(path) as raw:
            return dict(raw.execute("SELECT scope, calls FROM scope_calls").fetchall())

    store = await Store.open(path)
    await store.start_model_call(["s"])
    assert on_disk() == {}  # not yet written: the hot path makes no write
    await store.append_turn("s", "hi", "hello", now=NOW)
    assert on_disk() == {"s": 1}
    await store.start_model_call(["s", "t"])
    await store.close()
    assert on_disk() == {"s": 2, "t": 1}
    async with await Store.open(path) as store:
        assert await store.integrity_ok()
