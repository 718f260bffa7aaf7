"""Delivery: updates recorded as they arrive, the workers that process them, the lease each
worker holds on a chat while it works through its updates, and rate-limit token buckets."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Protocol

from storage.buckets import TokenBuckets
from storage.dialect import Database, Executor, Row, Step
from storage.models import Arrival, PendingUpdate
from storage.rows import ts

_DROP = "DELETE FROM chat_leases WHERE chat = ? AND owner = ?"
_WAITING = (
    "SELECT seq, platform, payload, replies FROM inbox WHERE chat = {chat} AND done_at IS NULL "
)
_FIRST = _WAITING.format(chat="?") + "ORDER BY position, seq LIMIT 1"


def chat_updates_forgotten(chat: str) -> list[tuple[str | None, Step]]:
    """The statements forgetting a chat's updates, processed or not (counted as "updates"),
    and its lease: of a group the bot was removed from (retention)."""
    return [
        ("updates", Step("DELETE FROM inbox WHERE chat = ?", (chat,))),
        (None, Step("DELETE FROM chat_leases WHERE chat = ?", (chat,))),
    ]


def _pending(rows: list[list[Row]], step: int) -> PendingUpdate | None:
    """The update a chain's step read, if that step ran and found one."""
    found = rows[step] if len(rows) > step else []
    if not found or found[0][0] is None:  # none (or, read as one row always, its NULLs)
        return None
    return PendingUpdate(int(found[0][0]), *found[0][1:4])


