"""The store over PostgreSQL (asyncpg), for several processes sharing one database: the same
contract as the SQLite store, with every limit exact under concurrency.

PostgreSQL's READ COMMITTED lets two transactions both see a scope below its limit, so every
write that a limit guards takes a per-scope advisory transaction lock first: writes to one scope
queue, writes to different scopes do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from storage.models import (
    AuditEntry,
    Block,
    HistoryEntry,
    Level,
    NewBlock,
    PendingUpdate,
    State,
    UsageRow,
    UsageTotals,
    WorkerConflict,
    label_key,
)
from storage.pg_migrations import migrate, schema_version
from storage.rows import (
    AUDIT_COLUMNS,
    BLOCK_COLUMNS,
    BLOCK_INSERT_COLUMNS,
    TABLES,
    USAGE_SUMS,
    Dump,
    PendingCalls,
    audit_filter,
    audit_from_row,
    block_from_row,
    block_insert_rows,
    import_audit_rows,
    like_pattern,
    prefix_range,
    totals,
    ts,
)

log = logging.getLogger(__name__)
POOL_SIZE = 10
CLOSE_TIMEOUT_S = 10.0
# Advisory lock spaces (the first key of pg_advisory_lock(int, int)): a worker holds
# (WORKER_LOCKS, its id) while it lives, and (SOLE_LOCKS, hashtext(role)) for a sole role.
WORKER_LOCKS = 7_000_002
SOLE_LOCKS = 7_000_003
# The ids of the live workers of this database.
_LIVE = (
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted "
    f"AND classid = {WORKER_LOCKS} AND objsubid = 2 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_INSERT_BLOCK_ROW = (
    f"INSERT INTO blocks ({', '.join(BLOCK_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(f'${n}' for n in range(1, len(BLOCK_INSERT_COLUMNS) + 1))})"
)
if TYPE_CHECKING:  # generic only in the type stubs
    Connection = PoolConnectionProxy[asyncpg.Record]
_AUDIT_INSERT = (
    "INSERT INTO shared_audit (group_scope, at, actor, action, label, old_content, new_content) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7)"
)


def _changed(status: str) -> int:
    """Rows a statement changed, from asyncpg's status text ("UPDATE 1", "INSERT 0 1")."""
    try:
        return int(status.rsplit(" ", 1)[-1])
    except ValueError:
        return 0


def _audit_rows(audit: Sequence[AuditEntry]) -> list[tuple[Any, ...]]:
    return [
        (e.group_scope, ts(e.at), e.actor, e.action, e.label, e.old_content, e.new_content)
        for e in audit
    ]


