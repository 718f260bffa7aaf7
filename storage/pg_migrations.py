"""Numbered schema steps for PostgreSQL, applied on open under an advisory lock, so several
processes starting at once apply each step exactly once.

Steps are additive where they can be (new tables and columns), so a worker of the previous
version keeps working while the others are upgraded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

MIGRATION_LOCK = 7_000_001  # the advisory lock key migrations hold
if TYPE_CHECKING:  # generic only in the type stubs
    Executor = asyncpg.Connection[Any] | PoolConnectionProxy[Any]

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE blocks (
            id BIGSERIAL PRIMARY KEY,
            scope TEXT NOT NULL,
            label TEXT NOT NULL,
            label_key TEXT NOT NULL,
            content TEXT NOT NULL,
            level TEXT NOT NULL CHECK (level IN ('strong', 'context')),
            state TEXT NOT NULL CHECK (state IN ('active', 'idle', 'pinned')),
            priority INTEGER NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            idle_since DOUBLE PRECISION,
            idle_calls BIGINT,
            rev INTEGER NOT NULL DEFAULT 0,
            UNIQUE (scope, label_key)
        )""",
        "CREATE TABLE scope_calls (scope TEXT PRIMARY KEY, calls BIGINT NOT NULL)",
        """CREATE TABLE history (
            id BIGSERIAL PRIMARY KEY,
            session TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'summary')),
            content TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX history_by_session ON history (session, id)",
        """CREATE TABLE seen_events (
            platform TEXT NOT NULL,
            event_id TEXT NOT NULL,
            seen_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (platform, event_id)
        )""",
        "CREATE INDEX seen_events_by_time ON seen_events (seen_at)",
        """CREATE TABLE shared_audit (
            id BIGSERIAL PRIMARY KEY,
            group_scope TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            label TEXT NOT NULL,
            old_content TEXT,
            new_content TEXT
        )""",
        "CREATE INDEX shared_audit_by_group ON shared_audit (group_scope, at)",
        """CREATE TABLE usage (
            platform TEXT NOT NULL,
            sender TEXT NOT NULL,
            day TEXT NOT NULL,
            group_key TEXT NOT NULL,
            calls BIGINT NOT NULL,
            prompt_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL,
            completion_tokens BIGINT NOT NULL,
            estimated_calls BIGINT NOT NULL,
            PRIMARY KEY (platform, sender, day, group_key)
        )""",
        "CREATE INDEX usage_by_group ON usage (group_key, day)",
        "CREATE INDEX usage_by_day ON usage (day)",
    ],
    # Updates recorded on arrival, processed per chat by whichever worker holds the chat (see
    # storage/migrations.py step 7); rate limits counted here so they hold across workers.
    2: [
        """CREATE TABLE inbox (
            seq BIGSERIAL PRIMARY KEY,
            platform TEXT NOT NULL,
            event_id TEXT NOT NULL,
            chat TEXT NOT NULL,
            position BIGINT NOT NULL,
            payload TEXT NOT NULL,
            received_at DOUBLE PRECISION NOT NULL,
            done_at DOUBLE PRECISION,
            UNIQUE (platform, event_id)
        )""",
        "CREATE INDEX inbox_pending ON inbox (chat, position, seq) WHERE done_at IS NULL",
        "CREATE INDEX inbox_done ON inbox (done_at) WHERE done_at IS NOT NULL",
        """CREATE TABLE chat_leases (
            chat TEXT PRIMARY KEY,
            owner BIGINT NOT NULL,
            since DOUBLE PRECISION NOT NULL
        )""",
        """CREATE TABLE workers (
            id BIGSERIAL PRIMARY KEY,
            started_at DOUBLE PRECISION NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL
        )""",
        # A token bucket per limiter and key; full_at says when it is full again (and may go).
        # SQLite keeps them in memory: one process serves it.
        """CREATE TABLE rate_buckets (
            key TEXT PRIMARY KEY,
            tokens DOUBLE PRECISION NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            full_at DOUBLE PRECISION NOT NULL,
            granted BOOLEAN NOT NULL
        )""",
        "CREATE INDEX rate_buckets_full ON rate_buckets (full_at)",
        "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at, done_at) "
        "SELECT platform, event_id, '', 0, '', seen_at, seen_at FROM seen_events",
        "DROP TABLE seen_events",
    ],
    # The web page sums a window of days for everyone: an index-only scan.
    3: [
        "DROP INDEX usage_by_day",
        "CREATE INDEX usage_by_day ON usage (day) INCLUDE (platform, sender, group_key, calls, "
        "prompt_tokens, cached_tokens, completion_tokens, estimated_calls)",
    ],
}
LATEST = max(MIGRATIONS)


async def schema_version(connection: Executor) -> int:
    """The last step applied (0 for an empty database)."""
    await connection.execute("CREATE TABLE IF NOT EXISTS pinbot_schema (version INTEGER NOT NULL)")
    value = await connection.fetchval("SELECT MAX(version) FROM pinbot_schema")
    return int(value or 0)


async def migrate(connection: Executor) -> int:
    """Apply every pending step, each in its own transaction, holding the migration lock so
    that concurrent starts wait for each other; returns the version reached."""
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        current = await schema_version(connection)
        if current > LATEST:
            raise RuntimeError(
                f"database schema version {current} is newer than this pinbot ({LATEST}); "
                "upgrade pinbot"
            )
        for number in range(current + 1, LATEST + 1):
            async with connection.transaction():
                for statement in MIGRATIONS[number]:
                    await connection.execute(statement)
                await connection.execute("INSERT INTO pinbot_schema (version) VALUES ($1)", number)
        return await schema_version(connection)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
