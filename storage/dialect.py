"""The one place SQLite and PostgreSQL differ: connections, placeholders, transactions and their
locks, column types, the schema version's bookkeeping and how a worker proves it is alive.

Statements are written once, with `?` placeholders and `IN (?*)` for a list parameter. Besides
reads and single writes, a `Database` runs atomic batches (`write`: one round trip to SQLite's
thread), chains of statements in one transaction that return their rows (`chain`: the same one
round trip there, one transaction on PostgreSQL) and transactions holding per-scope locks:
PostgreSQL's READ COMMITTED would let two writers both see a scope below its limit, so writes
that a limit guards lock their scope first.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiosqlite
import asyncpg

from storage.errors import Unavailable, WorkerConflict

log = logging.getLogger(__name__)
Row = Sequence[Any]
PRIVATE_FILE_MODE = 0o600  # the database holds DM blocks and chat history: its owner only
BUSY_TIMEOUT_MS = 5000  # how long a SQLite write waits for another connection's transaction
WAL_ATTEMPTS = 50
WAL_RETRY_S = 0.01
POOL_SIZE = 10
CLOSE_TIMEOUT_S = 10.0
# Advisory lock spaces of PostgreSQL (the first key of pg_advisory_lock(int, int)).
MIGRATION_LOCK = 7_000_001
WORKER_LOCKS = 7_000_002  # a worker holds (WORKER_LOCKS, its id) while it lives
SOLE_LOCKS = 7_000_003  # and (SOLE_LOCKS, hashtext(role)) for a role only one may hold
_LIST = re.compile(r"IN \(\?\*\)")
# Column types by the names schema steps use ({time}, {serial}, …): (SQLite, PostgreSQL).
_TYPES = {
    "serial": ("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY"),
    "sequence": ("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"),
    "time": ("REAL", "DOUBLE PRECISION"),
    "count": ("INTEGER", "BIGINT"),
    "without_rowid": (" WITHOUT ROWID", ""),
}


@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a batch; with many, args is a list of rows (executemany)."""

    sql: str
    args: Sequence[Any] = ()
    many: bool = False


class Executor(abc.ABC):
    """Runs statements on one connection (or a pool): what a transaction's body uses."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    @abc.abstractmethod
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        """The rows a statement returns."""

    @abc.abstractmethod
    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; returns how many rows it changed."""

    @abc.abstractmethod
    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per row of arguments."""

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        """The first row a statement returns, if any."""
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """The first column of the first row, or None."""
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    @abc.abstractmethod
    async def attempt(self, sql: str) -> str | None:
        """Inside a transaction, run a statement the server may refuse (a feature it lacks, a
        right the user lacks): None when it ran, else the server's reason, and the transaction
        goes on as if it had not been tried."""


class Database(Executor):
    """A connection to one pinbot database, in its dialect. Reads and single writes autocommit.
    What is not abstract here suits a database that one process serves."""

    kind: str  # "SQLite" or "PostgreSQL", as messages name it
    one_process: bool  # whether one process serves this database (SQLite)
    for_update: str  # the clause that locks the rows a transaction's SELECT reads
    ilike: str  # LIKE ignoring case (SQLite's LIKE ignores the case of ASCII letters)
    types: ClassVar[dict[str, str]]  # column types by the names schema steps use
    integrity_check: str  # a query whose only row is ("ok",) when the database checks out

    @abc.abstractmethod
    async def write(self, *steps: Step, lock: Sequence[str] = (), guard: bool = False) -> int:
        """Run steps atomically, holding the locks of the scopes named; with guard, the steps
        after the first run only if the first changed a row. Returns the first's count."""

    @abc.abstractmethod
    async def chain(self, *steps: Step) -> list[list[Row]]:
        """Run steps in one transaction, each only while the one before it returned a row
        (writes return theirs with RETURNING); the rows of each step that ran. Every statement
        after the first sees what the transaction's earlier statements and other committed
        transactions wrote (PostgreSQL: each takes a new snapshot, and a lock a statement took
        is held to the end)."""

    @abc.abstractmethod
    def transaction(self, *locks: str) -> contextlib.AbstractAsyncContextManager[Executor]:
        """A transaction holding the locks of the scopes named, committed when the block ends."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection."""

    @abc.abstractmethod
    async def schema_version(self, on: Executor | None = None) -> int:
        """The number of the last schema step applied (0 for an empty database)."""

    @abc.abstractmethod
    async def set_schema_version(self, on: Executor, number: int) -> None:
        """Record that step number is applied, inside its step's transaction."""

    @abc.abstractmethod
    async def join(self, worker: int, sole: str | None) -> None:
        """Count as live worker `worker` until leave() or the process ends (and hold the role
        sole alone): WorkerConflict when another live process stands in the way."""

    @abc.abstractmethod
    async def leave(self) -> None:
        """Stop counting as a live worker."""

    async def hold(self, role: str) -> bool:
        """Hold role alone among the live workers for as long as this one lives, if no other
        live worker holds it; whether this worker holds it now."""
        return True  # one process serves the database: its roles are all its own

    async def returning(self, sql: str, *args: Any) -> list[Row]:
        """Run a write that returns rows (RETURNING)."""
        return await self.fetch(sql, *args)

    @contextlib.asynccontextmanager
    async def migrating(self) -> AsyncIterator[None]:
        """Held while migrations run, so processes starting at once apply each step once."""
        yield  # each step's transaction is the lock; a step re-reads the version

    @property
    def worker_live(self) -> bool:
        """Whether this worker still counts as live for the others."""
        return True

    def live_workers(self, worker: int) -> str:
        """A subquery of the ids of the live workers, seen from worker."""
        return f"SELECT {int(worker)}"  # only this process serves: other holders have ended

    async def integrity_ok(self) -> bool:
        """Whether the database checks out."""
        return [tuple(row) for row in await self.fetch(self.integrity_check)] == [("ok",)]

    async def hold_writers(self, tx: Executor, table: str) -> None:
        """Inside a transaction: wait until every transaction that writes table has ended, and
        keep the next ones waiting until this one ends (so it reads the table as it stays)."""
        # SQLite: a write transaction already keeps every other writer out.

    @contextlib.asynccontextmanager
    async def reading(self, *, through_index: bool) -> AsyncIterator[Executor]:
        """Reads whose planner is told how to read blocks matching a text pattern: through the
        search index, or in key order. SQLite's planner needs no telling: the statements say."""
        yield self


