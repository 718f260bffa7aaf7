"""pinbot's storage: one store contract, two backends (SQLite in one process, PostgreSQL for
several). Everything outside this package uses `Store` and `open_store`."""

from __future__ import annotations

from typing import TypeAlias

from storage.postgres import PostgresStore
from storage.sqlite import Store as SqliteStore

Store: TypeAlias = SqliteStore | PostgresStore


async def open_store(*, path: str, url: str | None = None) -> Store:
    """The PostgreSQL store at url when one is given, else the SQLite database at path; either
    migrated to the latest schema."""
    if url:
        return await PostgresStore.open(url)
    return await SqliteStore.open(path)


__all__ = ["PostgresStore", "SqliteStore", "Store", "open_store"]
