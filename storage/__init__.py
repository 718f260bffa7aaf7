"""pinbot's storage: one store over SQLite (one process) or PostgreSQL (several), written once.
Everything outside this package uses `Store` (or the narrower contracts of storage.contract)
and the exceptions of storage.errors; no driver's exception leaves it."""

from __future__ import annotations

from pathlib import Path

from storage.store import Store


async def open_store(*, path: str | Path, url: str | None = None) -> Store:
    """The PostgreSQL store at url when one is given, else the SQLite database at path; either
    migrated to the latest schema."""
    return await Store.open(path, url=url)


__all__ = ["Store", "open_store"]
