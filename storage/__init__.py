"""pinbot's storage: one store over SQLite (one process) or PostgreSQL (several), written once.
Everything outside this package uses `Store` (or the narrower contracts of its concerns) and the
exceptions of storage.errors; no driver's exception leaves it."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from storage import usage_sums
from storage.blocks import BlockStore, BrowseStore, TriggeredBlocks
from storage.buckets import TokenBuckets
from storage.changes import ChangeStore
from storage.decisions import DecisionStore
from storage.delivery import DeliveryStore
from storage.dialect import Database, connect
from storage.history import HistoryStore
from storage.models import StoreCheck
from storage.people import PeopleStore
from storage.retention import RetentionStore
from storage.rows import TABLES, Dump, PendingCalls
from storage.schema import migrate
from storage.search import SearchIndex
from storage.settings import SettingsStore
from storage.usage import UsageStore
from storage.versions import VersionStore

__all__ = ["Store", "open_store"]


class Store(
    BlockStore,
    ChangeStore,
    VersionStore,
    HistoryStore,
    UsageStore,
    DeliveryStore,
    BrowseStore,
    DecisionStore,
    PeopleStore,
    RetentionStore,
    SettingsStore,
):
    """pinbot's data in SQLite (one process) or PostgreSQL (several): blocks per scope,
    model-call counts, history, the audit trail, usage, delivered updates and workers, and the
    groups the bot was removed from."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending_calls = PendingCalls()
        self._triggered = TriggeredBlocks()
        self._buckets = TokenBuckets()
        self._search = SearchIndex(db)
        self._worker = 0

    @classmethod
    async def open(cls, path: str | Path = ":memory:", *, url: str | None = None) -> Self:
        """The PostgreSQL database at url when one is given, else the SQLite file at path
        (created if needed); migrated to the latest schema. Unavailable when it cannot be
        opened or reached, SchemaTooNew when a newer pinbot made it."""
        db = await connect(path=path, url=url)
        try:
            await migrate(db)
        except BaseException:
            await db.close()
            raise
        return cls(db)

    @property
    def kind(self) -> str:
        """ "SQLite" or "PostgreSQL"."""
        return self._db.kind

    async def close(self) -> None:
        """Write pending counts and close; committed data is in the database."""
        try:
            await self.flush_calls()
        finally:
            await self._db.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def schema_version(self) -> int:
        """The number of the last schema step applied."""
        return await self._db.schema_version()

    async def check(self, *, inbox: bool = False) -> StoreCheck:
        """A health check on a connection of the checks' own (see Database.checking): the
        schema version and, with inbox, the updates waiting in this worker's chats. Unavailable
        when the database does not answer; Locked when nothing could be written now. A check
        that hangs is ended by drop_check."""
        async with self._db.checking() as on:
            version = await self._db.schema_version(on)
            if not inbox:
                return StoreCheck(version)
            waiting, oldest = await self.waiting_here(on)
        return StoreCheck(version, waiting, oldest)

    def drop_check(self) -> None:
        """End the health checks' connection now, without waiting on the server; the next
        check opens another."""
        self._db.drop_check()

    async def integrity_ok(self) -> bool:
        """Whether the database checks out."""
        return await self._db.integrity_ok()

    # --- the whole store, for pinbot transfer -------------------------------------------------

    async def dump(self) -> Dump:
        """Every row of every table a transfer copies."""
        await self.flush_calls()
        result: Dump = {}
        for table, (columns, order) in TABLES.items():
            rows = await self._db.fetch(f"SELECT {columns} FROM {table} ORDER BY {order}")
            result[table] = [tuple(row) for row in rows]
        return result

    async def is_empty(self) -> bool:
        """Whether no table a transfer copies holds a row."""
        for table in TABLES:
            if await self._db.fetchrow(f"SELECT 1 FROM {table} LIMIT 1") is not None:
                return False
        return True

    async def load(self, dump: Dump) -> None:
        """Add every row of a dump, in one transaction: a raw copy of every table into an empty
        store, blocks and versions too, not a change through storage.changes (a transfer moves
        a database; a change would add versions, audit entries and times it never had)."""
        async with self._db.transaction() as tx:
            for table, (columns, _) in TABLES.items():
                marks = ", ".join("?" * len(columns.split(",")))
                rows = dump.get(table, [])
                await tx.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
            await usage_sums.rebuild(tx)


async def open_store(*, path: str | Path, url: str | None = None) -> Store:
    """The PostgreSQL store at url when one is given, else the SQLite database at path; either
    migrated to the latest schema."""
    return await Store.open(path, url=url)
