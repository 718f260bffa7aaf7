"""The one place SQLite and PostgreSQL differ: connections, placeholders, transactions and their
locks, column types, the schema version's bookkeeping, how a worker proves it is alive, how the
index of blocks' text is read and kept (TextIndex) and whether rate buckets may live in memory.
What differs in the tables themselves is written side by side in storage.schema's steps, each
dialect picking its own (Database.pick). No driver's exception is caught outside this package.

Statements are written once, with `?` placeholders and `IN (?*)` for a list parameter. Besides
reads and single writes, a `Database` runs atomic batches (`write`: one round trip to SQLite's
thread), chains of statements in one transaction that return their rows (`chain`: the same one
round trip there, one transaction on PostgreSQL) and transactions holding per-scope locks:
PostgreSQL's READ COMMITTED would let two writers both see a scope below its limit, so writes
that a limit guards lock their scope first.

base.py holds what every dialect provides; sqlite.py and postgres.py are the two dialects.
"""

from __future__ import annotations

from pathlib import Path

from storage.dialect.base import Database, Executor, Row, Step
from storage.dialect.postgres import (
    MIGRATION_LOCK,
    SOLE_LOCKS,
    WORKER_LOCKS,
    PostgresDatabase,
    inspect_postgres,
    url_problem,
)
from storage.dialect.sqlite import SqliteDatabase, inspect_sqlite, sqlite_write_problem

__all__ = [
    "MIGRATION_LOCK",
    "SOLE_LOCKS",
    "WORKER_LOCKS",
    "Database",
    "Executor",
    "PostgresDatabase",
    "Row",
    "SqliteDatabase",
    "Step",
    "connect",
    "inspect",
    "sqlite_write_problem",
    "url_problem",
]


async def connect(*, path: str | Path, url: str | None = None) -> Database:
    """The PostgreSQL database at url when one is given, else the SQLite file at path."""
    if url:
        return await PostgresDatabase.open(url)
    return await SqliteDatabase.open(path)


async def inspect(*, path: str | Path, url: str | None = None) -> tuple[str, int | None]:
    """What the configured database is ("PostgreSQL 15.18", "SQLite <path>") and its schema
    version (None: no such file yet), read without writing anything: nothing migrated, no file
    created. Unavailable when it cannot be reached or opened."""
    if url:
        return await inspect_postgres(url)
    return await inspect_sqlite(path)