@functools.lru_cache(maxsize=4096)
def _sqlite_sql(sql: str, sizes: tuple[int, ...]) -> str:
    lists = iter(sizes)  # each `IN (?*)` gets as many placeholders as its list has items
    return _LIST.sub(lambda _: f"IN ({','.join('?' * next(lists))})", sql)


def _sqlite_args(sql: str, args: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    if "?*" not in sql:
        return sql, args
    sizes = tuple(len(arg) for arg in args if isinstance(arg, list))
    flat = [item for arg in args for item in (arg if isinstance(arg, list) else [arg])]
    return _sqlite_sql(sql, sizes), flat


_UNAVAILABLE_SQLITE = ("unable to open", "disk i/o", "readonly", "locked", "no such file")


@contextlib.contextmanager
def _sqlite_faults() -> Iterator[None]:
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

    kind = "SQLite"
    one_process = True
    for_update = ""
    ilike = "LIKE"
    types: ClassVar[dict[str, str]] = {name: both[0] for name, both in _TYPES.items()}
    integrity_check = "PRAGMA integrity_check"

    def __init__(self, connection: aiosqlite.Connection, path: Path | None) -> None:
        super().__init__(connection)
        self.path = path
        self._write_lock = asyncio.Lock()
        self._serving: int | None = None  # the descriptor holding the one-server lock

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
            tx = _SqliteExecutor(self._connection)
            await tx.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                await tx.execute("ROLLBACK")
                raise
            await tx.execute("COMMIT")

    async def close(self) -> None:
        try:
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


@functools.lru_cache(maxsize=4096)
def _pg_sql(sql: str) -> str:  # `IN (?*)` as `= ANY(?)`, and each `?` numbered: $1, $2, …
    parts = _LIST.sub("= ANY(?)", sql).split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], start=1)) + parts[-1]


def _changed(status: str) -> int:  # from asyncpg's status text: "UPDATE 1", "INSERT 0 1"
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


_PG_UNAVAILABLE = (
    *(OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError),  # the connection
    *(asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError),  # the server, or its limits
    asyncpg.TooManyConnectionsError,
    *(asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidCatalogNameError),  # the URL
)


