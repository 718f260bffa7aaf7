"""The store over aiosqlite: every statement and transaction of pinbot lives here.

The connection runs in autocommit mode, and every write is a single guarded statement, so a write is
durable when its call returns and limits hold under any concurrency: a guard that no longer holds
makes the statement change nothing, and the caller re-reads and decides again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import sqlite3
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from storage.buckets import TokenBuckets
from storage.migrations import migrate, schema_version
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
from storage.rows import (
    AUDIT_COLUMNS,
    BLOCK_COLUMNS,
    BLOCK_INSERT_COLUMNS,
    PRIVATE_FILE_MODE,
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

_INSERT_BLOCK_ROW = (
    f"INSERT INTO blocks ({', '.join(BLOCK_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(BLOCK_INSERT_COLUMNS))})"
)
BUSY_TIMEOUT_MS = 5000  # how long a write waits for another connection's transaction
WAL_ATTEMPTS = 50
WAL_RETRY_S = 0.01


def _placeholders(count: int) -> str:
    return ",".join("?" * count)


async def _use_wal(db: aiosqlite.Connection) -> None:
    """Switch to WAL. The switch needs the database to itself and SQLite does not wait for it
    (busy_timeout does not apply), so processes opening a new file at once take turns."""
    for attempt in range(1, WAL_ATTEMPTS + 1):
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == WAL_ATTEMPTS:
                raise
            await asyncio.sleep(WAL_RETRY_S * attempt)


class Store:
    """pinbot's SQLite database: blocks per scope, per-scope model-call counts, history."""

    def __init__(self, db: aiosqlite.Connection, path: Path | None = None) -> None:
        self._db = db
        self._path = path
        self._worker = 0  # this process's worker id once it serves (register_worker)
        self._serving: int | None = None  # the file descriptor holding the one-server lock
        # Single-statement writes take this lock too, so none of them can land inside (and be
        # rolled back with) a multi-statement transaction on this shared connection.
        self._write_lock = asyncio.Lock()
        self._pending_calls = PendingCalls()
        self._buckets = TokenBuckets()

    @classmethod
    async def open(cls, path: str | Path) -> Store:
        """Open (creating if needed) the database at path, in WAL mode, migrated to the latest."""
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # It holds DM blocks and chat history: its owner only. SQLite gives the -wal and
            # -shm files the database file's permissions.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, PRIVATE_FILE_MODE))
            os.chmod(path, PRIVATE_FILE_MODE)
        db = await aiosqlite.connect(path, isolation_level=None)
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await _use_wal(db)
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.execute("PRAGMA foreign_keys = ON")
            await migrate(db)
        except BaseException:
            await db.close()
            raise
        return cls(db, None if str(path) == ":memory:" else Path(path))

    async def close(self) -> None:
        """Write pending counts and close the connection; committed data is on disk."""
        try:
            await self.flush_calls()
            await self._db.close()
        finally:
            await self.leave_workers()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _write(
        self,
        sql: str,
        args: Sequence[Any] | dict[str, Any] = (),
        audit: Sequence[AuditEntry] = (),
    ) -> aiosqlite.Cursor:
        """One write statement, committed on return; with audit entries, they are recorded in
        the same transaction when the statement changed anything."""
        async with self._write_lock:
            if not audit:
                return await self._db.execute(sql, args)
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                cursor = await self._db.execute(sql, args)
                if cursor.rowcount > 0:
                    await self._db.executemany(
                        "INSERT INTO shared_audit (group_scope, at, actor, action, label, "
                        "old_content, new_content) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [
                            (
                                e.group_scope,
                                ts(e.at),
                                e.actor,
                                e.action,
                                e.label,
                                e.old_content,
                                e.new_content,
                            )
                            for e in audit
                        ],
                    )
            except BaseException:
                await self._db.execute("ROLLBACK")
                raise
            await self._db.execute("COMMIT")
            return cursor

    # --- blocks -------------------------------------------------------------------------------

    async def blocks(self, scopes: Sequence[str]) -> list[Block]:
        """Every block of the given scopes, in any state, oldest creation first."""
        if not scopes:
            return []
        rows = await self._db.execute_fetchall(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope IN ({_placeholders(len(scopes))}) "
            "ORDER BY created_at, id",
            tuple(scopes),
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
        """Insert unless the label exists or the scope's block or character limit would break.

        Returns whether the block was inserted (and committed).
        """
        stamp = ts(now)
        try:
            cursor = await self._write(
                "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
                "created_at, updated_at, idle_since, idle_calls) "
                "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL "
                "WHERE (SELECT COUNT(*) FROM blocks WHERE scope = ?) < ? "
                "AND (? = 0 OR (SELECT TOTAL(length(content)) FROM blocks WHERE scope = ?) "
                "+ length(?) <= ?)",
                (
                    new.scope,
                    new.label,
                    label_key(new.label),
                    new.content,
                    new.level.value,
                    new.state.value,
                    new.priority,
                    stamp,
                    stamp,
                    new.scope,
                    max_blocks,
                    max_total_chars,
                    new.scope,
                    new.content,
                    max_total_chars,
                ),
                audit,
            )
        except sqlite3.IntegrityError:
            return False
        return cursor.rowcount == 1

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
        """Change a block if it is still at the revision read, unless the change makes the scope's
        content larger and over max_total_chars (0: no budget).

        Making a block idle records the time and the scope's model-call count at that moment;
        leaving idle clears both. Returns whether the change was committed.
        """
        new_content = block.content if content is None else content
        new_level = block.level if level is None else level
        new_state = block.state if state is None else state
        new_priority = block.priority if priority is None else priority
        if new_state is State.IDLE and block.state is not State.IDLE:
            await self.flush_calls()  # the idle mark records the scope's current count
            idle_sql = (
                "idle_since = ?, idle_calls = (SELECT COALESCE(MAX(calls), 0) "
                "FROM scope_calls WHERE scope = blocks.scope)"
            )
            idle_args: tuple[Any, ...] = (ts(now),)
        elif new_state is State.IDLE:
            idle_sql, idle_args = "idle_since = idle_since", ()
        else:
            idle_sql, idle_args = "idle_since = NULL, idle_calls = NULL", ()
        cursor = await self._write(
            f"UPDATE blocks SET content = ?, level = ?, state = ?, priority = ?, updated_at = ?, "
            f"{idle_sql}, "
            "rev = rev + 1 WHERE id = ? AND rev = ? "
            # The budget refuses only a change that makes the scope larger and over budget.
            "AND (? = 0 OR length(?) <= length(content) OR (SELECT TOTAL(length(b.content)) "
            "FROM blocks b WHERE b.scope = blocks.scope) - length(content) + length(?) <= ?)",
            (
                new_content,
                new_level.value,
                new_state.value,
                new_priority,
                ts(now),
                *idle_args,
                block.id,
                block.rev,
                max_total_chars,
                new_content,
                new_content,
                max_total_chars,
            ),
            audit,
        )
        return cursor.rowcount == 1

    async def delete_block(self, block: Block, audit: Sequence[AuditEntry] = ()) -> bool:
        """Delete a block if it still exists; returns whether a row went."""
        cursor = await self._write("DELETE FROM blocks WHERE id = ?", (block.id,), audit)
        return cursor.rowcount == 1

    async def delete_blocks(self, ids: Iterable[int]) -> int:
        """Delete the blocks with these ids; returns how many went."""
        id_list = list(ids)
        if not id_list:
            return 0
        cursor = await self._write(
            f"DELETE FROM blocks WHERE id IN ({_placeholders(len(id_list))})", tuple(id_list)
        )
        return cursor.rowcount

    async def clear_scope(self, scope: str, audit: Sequence[AuditEntry] = ()) -> int:
        """Delete every block of a scope, pinned included; returns how many went."""
        cursor = await self._write("DELETE FROM blocks WHERE scope = ?", (scope,), audit)
        return cursor.rowcount

    # --- model-call counters ------------------------------------------------------------------

    async def start_model_call(self, scopes: Sequence[str]) -> tuple[list[Block], dict[str, int]]:
        """Count one model call for each scope and return, in one query, the scopes' blocks (in any
        state, in no particular order) and, for each scope that has blocks, its call count before
        this call."""
        if not scopes:
            return [], {}
        rows = await self._db.execute_fetchall(
            f"SELECT {BLOCK_COLUMNS}, (SELECT calls FROM scope_calls c WHERE c.scope = "
            f"blocks.scope) FROM blocks WHERE scope IN ({_placeholders(len(scopes))})",
            tuple(scopes),
        )
        stored: dict[str, int] = {}
        blocks = []
        for row in rows:
            blocks.append(block_from_row(row))
            stored[row[1]] = row[12] or 0
        return blocks, self._pending_calls.count(scopes, stored)

    async def flush_calls(self) -> None:
        """Write the counted model calls that are not yet on disk."""
        pending = self._pending_calls.take()
        if not pending:
            return
        try:
            async with self._write_lock:
                await self._db.executemany(
                    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET calls = calls + excluded.calls",
                    list(pending.items()),
                )
        except BaseException:
            self._pending_calls.give_back(pending)
            raise

    async def model_calls(self, scope: str) -> int:
        """How many model calls have been made with this scope."""
        rows = await self._db.execute_fetchall(
            "SELECT calls FROM scope_calls WHERE scope = ?", (scope,)
        )
        stored = next((int(row[0]) for row in rows), 0)
        return stored + self._pending_calls.of(scope)

    # --- history --------------------------------------------------------------------------------

    async def history(self, session: str) -> list[HistoryEntry]:
        """The stored history: its summary (if any) first, then turns oldest first."""
        rows = await self._db.execute_fetchall(
            "SELECT id, role, content FROM history WHERE session = ? "
            "ORDER BY role != 'summary', id",
            (session,),
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
        stamp = ts(now)
        # One statement writes both messages, so a crash never leaves half a turn; dropping the
        # compacted entries afterwards is idempotent and harmless if it never happens.
        await self._write(
            "INSERT INTO history (session, role, content, created_at) VALUES (?, ?, ?, ?), "
            "(?, ?, ?, ?)",
            (session, "user", user_text, stamp, session, "assistant", reply, stamp),
        )
        await self.flush_calls()
        if drop_ids:
            await self._write(
                f"DELETE FROM history WHERE session = ? AND id IN ({_placeholders(len(drop_ids))})",
                (session, *drop_ids),
            )

    async def compact_history(
        self, session: str, drop_ids: Sequence[int], summary: str | None, *, now: datetime
    ) -> None:
        """Replace the entries in drop_ids with summary (or just forget them), in one
        transaction."""
        async with self._transaction():
            if drop_ids:
                await self._db.execute(
                    f"DELETE FROM history WHERE session = ? AND id IN "
                    f"({_placeholders(len(drop_ids))})",
                    (session, *drop_ids),
                )
            if summary is not None:
                await self._db.execute(
                    "DELETE FROM history WHERE session = ? AND role = 'summary'", (session,)
                )
                await self._db.execute(
                    "INSERT INTO history (session, role, content, created_at) "
                    "VALUES (?, 'summary', ?, ?)",
                    (session, summary, ts(now)),
                )

    async def clear_history(self, session: str) -> int:
        """Forget a conversation's history (never its blocks); returns entries deleted."""
        cursor = await self._write("DELETE FROM history WHERE session = ?", (session,))
        return cursor.rowcount

    # --- export and import ------------------------------------------------------------------------

    async def export_scopes(self) -> dict[str, tuple[int, list[Block]]]:
        """Every scope that has blocks or counted calls: its call count and blocks (oldest
        first)."""
        await self.flush_calls()
        scopes: dict[str, tuple[int, list[Block]]] = {}
        for row in await self._db.execute_fetchall("SELECT scope, calls FROM scope_calls"):
            scopes[row[0]] = (int(row[1]), [])
        rows = await self._db.execute_fetchall(
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
        """Make each given scope hold exactly these blocks (times, states and all) and this call
        count, in one transaction; other scopes are untouched. Changes to the scopes in audited
        go to their audit trail. Returns blocks written."""
        await self.flush_calls()
        written = 0
        async with self._transaction():
            for scope, (calls, blocks) in scopes.items():
                if scope in audited:
                    await self._audit_import(scope, blocks, now)
                await self._db.execute("DELETE FROM blocks WHERE scope = ?", (scope,))
                await self._db.execute(
                    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET calls = excluded.calls",
                    (scope, calls),
                )
                await self._db.executemany(
                    _INSERT_BLOCK_ROW,
                    block_insert_rows(scope, blocks),
                )
                written += len(blocks)
        return written

    # --- audit trail of shared blocks -------------------------------------------------------------

    async def audit_log(self, group_scope: str, limit: int) -> list[AuditEntry]:
        """The latest changes to a group's shared blocks, newest first."""
        rows = await self._db.execute_fetchall(
            f"SELECT {AUDIT_COLUMNS} "
            "FROM shared_audit WHERE group_scope = ? ORDER BY at DESC, id DESC LIMIT ?",
            (group_scope, limit),
        )
        return [audit_from_row(r) for r in rows]

    async def prune_audit(self, group_scope: str, before: datetime) -> int:
        """Forget a group's audit entries older than before; returns how many went."""
        cursor = await self._write(
            "DELETE FROM shared_audit WHERE group_scope = ? AND at < ?", (group_scope, ts(before))
        )
        return cursor.rowcount

    async def _audit_import(self, scope: str, blocks: list[Block], now: datetime) -> None:
        rows = await self._db.execute_fetchall(
            "SELECT label_key, label, content FROM blocks WHERE scope = ?", (scope,)
        )
        before = {row[0]: (row[1], row[2]) for row in rows}
        await self._db.executemany(
            "INSERT INTO shared_audit (group_scope, at, actor, action, label, old_content, "
            "new_content) VALUES (?, ?, 'import', 'import', ?, ?, ?)",
            import_audit_rows(scope, before, blocks, now),
        )

    # --- usage of the model ----------------------------------------------------------------------

    # --- browsing, for the web page ---------------------------------------------------------

    async def scopes_with_prefix(
        self, prefix: str, *, after: str, limit: int
    ) -> list[tuple[str, int]]:
        """Scopes holding blocks whose keys start with prefix and sort after the key after, in
        key order, each with its number of blocks; at most limit of them."""
        low, high = prefix_range(prefix)
        rows = await self._db.execute_fetchall(
            "SELECT scope, COUNT(*) FROM blocks WHERE scope >= ? AND scope < ? AND scope > ? "
            "GROUP BY scope ORDER BY scope LIMIT ?",
            (low, high, after, limit),
        )
        return [(row[0], int(row[1])) for row in rows if row[0].startswith(prefix)]

    async def blocks_with_prefix(self, prefix: str) -> list[Block]:
        """Every block of the scopes whose keys start with prefix, by scope, oldest first."""
        low, high = prefix_range(prefix)
        rows = await self._db.execute_fetchall(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope >= ? AND scope < ? "
            "ORDER BY scope, created_at, id",
            (low, high),
        )
        return [block_from_row(row) for row in rows if row[1].startswith(prefix)]

    async def search_blocks(
        self, text: str, *, limit: int, skip_scopes_like: str | None = None
    ) -> list[Block]:
        """Blocks whose label or content contains text (case-insensitively for ASCII), at most
        limit, by scope; scopes matching the LIKE pattern skip_scopes_like are left out."""
        pattern = like_pattern(text)
        rows = await self._db.execute_fetchall(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE (label LIKE ? ESCAPE '\\' "
            "OR content LIKE ? ESCAPE '\\') AND (? IS NULL OR scope NOT LIKE ?) "
            "ORDER BY scope, created_at, id LIMIT ?",
            (pattern, pattern, skip_scopes_like, skip_scopes_like, limit),
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
            lambda _: "?", group=group, actor=actor, action=action, since=since, until=until
        )
        rows = await self._db.execute_fetchall(
            f"SELECT {AUDIT_COLUMNS} FROM shared_audit {where} "
            "ORDER BY at DESC, id DESC LIMIT ? OFFSET ?",
            (*args, limit, offset),
        )
        return [audit_from_row(r) for r in rows]

    async def usage_days(
        self, first_day: str, *, sender: tuple[str, str] | None = None, group_key: str = ""
    ) -> list[tuple[str, UsageTotals]]:
        """Usage per UTC day since first_day, oldest first: of one sender (platform, id), of
        one group, or of everyone. Each case reads its own index."""
        if sender is not None:
            where, args = "platform = ? AND sender = ? AND day >= ?", [*sender, first_day]
        elif group_key:
            where, args = "group_key = ? AND day >= ?", [group_key, first_day]
        else:
            where, args = "day >= ?", [first_day]
        rows = await self._db.execute_fetchall(
            f"SELECT day, {USAGE_SUMS} FROM usage WHERE {where} GROUP BY day ORDER BY day",
            args,
        )
        return [(row[0], totals(row[1:])) for row in rows]

    async def add_usage(
        self, *, platform: str, sender: str, day: str, group_key: str, usage: UsageTotals
    ) -> None:
        """Add one call's usage to its sender's row for that UTC day and chat ('' for DMs)."""
        await self._write(
            "INSERT INTO usage (platform, sender, day, group_key, calls, prompt_tokens, "
            "cached_tokens, completion_tokens, estimated_calls) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (platform, sender, day, group_key) DO UPDATE SET "
            "calls = calls + excluded.calls, "
            "prompt_tokens = prompt_tokens + excluded.prompt_tokens, "
            "cached_tokens = cached_tokens + excluded.cached_tokens, "
            "completion_tokens = completion_tokens + excluded.completion_tokens, "
            "estimated_calls = estimated_calls + excluded.estimated_calls",
            (
                platform,
                sender,
                day,
                group_key,
                usage.calls,
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens,
                usage.estimated_calls,
            ),
        )

    async def sender_usage(
        self, platform: str, sender: str, first_day: str, last_day: str
    ) -> UsageTotals:
        """A sender's usage across all chats, over the UTC days first_day..last_day."""
        rows = await self._db.execute_fetchall(
            f"SELECT {USAGE_SUMS} FROM usage WHERE platform = ? AND sender = ? "
            "AND day BETWEEN ? AND ?",
            (platform, sender, first_day, last_day),
        )
        return totals(next(iter(rows)))

    async def group_usage(self, group_key: str, first_day: str, last_day: str) -> UsageTotals:
        """A group's usage, all its members together, over the UTC days first_day..last_day."""
        rows = await self._db.execute_fetchall(
            f"SELECT {USAGE_SUMS} FROM usage WHERE group_key = ? AND day BETWEEN ? AND ?",
            (group_key, first_day, last_day),
        )
        return totals(next(iter(rows)))

    async def usage_report(
        self, first_day: str, limit: int = -1
    ) -> tuple[list[UsageRow], list[UsageRow]]:
        """Per sender (across chats) and per group, usage since first_day, most tokens first;
        at most limit of each (-1: all)."""
        users = await self._db.execute_fetchall(
            f"SELECT platform, sender, {USAGE_SUMS} FROM usage WHERE day >= ? "
            "GROUP BY platform, sender ORDER BY SUM(prompt_tokens + completion_tokens) DESC, "
            "platform, sender LIMIT ?",
            (first_day, limit),
        )
        groups = await self._db.execute_fetchall(
            f"SELECT platform, group_key, {USAGE_SUMS} FROM usage WHERE day >= ? "
            "AND group_key != '' GROUP BY platform, group_key "
            "ORDER BY SUM(prompt_tokens + completion_tokens) DESC, group_key LIMIT ?",
            (first_day, limit),
        )
        return (
            [UsageRow(r[0], r[1], totals(r[2:])) for r in users],
            [UsageRow(r[0], r[1], totals(r[2:])) for r in groups],
        )

    # --- delivery: updates recorded on arrival, chat leases, rate buckets ---------------------

    async def register_worker(self, *, now: datetime, sole: str | None = None) -> int:
        """Serve this store as its one worker; returns the worker id. A SQLite database is
        served by one process at a time (sole roles are then held by definition): raises
        WorkerConflict when another process serves it already."""
        if self._path is not None and self._serving is None:
            descriptor = os.open(self._path, os.O_RDONLY)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise WorkerConflict(
                    f"another pinbot process is serving the SQLite database {self._path}"
                ) from None
            self._serving = descriptor
        cursor = await self._write(
            "INSERT INTO workers (started_at, host, pid) VALUES (?, ?, ?)",
            (ts(now), socket.gethostname(), os.getpid()),
        )
        self._worker = int(cursor.lastrowid or 0)
        return self._worker

    @property
    def worker_live(self) -> bool:
        """Whether this worker still counts as live: always, for the one process serving a
        SQLite store."""
        return True

    async def leave_workers(self) -> None:
        """Stop serving: another process may serve this database now."""
        if self._serving is not None:
            os.close(self._serving)  # releases the one-server lock
            self._serving = None

    async def record_update(
        self, platform: str, event_id: str, *, chat: str, position: int, payload: str, now: datetime
    ) -> bool:
        """Record an update as it arrives; False if this event was recorded before (a repeated
        delivery, which must not be processed again)."""
        cursor = await self._write(
            "INSERT OR IGNORE INTO inbox (platform, event_id, chat, position, payload, "
            "received_at) VALUES (?, ?, ?, ?, ?, ?)",
            (platform, event_id, chat, position, payload, ts(now)),
        )
        return cursor.rowcount == 1

    async def claim_chat(self, chat: str, *, now: datetime) -> bool:
        """Take the chat's lease for this worker unless another live worker holds it; True when
        this worker holds it now. Only this process serves a SQLite store, so any other holder
        is a process that ended."""
        await self._write(
            "INSERT INTO chat_leases (chat, owner, since) VALUES (?, ?, ?) "
            "ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, since = excluded.since",
            (chat, self._worker, ts(now)),
        )
        return True

    async def next_update(self, chat: str) -> PendingUpdate | None:
        """The chat's first unprocessed update in order, if any."""
        rows = list(
            await self._db.execute_fetchall(
                "SELECT seq, platform, payload FROM inbox WHERE chat = ? AND done_at IS NULL "
                "ORDER BY position, seq LIMIT 1",
                (chat,),
            )
        )
        return PendingUpdate(int(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    async def finish_update(self, seq: int, *, now: datetime) -> None:
        """Mark an update processed."""
        await self._write("UPDATE inbox SET done_at = ? WHERE seq = ?", (ts(now), seq))

    async def release_chat(self, chat: str) -> bool:
        """Give up the chat's lease unless updates of it wait; True when this worker no longer
        holds it (released, or taken over), False when updates wait and the lease is still ours."""
        async with self._transaction():
            waiting = await self._db.execute_fetchall(
                "SELECT 1 FROM inbox WHERE chat = ? AND done_at IS NULL LIMIT 1", (chat,)
            )
            if list(waiting):
                owners = await self._db.execute_fetchall(
                    "SELECT owner FROM chat_leases WHERE chat = ?", (chat,)
                )
                return [tuple(row) for row in owners] != [(self._worker,)]
            await self._db.execute(
                "DELETE FROM chat_leases WHERE chat = ? AND owner = ?", (chat, self._worker)
            )
        return True

    async def drop_lease(self, chat: str) -> None:
        """Give up the chat's lease whatever waits (another worker will take the chat up)."""
        await self._write(
            "DELETE FROM chat_leases WHERE chat = ? AND owner = ?", (chat, self._worker)
        )

    async def abandoned_chats(self, limit: int) -> list[str]:
        """Chats with unprocessed updates that no other live worker holds, at most limit of
        them (this process is the only live worker of a SQLite store)."""
        rows = await self._db.execute_fetchall(
            "SELECT DISTINCT chat FROM inbox WHERE done_at IS NULL LIMIT ?", (limit,)
        )
        return [row[0] for row in rows]

    async def forget_updates_before(self, moment: datetime) -> int:
        """Drop updates processed before moment; returns how many went."""
        cursor = await self._write("DELETE FROM inbox WHERE done_at < ?", (ts(moment),))
        return cursor.rowcount

    async def take_token(
        self, key: str, *, capacity: float, per_s: float, now: datetime
    ) -> float | None:
        """Take one token from key's bucket (capacity tokens, refilled at per_s); None if one
        was there, else the seconds until one is. Kept in memory: one process serves a SQLite
        store, so that is exact and costs no write."""
        return self._buckets.take(key, capacity=capacity, per_s=per_s, now=ts(now))

    async def forget_full_buckets(self, now: datetime) -> int:
        """Drop rate buckets that are full again (a new bucket behaves the same)."""
        return self._buckets.forget_full(ts(now))

    # --- moving a group ---------------------------------------------------------------------------

    async def move_group(
        self, old: str, new: str, *, members_prefix: str, sessions_prefix: str
    ) -> int:
        """Move a group's blocks, counters and history from the key old to new, in one
        transaction; returns how many blocks moved. The group's scopes are old and those starting
        with members_prefix, its history sessions old and those starting with sessions_prefix
        (both prefixes start with old, which is replaced by new).

        A block whose label already exists at the destination stays where it was, so nothing is
        overwritten or duplicated; moving twice moves nothing the second time.
        """
        prefix_match = "(scope = :old OR substr(scope, 1, length(:members)) = :members)"
        renamed = ":new || substr(scope, length(:old) + 1)"
        args = {"old": old, "new": new, "members": members_prefix, "sessions": sessions_prefix}
        await self.flush_calls()
        async with self._transaction():
            cursor = await self._db.execute(
                f"UPDATE OR IGNORE blocks SET scope = {renamed} WHERE {prefix_match}", args
            )
            moved = cursor.rowcount
            await self._db.execute(
                f"INSERT INTO scope_calls (scope, calls) SELECT {renamed}, calls FROM scope_calls "
                f"WHERE {prefix_match} AND true "
                "ON CONFLICT (scope) DO UPDATE SET calls = calls + excluded.calls",
                args,
            )
            await self._db.execute(f"DELETE FROM scope_calls WHERE {prefix_match}", args)
            await self._db.execute(
                "UPDATE shared_audit SET group_scope = :new WHERE group_scope = :old", args
            )
            await self._db.execute(
                "UPDATE history SET session = :new || substr(session, length(:old) + 1) "
                "WHERE session = :old OR substr(session, 1, length(:sessions)) = :sessions",
                args,
            )
        return moved

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        """Run several statements as one transaction; other writers wait until it ends."""
        async with self._write_lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                await self._db.execute("ROLLBACK")
                raise
            await self._db.execute("COMMIT")

    # --- the whole store, for pinbot transfer -----------------------------------------------------

    async def schema_version(self) -> int:
        """The number of the last migration applied."""
        return await schema_version(self._db)

    async def dump(self) -> Dump:
        """Every row of every table a transfer copies."""
        await self.flush_calls()
        result: Dump = {}
        for table, (columns, order) in TABLES.items():
            rows = await self._db.execute_fetchall(
                f"SELECT {columns} FROM {table} ORDER BY {order}"
            )
            result[table] = [tuple(row) for row in rows]
        return result

    async def is_empty(self) -> bool:
        """Whether no table a transfer copies holds a row."""
        for table in TABLES:
            rows = await self._db.execute_fetchall(f"SELECT 1 FROM {table} LIMIT 1")
            if list(rows):
                return False
        return True

    async def load(self, dump: Dump) -> None:
        """Add every row of a dump, in one transaction."""
        async with self._transaction():
            for table, (columns, _) in TABLES.items():
                marks = ", ".join("?" * len(columns.split(",")))
                await self._db.executemany(
                    f"INSERT INTO {table} ({columns}) VALUES ({marks})", dump.get(table, [])
                )

    async def integrity_ok(self) -> bool:
        """Whether SQLite's integrity check passes."""
        rows = await self._db.execute_fetchall("PRAGMA integrity_check")
        return [tuple(row) for row in rows] == [("ok",)]
