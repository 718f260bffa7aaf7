"""PostgreSQL through a pool of asyncpg connections: several processes serve the database, so
scopes are locked with advisory locks, and a worker's liveness is a session lock on a connection
of its own."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import asyncpg
import asyncpg.connect_utils

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
from storage.errors import Unavailable, WorkerConflict

log = logging.getLogger(__name__)
POOL_SIZE = 10
CLOSE_TIMEOUT_S = 10.0
CHECK_CONNECT_S = 5.0  # a health check's connecting gives up after this (a frozen server)
# Advisory lock spaces of PostgreSQL (the first key of pg_advisory_lock(int, int)).
MIGRATION_LOCK = 7_000_001
WORKER_LOCKS = 7_000_002  # a worker holds (WORKER_LOCKS, its id) while it lives
SOLE_LOCKS = 7_000_003  # and (SOLE_LOCKS, hashtext(role)) for a role only one may hold


@functools.lru_cache(maxsize=4096)
def _pg_sql(sql: str) -> str:  # `IN (?*)` as `= ANY(?)`, and each `?` numbered: $1, $2, …
    parts = LIST.sub("= ANY(?)", sql).split("?")
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
    with watched():
        try:
            yield
        except _PG_UNAVAILABLE as error:
            raise Unavailable(str(error) or type(error).__name__) from error


PORT_PROBLEM = "the port after the host is not a number from 1 to 65535"
RESERVED = "/?#[]"
MAX_PORT = 65535


def _credentials_problem(rest: str) -> str | None:
    """What in the user name and password (up to the last @ before the query or fragment)
    asyncpg would read as something else: a reserved character ends the host part early, and
    asyncpg ends the credentials at the first @, so the rest of a password becomes part of the
    host. An @ in the query (application_name=a@b) or the fragment is not the password's."""
    head = re.split(r"[?#]", rest, maxsplit=1)[0]
    # Up to the last @ before the query, if there is one there; else a ? or # came before the
    # password's end (refused below as reserved).
    credentials = (head if "@" in head else rest).rpartition("@")[0]
    if any(char in credentials for char in RESERVED):
        return (
            "percent-encode reserved characters in the password (or user name): "
            "/ ? # [ ] as %2F %3F %23 %5B %5D"
        )
    user, _, password = credentials.partition(":")  # asyncpg's split too: at the first colon
    for part, text in (("password", password), ("user name", user)):
        if "@" in text:
            return (
                f"the {part} holds an @ that is not percent-encoded: write it as %40 "
                "(asyncpg ends the user name and password at the first @)"
            )
    return None


def _asyncpg_problem(url: str) -> str | None:
    """What asyncpg's own parser, the one every connection of the store goes through, refuses
    in url (with the PG* variables and files it reads too), or what it reads into an address
    nothing can connect to; the part named, no text of the URL quoted."""
    parse: Any = getattr(asyncpg.connect_utils, "_parse_connect_dsn_and_args", None)
    if parse is None:  # another asyncpg: what it makes of the URL shows when it connects
        return None
    arguments = dict.fromkeys(inspect.signature(parse).parameters)
    try:
        addresses, _ = parse(**{**arguments, "dsn": url})
    except asyncpg.ClientConfigurationError as error:  # its messages name settings, not values
        return f"asyncpg cannot use it: {error}"
    except ValueError:  # int() of a port: the URL's, ?port=, or $PGPORT
        return f"{PORT_PROBLEM} (or in ?port= or $PGPORT)"
    except IndexError:  # an empty name in a list of hosts
        return "a host in the list of hosts is empty (two commas, or one at an end)"
    except Exception as error:
        return f"asyncpg cannot read it ({type(error).__name__})"
    for address in addresses:
        if isinstance(address, str):  # a Unix socket
            continue
        host, port = address
        if not 0 < port <= MAX_PORT:
            return PORT_PROBLEM
        if not host or any(char == "@" or char.isspace() for char in host):
            return "the host is not a host name or address"
    return None