@contextlib.contextmanager
def _pg_faults() -> Iterator[None]:
    try:
        yield
    except _PG_UNAVAILABLE as error:
        raise Unavailable(str(error) or type(error).__name__) from error


class _PgExecutor(Executor):
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        with _pg_faults():
            return list(await self._connection.fetch(_pg_sql(sql), *args))

    async def execute(self, sql: str, *args: Any) -> int:
        with _pg_faults():
            return _changed(await self._connection.execute(_pg_sql(sql), *args))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _pg_faults():
            await self._connection.executemany(_pg_sql(sql), rows)

    async def attempt(self, sql: str) -> str | None:
        try:
            with _pg_faults():
                async with self._connection.transaction():  # a savepoint inside the transaction
                    await self._connection.execute(_pg_sql(sql))
        except asyncpg.PostgresError as error:
            return str(error)
        return None


async def _keep_session(connection: object) -> None:
    """What a pooled connection needs before its next use: nothing. asyncpg by default resets a
    connection's session as it goes back to the pool (advisory locks, cursors, LISTEN,
    settings), a round trip and a transaction per statement; pinbot's pooled connections take
    none of those (transactions' locks end with them, and the session locks of liveness and
    migrations live on connections of their own). An open transaction is still rolled back."""


class PostgresDatabase(_PgExecutor, Database):
    """A pool of asyncpg connections; a worker's liveness rides on a connection of its own."""

    kind = "PostgreSQL"
    one_process = False
    for_update = " FOR UPDATE"
    ilike = "ILIKE"
    types: ClassVar[dict[str, str]] = {name: both[1] for name, both in _TYPES.items()}
    integrity_check = "SELECT 'ok'"  # PostgreSQL checks its own
    _connection: asyncpg.Pool

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        super().__init__(pool)
        self._url = url
        # Holds this worker's liveness lock for as long as the process lives: PostgreSQL drops
        # it the moment the process dies, however it dies.
        self._liveness: asyncpg.Connection[Any] | None = None
        self._held: set[str] = set()  # roles this worker holds (until its liveness ends)

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        """Connect to the database at url."""
        with _pg_faults():
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=POOL_SIZE, reset=_keep_session
            )
        return cls(pool, url)

    async def write(self, *steps: Step, lock: Sequence[str] = (), guard: bool = False) -> int:
        if len(steps) == 1 and not lock and not steps[0].many:
            return await self.execute(steps[0].sql, *steps[0].args)
        async with self.transaction(*lock) as tx:

            async def run(step: Step) -> int:
                if step.many:
                    await tx.executemany(step.sql, step.args)
                    return len(step.args)
                return await tx.execute(step.sql, *step.args)

            first = await run(steps[0])
            for step in steps[1:] if first or not guard else ():
                await run(step)
        return first

    async def chain(self, *steps: Step) -> list[list[Row]]:
        found: list[list[Row]] = []
        async with self.transaction() as tx:
            for step in steps:
                found.append(await tx.fetch(step.sql, *step.args))
                if not found[-1]:
                    break
        return found

    @contextlib.asynccontextmanager
    async def transaction(self, *locks: str) -> AsyncIterator[Executor]:
        with _pg_faults():
            async with self._connection.acquire() as connection, connection.transaction():
                tx = _PgExecutor(connection)
                for scope in sorted(set(locks)):  # a fixed order: no deadlock between two
                    await tx.execute("SELECT pg_advisory_xact_lock(hashtext(?))", scope)
                yield tx

    @contextlib.asynccontextmanager
    async def reading(self, *, through_index: bool) -> AsyncIterator[Executor]:
        # PostgreSQL guesses how many blocks a pattern matches from statistics that cannot
        # tell (a term in 500 blocks of 1,000,000 was read in key order: 0.5 s), so it is told.
        # And planned for each pattern: from a statement's sixth run PostgreSQL may keep one
        # plan for every pattern, which read a term in no block through the key order (0.1 s).
        off = ("seqscan", "indexscan") if through_index else ("seqscan", "bitmapscan")
        settings = [f"set_config('enable_{way}', 'off', true)" for way in off]
        settings.append("set_config('plan_cache_mode', 'force_custom_plan', true)")
        async with self.transaction() as tx:
            await tx.execute("SELECT " + ", ".join(settings))
            yield tx

    async def hold_writers(self, tx: Executor, table: str) -> None:
        # SHARE ROW EXCLUSIVE conflicts with every writer's ROW EXCLUSIVE, and with itself.
        await tx.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")

    async def close(self) -> None:
        try:
            # A connection still out (a task cancelled mid-query) must not hold up the exit.
            await asyncio.wait_for(self._connection.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("closing the PostgreSQL pool timed out; connections were dropped")
        finally:
            await self.leave()

    async def schema_version(self, on: Executor | None = None) -> int:
        on = on or self
        await on.execute("CREATE TABLE IF NOT EXISTS pinbot_migrations (version INTEGER NOT NULL)")
        version = int(await on.fetchval("SELECT COALESCE(MAX(version), 0) FROM pinbot_migrations"))
        if version == 0 and await on.fetchval("SELECT to_regclass('pinbot_schema')") is not None:
            # Releases before one numbering for both backends kept PostgreSQL's own: its steps
            # 1, 2 and 3 are steps 6, 7 and 8 of today's.
            legacy = int(await on.fetchval("SELECT COALESCE(MAX(version), 0) FROM pinbot_schema"))
            version = legacy + 5 if legacy else 0
            await self.set_schema_version(on, version)
            await on.execute("DROP TABLE pinbot_schema")
        return version

    async def set_schema_version(self, on: Executor, number: int) -> None:
        await on.execute("INSERT INTO pinbot_migrations (version) VALUES (?)", number)

    @contextlib.asynccontextmanager
    async def migrating(self) -> AsyncIterator[None]:
        # On a connection of its own, closed after: the lock goes with it, whatever happens
        # (pooled connections go back to the pool as they are, see _keep_session).
        with _pg_faults():
            connection = await asyncpg.connect(self._url)
        try:
            with _pg_faults():
                await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
            yield
        finally:
            await connection.close()

    async def join(self, worker: int, sole: str | None) -> None:
        with _pg_faults():
            liveness = await asyncpg.connect(self._url)
        try:
            await liveness.execute("SELECT pg_advisory_lock($1, $2)", WORKER_LOCKS, worker)
            if sole is not None and not await liveness.fetchval(
                "SELECT pg_try_advisory_lock($1, hashtext($2))", SOLE_LOCKS, sole
            ):
                raise WorkerConflict(f"another live pinbot worker already runs as {sole}")
        except BaseException:
            await liveness.close()
            raise
        await self.leave()
        self._liveness = liveness
        if sole is not None:
            self._held.add(sole)
        liveness.add_termination_listener(self._liveness_ended)

    def _liveness_ended(self, connection: object) -> None:
        if connection is self._liveness:
            log.error(
                "lost the connection that keeps this worker live; its chats go to the other "
                "workers until it registers again"
            )

    async def hold(self, role: str) -> bool:
        if not self.worker_live or self._liveness is None:
            return False
        if role not in self._held:
            with _pg_faults():
                taken = await self._liveness.fetchval(
                    "SELECT pg_try_advisory_lock($1, hashtext($2))", SOLE_LOCKS, role
                )
            if taken:
                self._held.add(role)
        return role in self._held

    async def leave(self) -> None:
        self._held.clear()
        liveness, self._liveness = self._liveness, None  # first: closing it is no loss
        if liveness is not None:
            await liveness.close()

    @property
    def worker_live(self) -> bool:
        return self._liveness is not None and not self._liveness.is_closed()

    def live_workers(self, worker: int) -> str:
        return (
            "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted "
            f"AND classid = {WORKER_LOCKS} AND objsubid = 2 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )


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
        with _pg_faults():
            connection = await asyncpg.connect(url)
            try:
                server = str(await connection.fetchval("SHOW server_version")).split()[0]
                tables = await connection.fetchrow(
                    "SELECT to_regclass('pinbot_migrations'), to_regclass('pinbot_schema')"
                )
                ours, legacy = tables if tables is not None else (None, None)
                table = "pinbot_migrations" if ours else "pinbot_schema" if legacy else None
                found = table and await connection.fetchval(f"SELECT MAX(version) FROM {table}")
            finally:
                await connection.close()
        version = int(found or 0) + (5 if table == "pinbot_schema" and found else 0)
        return f"PostgreSQL {'.'.join(server.split('.')[:2])}", version
    if not Path(path).exists():
        return f"SQLite {path}", None
    with _sqlite_faults():
        async with aiosqlite.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = await db.execute_fetchall("PRAGMA user_version")
    return f"SQLite {path}", int(next(iter(rows))[0])
