"""Numbered schema steps, applied in order on open; the database records the last one applied."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import aiosqlite

from storage.models import label_key

log = logging.getLogger(__name__)
Step = Callable[[aiosqlite.Connection], Awaitable[None]]
MIGRATIONS: dict[int, Step] = {}


def _register(number: int, step: Step) -> None:
    if number in MIGRATIONS:
        raise ValueError(f"migration {number} registered twice")
    MIGRATIONS[number] = step


def migration(number: int) -> Callable[[Callable[[], list[str]]], Callable[[], list[str]]]:
    """Register a schema step made of SQL statements; numbers must be consecutive from 1."""

    def register(statements: Callable[[], list[str]]) -> Callable[[], list[str]]:
        async def run(db: aiosqlite.Connection) -> None:
            for statement in statements():
                await db.execute(statement)

        _register(number, run)
        return statements

    return register


def data_migration(number: int) -> Callable[[Step], Step]:
    """Register a step that rewrites data in Python (inside the step's transaction)."""

    def register(step: Step) -> Step:
        _register(number, step)
        return step

    return register


@migration(1)
def _blocks() -> list[str]:
    return [
        """CREATE TABLE blocks (
            id INTEGER PRIMARY KEY,
            scope TEXT NOT NULL,
            label TEXT NOT NULL,
            label_key TEXT NOT NULL,
            content TEXT NOT NULL,
            level TEXT NOT NULL CHECK (level IN ('strong', 'context')),
            state TEXT NOT NULL CHECK (state IN ('active', 'idle', 'pinned')),
            priority INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            idle_since REAL,
            idle_calls INTEGER,
            rev INTEGER NOT NULL DEFAULT 0,
            UNIQUE (scope, label_key)
        )""",
        """CREATE TABLE scope_calls (
            scope TEXT PRIMARY KEY,
            calls INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ]


@migration(2)
def _history() -> list[str]:
    return [
        """CREATE TABLE history (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'summary')),
            content TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        "CREATE INDEX history_by_session ON history (session, id)",
    ]


@migration(3)
def _seen_events() -> list[str]:
    return [
        """CREATE TABLE seen_events (
            platform TEXT NOT NULL,
            event_id TEXT NOT NULL,
            seen_at REAL NOT NULL,
            PRIMARY KEY (platform, event_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX seen_events_by_time ON seen_events (seen_at)",
    ]


@migration(4)
def _shared_audit() -> list[str]:
    return [
        """CREATE TABLE shared_audit (
            id INTEGER PRIMARY KEY,
            group_scope TEXT NOT NULL,
            at REAL NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            label TEXT NOT NULL,
            old_content TEXT,
            new_content TEXT
        )""",
        "CREATE INDEX shared_audit_by_group ON shared_audit (group_scope, at)",
    ]


@data_migration(5)
async def _normalised_label_keys(db: aiosqlite.Connection) -> None:
    """Labels are now compared after NFKC normalisation and case folding. Where two labels of
    a scope now collide, the older keeps its label and the newer is renamed `<label>~2` (or ~3…)."""
    rows = await db.execute_fetchall(
        "SELECT id, scope, label FROM blocks ORDER BY scope, created_at, id"
    )
    # Free every key first, so the unique index never sees a half-renamed scope.
    await db.execute("UPDATE blocks SET label_key = '#' || id")
    taken: set[tuple[str, str]] = set()
    for block_id, scope, label in rows:
        new_label, suffix = label, 1
        while (scope, label_key(new_label)) in taken:
            suffix += 1
            new_label = f"{label}~{suffix}"
        taken.add((scope, label_key(new_label)))
        if new_label != label:
            log.warning(
                "labels now match ignoring width and case: renamed block %r to %r in %s",
                label,
                new_label,
                scope,
            )
        await db.execute(
            "UPDATE blocks SET label = ?, label_key = ? WHERE id = ?",
            (new_label, label_key(new_label), block_id),
        )


@migration(6)
def _usage() -> list[str]:
    return [
        # One row per sender, UTC day and chat: group_key is the group's session key, '' in DMs.
        """CREATE TABLE usage (
            platform TEXT NOT NULL,
            sender TEXT NOT NULL,
            day TEXT NOT NULL,
            group_key TEXT NOT NULL,
            calls INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            estimated_calls INTEGER NOT NULL,
            PRIMARY KEY (platform, sender, day, group_key)
        ) WITHOUT ROWID""",
        "CREATE INDEX usage_by_group ON usage (group_key, day)",
        "CREATE INDEX usage_by_day ON usage (day)",
    ]


@data_migration(7)
async def _delivery(db: aiosqlite.Connection) -> None:
    """Updates are recorded on arrival and processed per chat by whichever worker holds the
    chat; ids of events already seen become processed updates, so none is handled again."""
    for statement in DELIVERY_TABLES:
        await db.execute(statement)
    await db.execute(
        "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at, done_at) "
        "SELECT platform, event_id, '', 0, '', seen_at, seen_at FROM seen_events"
    )
    await db.execute("DROP TABLE seen_events")


DELIVERY_TABLES = [
    # position orders one chat's updates (Telegram's update_id; 0 elsewhere), seq breaks ties
    # in arrival order. A processed update stays a while to recognise a repeated delivery.
    """CREATE TABLE inbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        platform TEXT NOT NULL,
        event_id TEXT NOT NULL,
        chat TEXT NOT NULL,
        position INTEGER NOT NULL,
        payload TEXT NOT NULL,
        received_at REAL NOT NULL,
        done_at REAL,
        UNIQUE (platform, event_id)
    )""",
    "CREATE INDEX inbox_pending ON inbox (chat, position, seq) WHERE done_at IS NULL",
    "CREATE INDEX inbox_done ON inbox (done_at) WHERE done_at IS NOT NULL",
    "CREATE TABLE chat_leases (chat TEXT PRIMARY KEY, owner INTEGER NOT NULL, since REAL NOT NULL)",
    """CREATE TABLE workers (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at REAL NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL
    )""",
]


@migration(8)
def _usage_by_day_covering() -> list[str]:
    # The web page sums a window of days for everyone: read from the index alone (a WITHOUT
    # ROWID table's index entries also carry its key: platform, sender, day, group_key).
    return [
        "DROP INDEX usage_by_day",
        "CREATE INDEX usage_by_day ON usage (day, calls, prompt_tokens, cached_tokens, "
        "completion_tokens, estimated_calls)",
    ]


LATEST = max(MIGRATIONS)


async def schema_version(db: aiosqlite.Connection) -> int:
    """The number of the last step applied to this database (0 for an empty file)."""
    rows = await db.execute_fetchall("PRAGMA user_version")
    return int(next(iter(rows))[0])


async def migrate(db: aiosqlite.Connection, target: int = LATEST) -> int:
    """Apply every step after the database's version up to target, each in its own transaction."""
    current = await schema_version(db)
    if current > LATEST:
        raise RuntimeError(
            f"database schema version {current} is newer than this pinbot ({LATEST}); "
            "upgrade pinbot"
        )
    for number in range(current + 1, target + 1):
        await db.execute("BEGIN IMMEDIATE")
        try:
            if await schema_version(db) >= number:  # another process got there first
                await db.execute("ROLLBACK")
                continue
            await MIGRATIONS[number](db)
            await db.execute(f"PRAGMA user_version = {number}")
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
    return await schema_version(db)