def url_problem(url: str) -> str | None:
    """What keeps the store from connecting with url, found without connecting: the URL read
    exactly as asyncpg reads it when the store connects, and refused where that reading is not
    what was written. None when it reads well. The part at fault is named; no text of the URL
    is quoted (it holds a password)."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("postgresql", "postgres"):
        return "not a postgresql:// URL; write postgresql://user:password@host:5432/database"
    if problem := _credentials_problem(rest):
        return problem
    try:
        query = urllib.parse.urlparse(url).query  # asyncpg's first step
    except ValueError:  # Python's own reading refuses it: an IPv6 address with one bracket
        return "the host is not a host name or address (an IPv6 address goes inside [ ])"
    try:
        if query:
            urllib.parse.parse_qs(query, strict_parsing=True)  # as asyncpg reads it
    except ValueError:
        return "the query after ? is not name=value pairs joined by &"
    return _asyncpg_problem(url)


# The tables a forgotten person's rows are deleted from or rewritten in.
PERSON_TABLES = (
    "blocks",
    "block_versions",
    "history",
    "usage",
    "usage_compaction",
    "proposals",
    "suggestions",
    "shared_audit",
    "inbox",
    "rate_buckets",
    "budget_holds",
    "scope_calls",
    "scope_notes",
)


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
    buckets_in_memory = False  # every worker takes from the same buckets
    release_before_reply = False  # another worker could take the chat and answer first
    for_update = " FOR UPDATE"
    ilike = "ILIKE"
    types: ClassVar[dict[str, str]] = {name: both[1] for name, both in TYPES.items()}
    integrity_check = "SELECT 'ok'"  # PostgreSQL checks its own
    _connection: asyncpg.Pool

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        super().__init__(pool)
        self._url = url
        # Holds this worker's liveness lock for as long as the process lives: PostgreSQL drops
        # it the moment the process dies, however it dies.
        self._liveness: asyncpg.Connection[Any] | None = None
        self._held: set[str] = set()  # roles this worker holds (until its liveness ends)
        self._check: asyncpg.Connection[Any] | None = None  # the health checks' own
        self.text_index = TrigramIndex(self)

    def pick(self, *, sqlite: T, postgres: T) -> T:
        return postgres

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        """Connect to the database at url; Unavailable naming what is wrong with a URL that asyncpg
        would read as something else than was written (see url_problem)."""
        if problem := url_problem(url):
            raise Unavailable(f"the PostgreSQL URL: {problem}")
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

    async def reclaim(self) -> None:
        """VACUUM the tables a person's data lives in: the space of their deleted rows is
        reclaimed (reused by later rows; VACUUM does not overwrite it at once, nor reach the
        WAL already archived)."""
        for table in PERSON_TABLES:
            await self.execute(f"VACUUM {table}")

    async def hold_writers(self, tx: Executor, table: str) -> None:
        # SHARE ROW EXCLUSIVE conflicts with every writer's ROW EXCLUSIVE, and with itself.
        await tx.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")

    @contextlib.asynccontextmanager
    async def checking(self) -> AsyncIterator[Executor]:
        # Not a pooled connection: cancelling a statement on one that hangs makes asyncpg ask
        # the (frozen) server to cancel it and wait for the answer, and the pool waits too.
        connection = self._check
        if connection is None or connection.is_closed():
            with _pg_faults():
                connection = await asyncpg.connect(self._url, timeout=CHECK_CONNECT_S)
            self._check = connection
        yield _PgExecutor(connection)

    def drop_check(self) -> None:
        connection, self._check = self._check, None
        if connection is not None:
            connection.terminate()  # closes the socket now; its statement fails at once

    async def close(self) -> None:
        self.drop_check()
        try:
            # A connection still out (a task cancelled mid-query) must not hold up the exit.
            await asyncio.wait_for(self._connection.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("closing the PostgreSQL pool timed out; connections were dropped")
        finally:
            await self.leave()

    async def schema_version(self, on: Executor | None = None) -> int:
        on = on or self  # pinbot_migrations: the schema's migrate makes it before it asks
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


class TrigramIndex(TextIndex):
    """A pg_trgm GIN index of the label and content of blocks, which the server keeps itself."""

    async def _readable(self) -> bool:
        return await self._db.fetchval("SELECT to_regclass('blocks_search')") is not None

    def candidates(self, text: str, matches: tuple[str, list[Any]]) -> Candidates | None:
        """The blocks matching text, read through pg_trgm (the text condition itself)."""
        # pg_trgm looks a LIKE pattern up by the trigrams inside its words: with no word of three
        # letters or digits there is none, and the index would return every block.
        run = longest = 0
        for character in text:
            run = run + 1 if character.isalnum() else 0
            longest = max(longest, run)
        if longest < TRIGRAM:
            return None
        return (
            f"SELECT COUNT(*) FROM (SELECT 1 FROM blocks WHERE {matches[0]} LIMIT ?) c",
            matches[1],
            "1 = 1",
            [],
        )

    def missing(self, reason: str, statements: Sequence[str]) -> str:
        return (
            f"the PostgreSQL extension pg_trgm could not be created ({reason}). To index it "
            f"later, as a user who may: CREATE EXTENSION pg_trgm; {'; '.join(statements)};"
        )


async def inspect_postgres(url: str) -> tuple[str, int | None]:
    """What the PostgreSQL server at url is ("PostgreSQL 15.18") and the schema version of its
    database, read without writing anything."""
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
