"""SQLite through one aiosqlite connection: one process serves the database (a file lock says
so), its writes take turns, and a batch of statements is one hop to the connection's thread."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import aiosqlite

from storage.dialect.base import (
    LIST,
    TRIGRAM,
    TYPES,
    Candidates,
    Database,
    Executor,
    Row,
    Step,
    T,
    TextIndex,
    watched,
)
from storage.errors import Locked, Unavailable, WorkerConflict

PRIVATE_FILE_MODE = 0o600  # the database holds DM blocks and chat history: its owner only
BUSY_TIMEOUT_MS = 5000  # how long a SQLite write waits for another connection's transaction
# How long a health check waits for another connection's write lock: a write that waits longer
# than this is not ready to be served.
CHECK_BUSY_TIMEOUT_MS = 500
WAL_ATTEMPTS = 50
WAL_RETRY_S = 0.01
# Blocks changed since the search index was last brought up to date, each with the text the
# index holds for it (indexed 0: none yet), to take it out again.
_NOTED = "blocks_search_noted"


@functools.lru_cache(maxsize=4096)
def _sqlite_sql(sql: str, sizes: tuple[int, ...]) -> str:
    lists = iter(sizes)  # each `IN (?*)` gets as many placeholders as its list has items
    return LIST.sub(lambda _: f"IN ({','.join('?' * next(lists))})", sql)


def _sqlite_args(sql: str, args: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    if "?*" not in sql:
        return sql, args
    sizes = tuple(len(arg) for arg in args if isinstance(arg, list))
    flat = [item for arg in args for item in (arg if isinstance(arg, list) else [arg])]
    return _sqlite_sql(sql, sizes), flat


_UNAVAILABLE_SQLITE = ("unable to open", "disk i/o", "readonly", "locked", "no such file")


@contextlib.contextmanager
def _sqlite_faults() -> Iterator[None]:
    with watched():
        try:
            yield
        except sqlite3.OperationalError as error:
            if any(part in str(error).casefold() for part in _UNAVAILABLE_SQLITE):
                raise Unavailable(str(error)) from error
            raise


class _SqliteExecutor(Executor):
    _connection: aiosqlite.Connection

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        sql, flat = _sqlite_args(sql, args)
        with _sqlite_faults():
            return list(await self._connection.execute_fetchall(sql, flat))

    async def execute(self, sql: str, *args: Any) -> int:
        sql, flat = _sqlite_args(sql, args)
        with _sqlite_faults():
            cursor = await self._connection.execute(sql, flat)
        return cursor.rowcount

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _sqlite_faults():
            await self._connection.executemany(sql, rows)

    async def attempt(self, sql: str) -> str | None:
        await _SqliteExecutor.execute(self, "SAVEPOINT attempt")
        try:
            await _SqliteExecutor.execute(self, sql)
        except sqlite3.OperationalError as error:
            await _SqliteExecutor.execute(self, "ROLLBACK TO attempt")
            return str(error)
        finally:
            await _SqliteExecutor.execute(self, "RELEASE attempt")
        return None


class SqliteDatabase(_SqliteExecutor, Database):
    """One aiosqlite connection in autocommit mode. Writes take turns on an asyncio lock, so no
    single write lands inside (and is rolled back with) a transaction on the shared connection."""

    async def reclaim(self) -> None:
        """Deleted rows are overwritten as they go (secure_delete, set at connect); here the
        search index merges its segments (a deleted block's terms leave the old ones, whose
        pages are overwritten in turn) and the WAL, which holds the pages as they were before,
        is checkpointed into the file and cut to nothing."""
        if await self.text_index.present():
            await self.execute("INSERT INTO blocks_search (blocks_search) VALUES ('optimize')")
        await self.fetch("PRAGMA wal_checkpoint(TRUNCATE)")

    kind = "SQLite"
    buckets_in_memory = True  # one process serves the file (join holds its lock)
    release_before_reply = True  # and no other worker can take a chat from it
    for_update = ""
    ilike = "LIKE"
    types: ClassVar[dict[str, str]] = {name: both[0] for name, both in TYPES.items()}
    integrity_check = "PRAGMA integrity_check"

    def __init__(self, connection: aiosqlite.Connection, path: Path | None) -> None:
        super().__init__(connection)
        self.path = path
        self._write_lock = asyncio.Lock()
        self._serving: int | None = None  # the descriptor holding the one-server lock
        self._check: aiosqlite.Connection | None = None  # the health checks' own connection
        self.text_index = Fts5Index(self)

    def pick(self, *, sqlite: T, postgres: T) -> T:
        return sqlite

    @classmethod
    async def open(cls, path: str | Path) -> SqliteDatabase:
        """Open (creating if needed) the database file at path, in WAL mode."""
        memory = str(path) == ":memory:"
        try:
            if not memory:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                # SQLite gives the -wal and -shm files the database file's permissions.
                os.close(os.open(path, os.O_CREAT | os.O_RDWR, PRIVATE_FILE_MODE))
                os.chmod(path, PRIVATE_FILE_MODE)
            connection = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise Unavailable(getattr(error, "strerror", None) or str(error)) from error
        try:
            with _sqlite_faults():
                await connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                await cls._use_wal(connection)
                await connection.execute("PRAGMA synchronous = NORMAL")
                await connection.execute("PRAGMA foreign_keys = ON")
                # A deleted row's bytes are overwritten, not left in the file's free space.
                await connection.execute("PRAGMA secure_delete = ON")
        except BaseException:
            await connection.close()
            raise
        return cls(connection, None if memory else Path(path))

    @staticmethod
    async def _use_wal(connection: aiosqlite.Connection) -> None:
        # The switch needs the database to itself and SQLite does not wait for it (busy_timeout
        # does not apply), so processes opening a new file at once take turns.
        for attempt in range(1, WAL_ATTEMPTS + 1):
            try:
                await connection.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or attempt == WAL_ATTEMPTS:
                    raise
                await asyncio.sleep(WAL_RETRY_S * attempt)

    async def execute(self, sql: str, *args: Any) -> int:
        async with self._write_lock:
            return await super().execute(sql, *args)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._write_lock:
            await super().executemany(sql, rows)

    async def returning(self, sql: str, *args: Any) -> list[Row]:
        async with self._write_lock:
            return await self.fetch(sql, *args)

    async def write(self, *steps: Step, lock: Sequence[str] = (), guard: bool = False) -> int:
        async with self._write_lock:
            with _sqlite_faults():
                # One hop to the connection's thread for the whole batch: a round trip there
                # costs more than the statements.
                changed: int = await self._connection._execute(  # type: ignore[no-untyped-call]
                    self._run, steps, guard
                )
        return changed

    async def chain(self, *steps: Step) -> list[list[Row]]:
        async with self._write_lock:
            with _sqlite_faults():
                found: list[list[Row]] = await self._connection._execute(  # type: ignore[no-untyped-call]
                    self._run_chain, steps
                )
        return found

    def _run_chain(self, steps: Sequence[Step]) -> list[list[Row]]:  # in aiosqlite's thread
        raw = self._connection._conn
        found: list[list[Row]] = []
        raw.execute("BEGIN IMMEDIATE")
        try:
            for step in steps:
                found.append(raw.execute(*_sqlite_args(step.sql, step.args)).fetchall())
                if not found[-1]:
                    break
        except BaseException:
            raw.execute("ROLLBACK")
            raise
        raw.execute("COMMIT")
        return found

    def _run(self, steps: Sequence[Step], guard: bool) -> int:  # in aiosqlite's thread
        raw = self._connection._conn

        def run(step: Step) -> int:
            if step.many:
                return int(raw.executemany(step.sql, step.args).rowcount)
            return int(raw.execute(*_sqlite_args(step.sql, step.args)).rowcount)

        if len(steps) == 1 and not steps[0].many:
            return run(steps[0])
        raw.execute("BEGIN IMMEDIATE")
        try:
            first = run(steps[0])
            for step in steps[1:] if first or not guard else ():
                run(step)
        except BaseException:
            raw.execute("ROLLBACK")
            raise
        raw.execute("COMMIT")
        return first

    @contextlib.asynccontextmanager
    async def transaction(self, *locks: str) -> AsyncIterator[Executor]:
        async with self._write_lock:
            with watched():
                tx = _SqliteExecutor(self._connection)
                await tx.execute("BEGIN IMMEDIATE")
                try:
                    yield tx
                except BaseException:
                    await tx.execute("ROLLBACK")
                    raise
                await tx.execute("COMMIT")

    @contextlib.asynccontextmanager
    async def checking(self) -> AsyncIterator[Executor]:
        # WAL lets reads through while another connection holds the write lock, so a check
        # starts a write (and writes nothing): on a connection of its own, so the store's
        # connection and its write turns are left alone.
        if self.path is None:  # in memory: no other connection can lock it
            yield self
            return
        if self._check is None:
            with _sqlite_faults():
                connection = await aiosqlite.connect(self.path, isolation_level=None)
            try:
                with _sqlite_faults():
                    await connection.execute(f"PRAGMA busy_timeout = {CHECK_BUSY_TIMEOUT_MS}")
            except BaseException:
                await connection.close()
                raise
            self._check = connection
        check = _SqliteExecutor(self._check)
        try:
            await check.execute("BEGIN IMMEDIATE")
        except Unavailable as error:
            if "locked" in str(error).casefold():
                raise Locked("another connection holds the database's write lock") from error
            raise
        try:
            yield check
        finally:
            await check.execute("ROLLBACK")

    async def close(self) -> None:
        try:
            if self._check is not None:
                await self._check.close()
            await self._connection.close()
        finally:
            await self.leave()

    async def schema_version(self, on: Executor | None = None) -> int:
        return int(await (on or self).fetchval("PRAGMA user_version"))

    async def set_schema_version(self, on: Executor, number: int) -> None:
        await on.execute(f"PRAGMA user_version = {int(number)}")

    async def join(self, worker: int, sole: str | None) -> None:
        # One process at a time serves a SQLite database, so it holds every sole role.
        if self.path is None or self._serving is not None:
            return
        descriptor = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise WorkerConflict(
                f"another pinbot process is serving the SQLite database {self.path}"
            ) from None
        self._serving = descriptor

    async def leave(self) -> None:
        if self._serving is not None:
            os.close(self._serving)  # releases the one-server lock
            self._serving = None


class Fts5Index(TextIndex):
    """An FTS5 trigram table of the label and content of blocks. Writing it in the transaction
    of every change would cost more than the change (FTS5 writes a segment per transaction), so
    triggers only note each changed block, with the text the index holds for it, and catch_up
    indexes the noted blocks: a periodic job runs it, and so does a search before it reads the
    index. A search reads the noted blocks too, so it never misses a change."""

    async def _readable(self) -> bool:
        try:
            await self._db.fetch("SELECT rowid FROM blocks_search LIMIT 0")
        except sqlite3.OperationalError:  # no such table, or no FTS5 here
            return False
        return True

    async def catch_up(self, batch: int) -> int:
        if not await self.present():
            return 0
        done = 0
        while True:
            async with self._db.transaction() as tx:
                last = await tx.fetchval(
                    f"SELECT MAX(id) FROM (SELECT id FROM {_NOTED} ORDER BY id LIMIT ?)", batch
                )
                if last is None:
                    return done
                await tx.execute(
                    "INSERT INTO blocks_search (blocks_search, rowid, label, content) "
                    f"SELECT 'delete', id, label, content FROM {_NOTED} "
                    "WHERE id <= ? AND indexed = 1",
                    last,
                )
                # Each noted block looked up by id: as a join, SQLite walks every block up to
                # the last noted id and looks for its note.
                await tx.execute(
                    "INSERT INTO blocks_search (rowid, label, content) SELECT id, label, content "
                    f"FROM blocks WHERE id IN (SELECT id FROM {_NOTED} WHERE id <= ?)",
                    last,
                )
                done += await tx.execute(f"DELETE FROM {_NOTED} WHERE id <= ?", last)

    def candidates(self, text: str, matches: tuple[str, list[Any]]) -> Candidates | None:
        """The blocks with every trigram of text, and the blocks noted since the index was
        brought up to date."""
        if len(text) < TRIGRAM or "\x00" in text:  # FTS5 reads its query up to a NUL
            return None
        trigrams = dict.fromkeys(text[i : i + TRIGRAM] for i in range(len(text) - TRIGRAM + 1))
        query = " AND ".join('"' + trigram.replace('"', '""') + '"' for trigram in trigrams)
        lookup = "SELECT rowid FROM blocks_search WHERE blocks_search MATCH ?"
        return (
            f"SELECT (SELECT COUNT(*) FROM ({lookup} LIMIT ?)) + (SELECT COUNT(*) FROM {_NOTED})",
            [query],
            f"id IN ({lookup} UNION ALL SELECT id FROM {_NOTED})",
            [query],
        )

    def missing(self, reason: str, statements: Sequence[str]) -> str:
        return (
            f"this SQLite ({sqlite3.sqlite_version}) has no FTS5 trigram tokenizer ({reason}); "
            "SQLite 3.34 or later with FTS5 has one"
        )


def sqlite_write_problem(path: str | Path) -> str | None:
    """Why this user cannot write the SQLite file at path (it is not a database, it is read
    only, it is locked), proved by beginning a write transaction and rolling it back; None
    when it can."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=2)) as db:
            db.execute("BEGIN IMMEDIATE")  # the write lock a change takes
            db.rollback()
    except sqlite3.Error as error:
        return str(error)
    return None


async def inspect_sqlite(path: str | Path) -> tuple[str, int | None]:
    """What the SQLite file at path is and its schema version (None: no such file yet), read
    without writing anything."""
    if not Path(path).exists():
        return f"SQLite {path}", None
    with _sqlite_faults():
        async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = await db.execute_fetchall("PRAGMA user_version")
    return f"SQLite {path}", int(next(iter(rows))[0])
