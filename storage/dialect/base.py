"""What every dialect provides: statements on a connection (Executor), and a database with its
transactions, schema bookkeeping and worker liveness (Database), with column types by name; and
the watchers of its transactions (the metrics): each is told how long each transaction took and
whether the database could not be reached. Storage knows nothing of who watches; with no
watcher, watching costs one check."""

from __future__ import annotations

import abc
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from storage.errors import Unavailable

T = TypeVar("T")
Row = Sequence[Any]
LIST = re.compile(r"IN \(\?\*\)")  # a list parameter, as statements write it
# Column types by the names schema steps use ({time}, {serial}, …): (SQLite, PostgreSQL).
TYPES = {
    "serial": ("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY"),
    "sequence": ("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"),
    "time": ("REAL", "DOUBLE PRECISION"),
    "count": ("INTEGER", "BIGINT"),
    "without_rowid": (" WITHOUT ROWID", ""),
}
TRIGRAM = 3  # characters: a shorter term has no trigram for an index to look up
# How a text index proposes the blocks that may contain a text: a query counting them (its last
# argument, a limit, is the caller's) with its arguments, and the condition selecting them with
# its arguments.
Candidates = tuple[str, list[Any], str, list[Any]]


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
    # Whether rate buckets may live in this process's memory (exact, and no write per token):
    # no other process serves the database.
    buckets_in_memory: bool
    # Whether a chat's lease may be given up before the answer to its last update goes out:
    # no other worker can take the chat and answer its next update first.
    release_before_reply: bool
    text_index: TextIndex  # its index of blocks' text, which storage.search reads
    for_update: str  # the clause that locks the rows a transaction's SELECT reads
    ilike: str  # LIKE ignoring case (SQLite's LIKE ignores the case of ASCII letters)
    types: ClassVar[dict[str, str]]  # column types by the names schema steps use
    integrity_check: str  # a query whose only row is ("ok",) when the database checks out

    @abc.abstractmethod
    def pick(self, *, sqlite: T, postgres: T) -> T:
        """This dialect's of what the schema writes for each (statements, a clause)."""

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
    def checking(self) -> contextlib.AbstractAsyncContextManager[Executor]:
        """Statements of a health check, on a connection of the checks' own (opened at first
        use, and again after drop_check): a check that hangs on a frozen server holds up
        nothing of the store's. Locked when a write could not start now."""

    def drop_check(self) -> None:
        """End the health checks' connection now, without waiting on the server: a check
        hanging on it fails at once, and the next check opens another."""

    @abc.abstractmethod
    async def schema_version(self, on: Executor | None = None) -> int:
        """The number of the last schema step applied (0 for an empty database), once the
        schema's migrate has made the table this dialect may keep it in."""

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

    @abc.abstractmethod
    async def reclaim(self) -> None:
        """After rows were deleted for good (a person forgotten): make what they held
        unreadable on the disk as far as this database can (its dialect says how far)."""

    async def hold_writers(self, tx: Executor, table: str) -> None:
        """Inside a transaction: wait until every transaction that writes table has ended, and
        keep the next ones waiting until this one ends (so it reads the table as it stays)."""
        # SQLite: a write transaction already keeps every other writer out.

    @contextlib.asynccontextmanager
    async def reading(self, *, through_index: bool) -> AsyncIterator[Executor]:
        """Reads whose planner is told how to read blocks matching a text pattern: through the
        search index, or in key order. SQLite's planner needs no telling: the statements say."""
        yield self


class TextIndex(abc.ABC):
    """A dialect's index of the label and content of blocks by trigrams, which storage.search
    reads; schema step 15 makes it where the server can have one."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._present: bool | None = None  # whether the index is there (asked once)

    async def present(self) -> bool:
        """Whether this database has the index, and this server can read it."""
        if self._present is None:
            self._present = await self._readable()
        return self._present

    @abc.abstractmethod
    async def _readable(self) -> bool:
        """Whether the index is there and this server can read it (asked once)."""

    async def catch_up(self, batch: int) -> int:
        """Index the blocks changed since the index was last brought up to date, batch blocks
        at a time (each batch its own transaction); returns how many. Nothing to do for an index
        the server keeps itself."""
        return 0

    @abc.abstractmethod
    def candidates(self, text: str, matches: tuple[str, list[Any]]) -> Candidates | None:
        """How the index finds the blocks that may contain text, given the text condition and
        its arguments (matches); None when it cannot tell them from the rest."""

    @abc.abstractmethod
    def missing(self, reason: str, statements: Sequence[str]) -> str:
        """Why searches scan, when the server refused the statement the index needs first for
        reason (statements: the ones that would have followed it)."""


# (seconds the transaction took, whether the database could not be reached)
Watcher = Callable[[float, bool], None]
WATCHERS: list[Watcher] = []
# Set inside a transaction: its statements belong to it and are not transactions of their own.
_INSIDE: ContextVar[bool] = ContextVar("inside a watched transaction", default=False)


def watch(watcher: Watcher) -> None:
    """Tell watcher of every transaction from now on (once, however often it is given)."""
    if watcher not in WATCHERS:
        WATCHERS.append(watcher)


def unwatch(watcher: Watcher) -> None:
    """Stop telling watcher."""
    if watcher in WATCHERS:
        WATCHERS.remove(watcher)


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """One transaction (an autocommitted statement, a batch, or a transaction block), timed for
    the watchers; a statement inside a transaction is part of it, not one of its own. Only
    Unavailable counts as a failure: a refused write (a conflict, a limit) is the store
    working."""
    if not WATCHERS or _INSIDE.get():
        yield
        return
    token = _INSIDE.set(True)
    started = time.perf_counter()
    failed = False
    try:
        yield
    except Unavailable:
        failed = True
        raise
    finally:
        _INSIDE.reset(token)
        took = time.perf_counter() - started
        for watcher in WATCHERS:
            watcher(took, failed)