class DeliveryStore(Protocol):
    """The inbox, chat leases, workers and rate buckets of one database."""

    _db: Database
    _worker: int  # this process's worker id once it serves (register_worker)
    _buckets: TokenBuckets

    async def register_worker(self, *, now: datetime, sole: str | None = None) -> int:
        """Join the workers serving this store; returns this worker's id. The worker counts as
        live while this store is open and its process runs. With sole, also hold that role alone
        (one poller per bot). WorkerConflict when a live process stands in the way (a SQLite
        database is served by one process at a time)."""
        rows = await self._db.returning(
            "INSERT INTO workers (started_at, host, pid) VALUES (?, ?, ?) RETURNING id",
            *(ts(now), socket.gethostname(), os.getpid()),
        )
        worker = int(rows[0][0])
        await self._db.join(worker, sole)
        self._worker = worker
        return worker

    @property
    def worker_live(self) -> bool:
        """Whether this worker still counts as live for the others. When it does not, the
        others may take its chats: stop and register again."""
        return self._db.worker_live

    async def hold_role(self, role: str) -> bool:
        """Hold role alone among the live workers (while this one lives) unless another holds
        it; whether this worker holds it now. Periodic jobs run where their role is held."""
        return await self._db.hold(role)

    async def leave_workers(self) -> None:
        """Stop being a live worker: this worker's chats and sole role go to the others."""
        await self._db.leave()

    def _claim(self, chat: str, now: datetime) -> Step:
        """The statement taking the chat's lease for this worker unless another live worker
        holds it; it returns a row when this worker holds it now."""
        return Step(
            "INSERT INTO chat_leases (chat, owner, since) VALUES (?, ?, ?) "
            "ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, since = excluded.since "
            "WHERE chat_leases.owner = excluded.owner "
            f"OR chat_leases.owner NOT IN ({self._db.live_workers(self._worker)}) RETURNING owner",
            (chat, self._worker, ts(now)),
        )

    async def record_update(
        self, platform: str, event_id: str, *, chat: str, position: int, payload: str, now: datetime
    ) -> Arrival:
        """Record an update as it arrives, committed on return, and in the same transaction take
        its chat for this worker unless another live worker holds it; then read the chat's first
        waiting update. Arrival.recorded is False for an event recorded before (a repeated
        delivery, to any worker, which must not be processed again); Arrival.first is the
        chat's first waiting update when this worker holds the chat now."""
        found = await self._db.chain(
            Step(
                "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING seq",
                (platform, event_id, chat, position, payload, ts(now)),
            ),
            self._claim(chat, now),
            Step(_FIRST, (chat,)),
        )
        return Arrival(bool(found[0]), _pending(found, 2))

    async def claim_chat(self, chat: str, *, now: datetime) -> bool:
        """Take the chat's lease for this worker unless another live worker holds it; True when
        this worker holds it now."""
        claim = self._claim(chat, now)
        return bool(await self._db.returning(claim.sql, *claim.args))

    async def next_update(self, chat: str) -> PendingUpdate | None:
        """The chat's first unprocessed update in order, if any."""
        return _pending([await self._db.fetch(_FIRST, chat)], 0)

    async def finish_update(self, seq: int, *, now: datetime) -> PendingUpdate | None:
        """Mark an update processed; then, in the same transaction, read its chat's next
        unprocessed update in order, if any."""
        return _pending(await self._db.chain(*self._finish(seq, now)), 1)

    async def finish_and_release(
        self, seq: int, chat: str, *, now: datetime
    ) -> tuple[PendingUpdate | None, bool]:
        """finish_update, and in the same transaction release_chat when none waits: the chat's
        next unprocessed update, and whether this worker no longer holds the chat (one round
        trip for what is otherwise two, when nothing is sent after the update is done)."""
        done, waiting = self._finish(seq, now)
        # A chain ends at a step that finds nothing: the next update is read as one row always
        # (its columns NULL when none waits), so that the release after it runs either way.
        always = Step(
            f"SELECT w.* FROM (SELECT 1 AS one) AS always LEFT JOIN ({waiting.sql}) AS w ON 1 = 1",
            waiting.args,
        )
        found = await self._db.chain(done, self._lease_lock(chat), always, self._release(chat))
        found += [[]] * (4 - len(found))  # the steps after one that found nothing did not run
        return _pending(found, 2), self._released(found[1], found[3])

    async def finish_before_reply(
        self, seq: int, chat: str, *, now: datetime
    ) -> tuple[PendingUpdate | None, bool]:
        """Mark an update processed whose answer goes out next: finish_and_release where the
        chat may be given up before that answer is sent (no other worker could take it and
        answer first), else finish_update (the chat stays held: False)."""
        if self._db.release_before_reply:
            return await self.finish_and_release(seq, chat, now=now)
        return await self.finish_update(seq, now=now), False

    @staticmethod
    def _finish(seq: int, now: datetime) -> tuple[Step, Step]:
        """The statements marking an update processed and reading its chat's next one."""
        return (
            Step("UPDATE inbox SET done_at = ? WHERE seq = ? RETURNING chat", (ts(now), seq)),
            Step(
                _WAITING.format(chat="(SELECT chat FROM inbox WHERE seq = ?)")
                + "ORDER BY position, seq LIMIT 1",
                (seq,),
            ),
        )

    def _lease_lock(self, chat: str) -> Step:
        """The statement locking the chat's lease row (PostgreSQL: an update recorded meanwhile
        is either seen waiting by the statements after it, or its claim waits for them)."""
        return Step(f"SELECT owner FROM chat_leases WHERE chat = ?{self._db.for_update}", (chat,))

    def _release(self, chat: str) -> Step:
        """The statement giving up this worker's lease on the chat unless updates of it wait."""
        return Step(
            f"{_DROP} AND NOT EXISTS (SELECT 1 FROM inbox WHERE chat = ? AND done_at IS NULL) "
            "RETURNING owner",
            (chat, self._worker, chat),
        )

    def _released(self, lease: list[Row], dropped: list[Row]) -> bool:
        """Whether this worker no longer holds a chat, from its lease row as locked and what
        the release dropped: released, or taken over."""
        held = bool(lease) and lease[0][0] == self._worker
        return not held or bool(dropped)

    async def hold_replies(self, seq: int, replies: str) -> None:
        """Keep an update's answer with it until the update is finished: a worker that stops
        in between leaves it to be sent by whichever takes the chat up."""
        await self._db.execute("UPDATE inbox SET replies = ? WHERE seq = ?", replies, seq)

    async def release_chat(self, chat: str) -> bool:
        """Give up the chat's lease unless updates of it wait; True when this worker no longer
        holds it (released, or taken over), False when updates wait and the lease is still ours.

        The lease row is locked first: an update recorded meanwhile is either seen waiting
        by the statement after the lock, or its worker's claim waits for this release and then
        takes the chat."""
        found = await self._db.chain(self._lease_lock(chat), self._release(chat))
        return self._released(found[0], found[1])

    async def drop_lease(self, chat: str) -> None:
        """Give up the chat's lease whatever waits (another worker will take the chat up)."""
        await self._db.execute(_DROP, chat, self._worker)

    async def abandoned_chats(self, limit: int) -> list[str]:
        """Chats with unprocessed updates that no other live worker holds, at most limit."""
        rows = await self._db.fetch(
            "SELECT DISTINCT i.chat FROM inbox i LEFT JOIN chat_leases l ON l.chat = i.chat "
            "WHERE i.done_at IS NULL AND (l.owner IS NULL OR l.owner = ? "
            f"OR l.owner NOT IN ({self._db.live_workers(self._worker)})) LIMIT ?",
            *(self._worker, limit),
        )
        return [row[0] for row in rows]

    async def waiting_here(self, on: Executor | None = None) -> tuple[int, float | None]:
        """How many unprocessed updates wait in the chats this worker holds, and when the
        oldest of them was recorded (seconds since the epoch; None when none waits); read on
        on (a health check's connection) when given."""
        row = await (on or self._db).fetchrow(
            "SELECT COUNT(*), MIN(i.received_at) FROM inbox i "
            "JOIN chat_leases l ON l.chat = i.chat WHERE l.owner = ? AND i.done_at IS NULL",
            self._worker,
        )
        if row is None or not row[0]:
            return 0, None
        return int(row[0]), float(row[1])

    async def forget_updates_before(self, moment: datetime) -> int:
        """Drop updates processed before moment; returns how many went."""
        return await self._db.execute("DELETE FROM inbox WHERE done_at < ?", ts(moment))

    async def take_token(
        self, key: str, *, capacity: float, per_s: float, now: datetime
    ) -> float | None:
        """Take one token from key's bucket (capacity tokens, refilled at per_s); None if one
        was there, else the seconds until one is. Exact across workers: the row is locked.
        A store that one process serves keeps its buckets in memory: as exact, and no write."""
        if self._db.buckets_in_memory:
            return self._buckets.take(key, capacity=capacity, per_s=per_s, now=ts(now))
        refilled = "LEAST(?, rate_buckets.tokens + (? - rate_buckets.at) * ?)"
        left = f"({refilled} - CASE WHEN {refilled} >= 1 THEN 1 ELSE 0 END)"
        capacity, per_s, at = float(capacity), float(per_s), ts(now)
        grant = (capacity, at, per_s)
        rows = await self._db.returning(
            "INSERT INTO rate_buckets (key, tokens, at, full_at, granted) "
            "VALUES (?, CAST(? AS DOUBLE PRECISION) - 1, ?, "
            "CAST(? AS DOUBLE PRECISION) + 1 / CAST(? AS DOUBLE PRECISION), true) "
            f"ON CONFLICT (key) DO UPDATE SET granted = {refilled} >= 1, tokens = {left}, "
            f"full_at = ? + (? - {left}) / ?, at = ? RETURNING granted, tokens",
            *(key, capacity, at, at, per_s, *grant * 3, at, capacity, *grant * 2, per_s, at),
        )
        granted, tokens = rows[0]
        return None if granted else (1 - tokens) / per_s

    async def forget_full_buckets(self, now: datetime) -> int:
        """Drop rate buckets that are full again (a new bucket behaves the same)."""
        if self._db.buckets_in_memory:
            return self._buckets.forget_full(ts(now))
        return await self._db.execute("DELETE FROM rate_buckets WHERE full_at <= ?", ts(now))