class PostgresStore:
    """pinbot's data in PostgreSQL: blocks per scope, model-call counts, history, audit trail,
    delivered events and usage."""

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self._pool = pool
        self._url = url
        self._pending_calls = PendingCalls()
        self._worker = 0  # this process's worker id once it serves (register_worker)
        # Holds this worker's liveness lock for as long as the process lives: PostgreSQL drops
        # it the moment the process dies, however it dies.
        self._liveness: asyncpg.Connection[Any] | None = None

    @classmethod
    async def open(cls, url: str) -> PostgresStore:
        """Connect to the database at url and apply pending migrations."""
        pool = await asyncpg.create_pool(url, min_size=1, max_size=POOL_SIZE)
        try:
            async with pool.acquire() as connection:
                await migrate(connection)
        except BaseException:
            await pool.close()
            raise
        return cls(pool, url)

    async def close(self) -> None:
        """Write pending counts and close the pool; committed data is on the server."""
        try:
            await self.flush_calls()
        finally:
            try:
                # A connection still out (a task cancelled mid-query) must not hold up the exit.
                await asyncio.wait_for(self._pool.close(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("closing the PostgreSQL pool timed out; connections were dropped")
            finally:
                await self.leave_workers()

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _transaction(self, *lock_scopes: str) -> AsyncIterator[Connection]:
        """One transaction, holding the advisory lock of each scope named (in a fixed order)."""
        async with self._pool.acquire() as connection, connection.transaction():
            for scope in sorted(set(lock_scopes)):
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", scope)
            yield connection

    # --- blocks -------------------------------------------------------------------------------

    async def blocks(self, scopes: Sequence[str]) -> list[Block]:
        """Every block of the given scopes, in any state, oldest creation first."""
        if not scopes:
            return []
        rows = await self._pool.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope = ANY($1::text[]) "
            "ORDER BY created_at, id",
            list(scopes),
        )
        return [block_from_row(row) for row in rows]

    async def insert_block(
        self,
        new: NewBlock,
        *,
        now: datetime,
        max_blocks: int,
        max_total_chars: int,
        audit: Sequence[AuditEntry] = (),
    ) -> bool:
        """Insert unless the label exists or the scope's block or character limit would break;
        returns whether the block was inserted (and committed)."""
        stamp = ts(now)
        async with self._transaction(new.scope) as connection:
            status = await connection.execute(
                "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
                "created_at, updated_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $8 "
                "WHERE (SELECT COUNT(*) FROM blocks WHERE scope = $1) < $9 "
                "AND ($10 = 0 OR (SELECT COALESCE(SUM(length(content)), 0) FROM blocks "
                "WHERE scope = $1) + length($4) <= $10) "
                "ON CONFLICT (scope, label_key) DO NOTHING",
                new.scope,
                new.label,
                label_key(new.label),
                new.content,
                new.level.value,
                new.state.value,
                new.priority,
                stamp,
                max_blocks,
                max_total_chars,
            )
            inserted = _changed(status) == 1
            if inserted and audit:
                await connection.executemany(_AUDIT_INSERT, _audit_rows(audit))
        return inserted

    async def update_block(
        self,
        block: Block,
        *,
        now: datetime,
        max_total_chars: int,
        content: str | None = None,
        level: Level | None = None,
        state: State | None = None,
        priority: int | None = None,
        audit: Sequence[AuditEntry] = (),
    ) -> bool:
        """Change a block if it is still at the revision read, unless the change makes the
        scope's content larger and over max_total_chars (0: no budget).

        Making a block idle records the time and the scope's model-call count at that moment;
        leaving idle clears both. Returns whether the change was committed."""
        new_state = block.state if state is None else state
        if new_state is State.IDLE and block.state is not State.IDLE:
            await self.flush_calls()  # the idle mark records the scope's current count
            idle_sql = (
                "idle_since = $9, idle_calls = (SELECT COALESCE(MAX(calls), 0) FROM scope_calls "
                "WHERE scope = blocks.scope)"
            )
        elif new_state is State.IDLE:
            idle_sql = "idle_since = idle_since"
        else:
            idle_sql = "idle_since = NULL, idle_calls = NULL"
        new_content = block.content if content is None else content
        args = [
            new_content,
            (block.level if level is None else level).value,
            new_state.value,
            block.priority if priority is None else priority,
            ts(now),
            block.id,
            block.rev,
            max_total_chars,
        ]
        if "$9" in idle_sql:
            args.append(ts(now))
        async with self._transaction(block.scope) as connection:
            status = await connection.execute(
                "UPDATE blocks SET content = $1, level = $2, state = $3, priority = $4, "
                f"updated_at = $5, {idle_sql}, rev = rev + 1 WHERE id = $6 AND rev = $7 "
                "AND ($8 = 0 OR length($1) <= length(content) OR (SELECT "
                "COALESCE(SUM(length(b.content)), 0) FROM blocks b WHERE b.scope = blocks.scope) "
                "- length(content) + length($1) <= $8)",
                *args,
            )
            changed = _changed(status) == 1
            if changed and audit:
                await connection.executemany(_AUDIT_INSERT, _audit_rows(audit))
        return changed

    async def delete_block(self, block: Block, audit: Sequence[AuditEntry] = ()) -> bool:
        """Delete a block if it still exists; returns whether a row went."""
        async with self._transaction() as connection:
            status = await connection.execute("DELETE FROM blocks WHERE id = $1", block.id)
            deleted = _changed(status) == 1
            if deleted and audit:
                await connection.executemany(_AUDIT_INSERT, _audit_rows(audit))
        return deleted

    async def delete_blocks(self, ids: Iterable[int]) -> int:
        """Delete the blocks with these ids; returns how many went."""
        id_list = list(ids)
        if not id_list:
            return 0
        status = await self._pool.execute(
            "DELETE FROM blocks WHERE id = ANY($1::bigint[])", id_list
        )
        return _changed(status)

    async def clear_scope(self, scope: str, audit: Sequence[AuditEntry] = ()) -> int:
        """Delete every block of a scope, pinned included; returns how many went."""
        async with self._transaction(scope) as connection:
            count = _changed(await connection.execute("DELETE FROM blocks WHERE scope = $1", scope))
            if count and audit:
                await connection.executemany(_AUDIT_INSERT, _audit_rows(audit))
        return count

    # --- model-call counters ------------------------------------------------------------------

    async def start_model_call(self, scopes: Sequence[str]) -> tuple[list[Block], dict[str, int]]:
        """Count one model call for each scope and return, in one query, the scopes' blocks and,
        for each scope that has blocks, its call count before this call."""
        if not scopes:
            return [], {}
        rows = await self._pool.fetch(
            f"SELECT {BLOCK_COLUMNS}, (SELECT calls FROM scope_calls c WHERE c.scope = "
            "blocks.scope) FROM blocks WHERE scope = ANY($1::text[])",
            list(scopes),
        )
        stored = {row[1]: row[12] or 0 for row in rows}
        return [block_from_row(row) for row in rows], self._pending_calls.count(scopes, stored)

    async def flush_calls(self) -> None:
        """Write the counted model calls that are not yet on the server."""
        pending = self._pending_calls.take()
        if not pending:
            return
        try:
            await self._pool.executemany(
                "INSERT INTO scope_calls (scope, calls) VALUES ($1, $2) ON CONFLICT (scope) "
                "DO UPDATE SET calls = scope_calls.calls + EXCLUDED.calls",
                list(pending.items()),
            )
        except BaseException:
            self._pending_calls.give_back(pending)
            raise

    async def model_calls(self, scope: str) -> int:
        """How many model calls have been made with this scope."""
        stored = await self._pool.fetchval("SELECT calls FROM scope_calls WHERE scope = $1", scope)
        return int(stored or 0) + self._pending_calls.of(scope)

    # --- history --------------------------------------------------------------------------------

    async def history(self, session: str) -> list[HistoryEntry]:
        """The stored history: its summary (if any) first, then turns oldest first."""
        rows = await self._pool.fetch(
            "SELECT id, role, content FROM history WHERE session = $1 "
            "ORDER BY role != 'summary', id",
            session,
        )
        return [HistoryEntry(id=row[0], role=row[1], content=row[2]) for row in rows]

    async def append_turn(
        self,
        session: str,
        user_text: str,
        reply: str,
        *,
        now: datetime,
        drop_ids: Sequence[int] = (),
    ) -> None:
        """Record one completed turn (both messages or neither), then forget drop_ids."""
        await self._pool.execute(
            "INSERT INTO history (session, role, content, created_at) VALUES "
            "($1, 'user', $2, $4), ($1, 'assistant', $3, $4)",
            session,
            user_text,
            reply,
            ts(now),
        )
        await self.flush_calls()
        if drop_ids:
            await self._pool.execute(
                "DELETE FROM history WHERE session = $1 AND id = ANY($2::bigint[])",
                session,
                list(drop_ids),
            )

    async def compact_history(
        self, session: str, drop_ids: Sequence[int], summary: str | None, *, now: datetime
    ) -> None:
        """Replace the entries in drop_ids with summary (or just forget them), in one
        transaction."""
        async with self._transaction() as connection:
            if drop_ids:
                await connection.execute(
                    "DELETE FROM history WHERE session = $1 AND id = ANY($2::bigint[])",
                    session,
                    list(drop_ids),
                )
            if summary is not None:
                await connection.execute(
                    "DELETE FROM history WHERE session = $1 AND role = 'summary'", session
                )
                await connection.execute(
                    "INSERT INTO history (session, role, content, created_at) "
                    "VALUES ($1, 'summary', $2, $3)",
                    session,
                    summary,
                    ts(now),
                )

    async def clear_history(self, session: str) -> int:
        """Forget a conversation's history (never its blocks); returns entries deleted."""
        return _changed(await self._pool.execute("DELETE FROM history WHERE session = $1", session))

    # --- export and import ------------------------------------------------------------------------

    async def export_scopes(self) -> dict[str, tuple[int, list[Block]]]:
        """Every scope that has blocks or counted calls: its call count and blocks (oldest
        first)."""
        await self.flush_calls()
        scopes: dict[str, tuple[int, list[Block]]] = {}
        for row in await self._pool.fetch("SELECT scope, calls FROM scope_calls"):
            scopes[row[0]] = (int(row[1]), [])
        rows = await self._pool.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks ORDER BY scope, created_at, id"
        )
        for row in rows:
            block = block_from_row(row)
            scopes.setdefault(block.scope, (0, []))[1].append(block)
        return scopes

    async def replace_scopes(
        self,
        scopes: dict[str, tuple[int, list[Block]]],
        *,
        now: datetime,
        audited: Collection[str] = (),
    ) -> int:
        """Make each given scope hold exactly these blocks and this call count, in one
        transaction; changes to the scopes in audited go to their audit trail."""
        await self.flush_calls()
        written = 0
        async with self._transaction(*scopes) as connection:
            for scope, (calls, blocks) in scopes.items():
                if scope in audited:
                    rows = await connection.fetch(
                        "SELECT label_key, label, content FROM blocks WHERE scope = $1", scope
                    )
                    before = {row[0]: (row[1], row[2]) for row in rows}
                    await connection.executemany(
                        "INSERT INTO shared_audit (group_scope, at, actor, action, label, "
                        "old_content, new_content) VALUES ($1, $2, 'import', 'import', $3, $4, $5)",
                        import_audit_rows(scope, before, blocks, now),
                    )
                await connection.execute("DELETE FROM blocks WHERE scope = $1", scope)
                await connection.execute(
                    "INSERT INTO scope_calls (scope, calls) VALUES ($1, $2) "
                    "ON CONFLICT (scope) DO UPDATE SET calls = EXCLUDED.calls",
                    scope,
                    calls,
                )
                await connection.executemany(
                    _INSERT_BLOCK_ROW,
                    block_insert_rows(scope, blocks),
                )
                written += len(blocks)
        return written

    # --- audit trail of shared blocks -------------------------------------------------------------

    async def audit_log(self, group_scope: str, limit: int) -> list[AuditEntry]:
        """The latest changes to a group's shared blocks, newest first."""
        rows = await self._pool.fetch(
            f"SELECT {AUDIT_COLUMNS} "
            "FROM shared_audit WHERE group_scope = $1 ORDER BY at DESC, id DESC LIMIT $2",
            group_scope,
            limit,
        )
        return [audit_from_row(r) for r in rows]

    async def prune_audit(self, group_scope: str, before: datetime) -> int:
        """Forget a group's audit entries older than before; returns how many went."""
        status = await self._pool.execute(
            "DELETE FROM shared_audit WHERE group_scope = $1 AND at < $2", group_scope, ts(before)
        )
        return _changed(status)

    # --- usage of the model ----------------------------------------------------------------------

    # --- browsing, for the web page ---------------------------------------------------------

    async def scopes_with_prefix(
        self, prefix: str, *, after: str, limit: int
    ) -> list[tuple[str, int]]:
        """Scopes holding blocks whose keys start with prefix and sort after the key after, in
        key order, each with its number of blocks; at most limit of them."""
        low, high = prefix_range(prefix)
        rows = await self._pool.fetch(
            "SELECT scope, COUNT(*) FROM blocks WHERE scope >= $1 "
            "AND scope < $2 AND scope > $3 "
            "GROUP BY scope ORDER BY scope LIMIT $4",
            low,
            high,
            after,
            limit,
        )
        return [(row[0], int(row[1])) for row in rows if row[0].startswith(prefix)]

    async def blocks_with_prefix(self, prefix: str) -> list[Block]:
        """Every block of the scopes whose keys start with prefix, by scope, oldest first."""
        low, high = prefix_range(prefix)
        rows = await self._pool.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope >= $1 "
            "AND scope < $2 ORDER BY scope, created_at, id",
            low,
            high,
        )
        return [block_from_row(row) for row in rows if row[1].startswith(prefix)]

    async def search_blocks(
        self, text: str, *, limit: int, skip_scopes_like: str | None = None
    ) -> list[Block]:
        """Blocks whose label or content contains text (case-insensitively), at most limit, by
        scope; scopes matching the LIKE pattern skip_scopes_like are left out."""
        pattern = like_pattern(text)
        rows = await self._pool.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE (label ILIKE $1 OR content ILIKE $1) "
            "AND ($2::text IS NULL OR scope NOT LIKE $2) "
            "ORDER BY scope, created_at, id LIMIT $3",
            pattern,
            skip_scopes_like,
            limit,
        )
        return [block_from_row(row) for row in rows]

    async def audit_entries(
        self,
        *,
        group: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> list[AuditEntry]:
        """Changes to shared blocks, newest first, filtered by group, actor, kind of change
        (a word of the action, e.g. 'edit'), and time [since, until); a page of them."""
        where, args = audit_filter(
            lambda n: f"${n}", group=group, actor=actor, action=action, since=since, until=until
        )
        rows = await self._pool.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM shared_audit {where} ORDER BY at DESC, id DESC "
            f"LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}",
            *args,
            limit,
            offset,
        )
        return [audit_from_row(r) for r in rows]

    async def usage_days(
        self, first_day: str, *, sender: tuple[str, str] | None = None, group_key: str = ""
    ) -> list[tuple[str, UsageTotals]]:
        """Usage per UTC day since first_day, oldest first: of one sender (platform, id), of
        one group, or of everyone. Each case reads its own index."""
        if sender is not None:
            where, args = "platform = $1 AND sender = $2 AND day >= $3", [*sender, first_day]
        elif group_key:
            where, args = "group_key = $1 AND day >= $2", [group_key, first_day]
        else:
            where, args = "day >= $1", [first_day]
        rows = await self._pool.fetch(
            f"SELECT day, {USAGE_SUMS} FROM usage WHERE {where} GROUP BY day ORDER BY day",
            *args,
        )
        return [(row[0], totals(tuple(row)[1:])) for row in rows]

    async def add_usage(
        self, *, platform: str, sender: str, day: str, group_key: str, usage: UsageTotals
    ) -> None:
        """Add one call's usage to its sender's row for that UTC day and chat ('' for DMs)."""
        await self._pool.execute(
            "INSERT INTO usage (platform, sender, day, group_key, calls, prompt_tokens, "
            "cached_tokens, completion_tokens, estimated_calls) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "ON CONFLICT (platform, sender, day, group_key) DO UPDATE SET "
            "calls = usage.calls + EXCLUDED.calls, "
            "prompt_tokens = usage.prompt_tokens + EXCLUDED.prompt_tokens, "
            "cached_tokens = usage.cached_tokens + EXCLUDED.cached_tokens, "
            "completion_tokens = usage.completion_tokens + EXCLUDED.completion_tokens, "
            "estimated_calls = usage.estimated_calls + EXCLUDED.estimated_calls",
            platform,
            sender,
            day,
            group_key,
            usage.calls,
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            usage.estimated_calls,
        )

    async def sender_usage(
        self, platform: str, sender: str, first_day: str, last_day: str
    ) -> UsageTotals:
        """A sender's usage across all chats, over the UTC days first_day..last_day."""
        row = await self._pool.fetchrow(
            f"SELECT {USAGE_SUMS} FROM usage WHERE platform = $1 AND sender = $2 "
            "AND day BETWEEN $3 AND $4",
            platform,
            sender,
            first_day,
            last_day,
        )
        return totals(tuple(row or ()))

    async def group_usage(self, group_key: str, first_day: str, last_day: str) -> UsageTotals:
        """A group's usage, all its members together, over the UTC days first_day..last_day."""
        row = await self._pool.fetchrow(
            f"SELECT {USAGE_SUMS} FROM usage WHERE group_key = $1 AND day BETWEEN $2 AND $3",
            group_key,
            first_day,
            last_day,
        )
        return totals(tuple(row or ()))

    async def usage_report(
        self, first_day: str, limit: int = -1
    ) -> tuple[list[UsageRow], list[UsageRow]]:
        """Per sender (across chats) and per group, usage since first_day, most tokens first;
        at most limit of each (-1: all)."""
        users = await self._pool.fetch(
            f"SELECT platform, sender, {USAGE_SUMS} FROM usage WHERE day >= $1 "
            "GROUP BY platform, sender ORDER BY SUM(prompt_tokens + completion_tokens) DESC, "
            "platform, sender LIMIT $2",
            first_day,
            None if limit < 0 else limit,
        )
        groups = await self._pool.fetch(
            f"SELECT platform, group_key, {USAGE_SUMS} FROM usage WHERE day >= $1 "
            "AND group_key != '' GROUP BY platform, group_key "
            "ORDER BY SUM(prompt_tokens + completion_tokens) DESC, group_key LIMIT $2",
            first_day,
            None if limit < 0 else limit,
        )
        return (
            [UsageRow(r[0], r[1], totals(tuple(r)[2:])) for r in users],
            [UsageRow(r[0], r[1], totals(tuple(r)[2:])) for r in groups],
        )

    # --- delivery: updates recorded on arrival, chat leases, rate buckets ---------------------

    async def register_worker(self, *, now: datetime, sole: str | None = None) -> int:
        """Join the workers serving this store; returns this worker's id. The worker counts as
        live while this store is open and its process runs. With sole, also hold that role alone
        (one poller per bot): raises WorkerConflict when a live worker holds it already."""
        liveness = await asyncpg.connect(self._url)
        try:
            worker = int(
                await liveness.fetchval(
                    "INSERT INTO workers (started_at, host, pid) VALUES ($1, $2, $3) RETURNING id",
                    ts(now),
                    socket.gethostname(),
                    os.getpid(),
                )
            )
            await liveness.execute("SELECT pg_advisory_lock($1, $2)", WORKER_LOCKS, worker)
            if sole is not None and not await liveness.fetchval(
                "SELECT pg_try_advisory_lock($1, hashtext($2))", SOLE_LOCKS, sole
            ):
                raise WorkerConflict(f"another live pinbot worker already runs as {sole}")
        except BaseException:
            await liveness.close()
            raise
        if self._liveness is not None:
            await self._leave()
        self._liveness, self._worker = liveness, worker
        liveness.add_termination_listener(self._liveness_ended)
        return worker

    @property
    def worker_live(self) -> bool:
        """Whether this worker still counts as live for the others (its liveness connection is
        up). When it is not, the others may take its chats: stop and register again."""
        return self._liveness is not None and not self._liveness.is_closed()

    def _liveness_ended(self, connection: object) -> None:
        if connection is self._liveness:
            log.error(
                "lost the connection that keeps worker %d live; its chats go to the other "
                "workers until it registers again",
                self._worker,
            )

    async def leave_workers(self) -> None:
        """Stop being a live worker: this worker's chats and sole role go to the others."""
        await self._leave()

    async def _leave(self) -> None:
        liveness, self._liveness = self._liveness, None  # first: closing it is no loss
        if liveness is not None:
            await liveness.close()

    async def record_update(
        self, platform: str, event_id: str, *, chat: str, position: int, payload: str, now: datetime
    ) -> bool:
        """Record an update as it arrives; False if this event was recorded before (a repeated
        delivery, to any worker, which must not be processed again)."""
        status = await self._pool.execute(
            "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            platform,
            event_id,
            chat,
            position,
            payload,
            ts(now),
        )
        return _changed(status) == 1

    async def claim_chat(self, chat: str, *, now: datetime) -> bool:
        """Take the chat's lease for this worker unless another live worker holds it; True when
        this worker holds it now."""
        row = await self._pool.fetchrow(
            "INSERT INTO chat_leases (chat, owner, since) VALUES ($1, $2, $3) "
            "ON CONFLICT (chat) DO UPDATE SET owner = EXCLUDED.owner, since = EXCLUDED.since "
            f"WHERE chat_leases.owner = EXCLUDED.owner OR chat_leases.owner NOT IN ({_LIVE}) "
            "RETURNING owner",
            chat,
            self._worker,
            ts(now),
        )
        return row is not None

    async def next_update(self, chat: str) -> PendingUpdate | None:
        """The chat's first unprocessed update in order, if any."""
        row = await self._pool.fetchrow(
            "SELECT seq, platform, payload FROM inbox WHERE chat = $1 AND done_at IS NULL "
            "ORDER BY position, seq LIMIT 1",
            chat,
        )
        return PendingUpdate(int(row[0]), row[1], row[2]) if row else None

    async def finish_update(self, seq: int, *, now: datetime) -> None:
        """Mark an update processed."""
        await self._pool.execute("UPDATE inbox SET done_at = $1 WHERE seq = $2", ts(now), seq)

    async def release_chat(self, chat: str) -> bool:
        """Give up the chat's lease unless updates of it wait; True when this worker no longer
        holds it (released, or taken over), False when updates wait and the lease is still ours.

        An update recorded while this runs is either seen waiting here, or its worker's claim
        waits for this delete and then takes the chat."""
        keep = await self._pool.fetchval(
            "WITH waiting AS (SELECT EXISTS (SELECT 1 FROM inbox WHERE chat = $1 "
            "AND done_at IS NULL) AS yes), "
            "released AS (DELETE FROM chat_leases WHERE chat = $1 AND owner = $2 "
            "AND NOT (SELECT yes FROM waiting) RETURNING 1) "
            "SELECT (SELECT yes FROM waiting) AND EXISTS (SELECT 1 FROM chat_leases "
            "WHERE chat = $1 AND owner = $2)",
            chat,
            self._worker,
        )
        return not keep

    async def drop_lease(self, chat: str) -> None:
        """Give up the chat's lease whatever waits (another worker will take the chat up)."""
        await self._pool.execute(
            "DELETE FROM chat_leases WHERE chat = $1 AND owner = $2", chat, self._worker
        )

    async def abandoned_chats(self, limit: int) -> list[str]:
        """Chats with unprocessed updates that no other live worker holds, at most limit of
        them."""
        rows = await self._pool.fetch(
            "SELECT DISTINCT i.chat FROM inbox i LEFT JOIN chat_leases l ON l.chat = i.chat "
            "WHERE i.done_at IS NULL "
            f"AND (l.owner IS NULL OR l.owner = $2 OR l.owner NOT IN ({_LIVE})) LIMIT $1",
            limit,
            self._worker,
        )
        return [row[0] for row in rows]

    async def forget_updates_before(self, moment: datetime) -> int:
        """Drop updates processed before moment; returns how many went."""
        return _changed(
            await self._pool.execute("DELETE FROM inbox WHERE done_at < $1", ts(moment))
        )

    async def take_token(
        self, key: str, *, capacity: float, per_s: float, now: datetime
    ) -> float | None:
        """Take one token from key's bucket (capacity tokens, refilled at per_s); None if one
        was there, else the seconds until one is. Exact across workers: the row is locked."""
        refilled = "LEAST($2, rate_buckets.tokens + ($4 - rate_buckets.at) * $3)"
        left = f"({refilled} - CASE WHEN {refilled} >= 1 THEN 1 ELSE 0 END)"
        row = await self._pool.fetchrow(
            "INSERT INTO rate_buckets (key, tokens, at, full_at, granted) "
            "VALUES ($1, $2::float8 - 1, $4::float8, $4::float8 + 1 / $3::float8, true) "
            f"ON CONFLICT (key) DO UPDATE SET granted = {refilled} >= 1, tokens = {left}, "
            f"full_at = $4 + ($2 - {left}) / $3, at = $4 "
            "RETURNING granted, tokens",
            key,
            float(capacity),
            float(per_s),
            ts(now),
        )
        assert row is not None
        return None if row[0] else (1 - row[1]) / per_s

    async def forget_full_buckets(self, now: datetime) -> int:
        """Drop rate buckets that are full again (a new bucket behaves the same)."""
        return _changed(
            await self._pool.execute("DELETE FROM rate_buckets WHERE full_at <= $1", ts(now))
        )

    # --- moving a group ---------------------------------------------------------------------------

    async def move_group(
        self, old: str, new: str, *, members_prefix: str, sessions_prefix: str
    ) -> int:
        """Move a group's blocks, counters and history from the key old to new, in one
        transaction; returns how many blocks moved. A block whose label already exists at the
        destination stays where it was."""
        await self.flush_calls()
        in_group = "(scope = $1 OR starts_with(scope, $3))"
        renamed = "$2 || substr(scope, length($1) + 1)"
        async with self._transaction(old, new) as connection:
            status = await connection.execute(
                "UPDATE blocks b SET scope = $2 || substr(b.scope, length($1) + 1) "
                "WHERE (b.scope = $1 OR starts_with(b.scope, $3)) AND NOT EXISTS (SELECT 1 FROM "
                "blocks d WHERE d.scope = $2 || substr(b.scope, length($1) + 1) "
                "AND d.label_key = b.label_key)",
                old,
                new,
                members_prefix,
            )
            await connection.execute(
                f"INSERT INTO scope_calls (scope, calls) SELECT {renamed}, calls FROM scope_calls "
                f"WHERE {in_group} ON CONFLICT (scope) DO UPDATE SET "
                "calls = scope_calls.calls + EXCLUDED.calls",
                old,
                new,
                members_prefix,
            )
            await connection.execute(
                "DELETE FROM scope_calls WHERE scope = $1 OR starts_with(scope, $2)",
                old,
                members_prefix,
            )
            await connection.execute(
                "UPDATE shared_audit SET group_scope = $2 WHERE group_scope = $1", old, new
            )
            await connection.execute(
                "UPDATE history SET session = $2 || substr(session, length($1) + 1) "
                "WHERE session = $1 OR starts_with(session, $3)",
                old,
                new,
                sessions_prefix,
            )
        return _changed(status)

    # --- the whole store, for pinbot transfer -----------------------------------------------------

    async def schema_version(self) -> int:
        """The number of the last migration applied."""
        async with self._pool.acquire() as connection:
            return await schema_version(connection)

    async def dump(self) -> Dump:
        """Every row of every table a transfer copies."""
        await self.flush_calls()
        result: Dump = {}
        for table, (columns, order) in TABLES.items():
            rows = await self._pool.fetch(f"SELECT {columns} FROM {table} ORDER BY {order}")
            result[table] = [tuple(row) for row in rows]
        return result

    async def is_empty(self) -> bool:
        """Whether no table a transfer copies holds a row."""
        for table in TABLES:
            if await self._pool.fetchval(f"SELECT 1 FROM {table} LIMIT 1") is not None:
                return False
        return True

    async def load(self, dump: Dump) -> None:
        """Add every row of a dump, in one transaction."""
        async with self._transaction() as connection:
            for table, (columns, _) in TABLES.items():
                marks = ", ".join(f"${n}" for n in range(1, len(columns.split(",")) + 1))
                await connection.executemany(
                    f"INSERT INTO {table} ({columns}) VALUES ({marks})", dump.get(table, [])
                )

    async def integrity_ok(self) -> bool:
        """Whether the server answers (PostgreSQL checks its own integrity)."""
        return bool(await self._pool.fetchval("SELECT true"))
