"""Delivery: updates recorded as they arrive, the workers that process them, the lease each
worker holds on a chat while it works through its updates, and rate-limit token buckets."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Protocol

from storage.buckets import TokenBuckets
from storage.dialect import Database
from storage.models import PendingUpdate
from storage.rows import ts

_DROP = "DELETE FROM chat_leases WHERE chat = ? AND owner = ?"


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

    async def record_update(
        self, platform: str, event_id: str, *, chat: str, position: int, payload: str, now: datetime
    ) -> bool:
        """Record an update as it arrives; False if this event was recorded before (a repeated
        delivery, to any worker, which must not be processed again)."""
        changed = await self._db.execute(
            "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            *(platform, event_id, chat, position, payload, ts(now)),
        )
        return changed == 1

    async def claim_chat(self, chat: str, *, now: datetime) -> bool:
        """Take the chat's lease for this worker unless another live worker holds it; True when
        this worker holds it now."""
        rows = await self._db.returning(
            "INSERT INTO chat_leases (chat, owner, since) VALUES (?, ?, ?) "
            "ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, since = excluded.since "
            "WHERE chat_leases.owner = excluded.owner "
            f"OR chat_leases.owner NOT IN ({self._db.live_workers(self._worker)}) RETURNING owner",
            *(chat, self._worker, ts(now)),
        )
        return bool(rows)

    async def next_update(self, chat: str) -> PendingUpdate | None:
        """The chat's first unprocessed update in order, if any."""
        row = await self._db.fetchrow(
            "SELECT seq, platform, payload FROM inbox WHERE chat = ? AND done_at IS NULL "
            "ORDER BY position, seq LIMIT 1",
            chat,
        )
        return PendingUpdate(int(row[0]), row[1], row[2]) if row else None

    async def finish_update(self, seq: int, *, now: datetime) -> None:
        """Mark an update processed."""
        await self._db.execute("UPDATE inbox SET done_at = ? WHERE seq = ?", ts(now), seq)

    async def release_chat(self, chat: str) -> bool:
        """Give up the chat's lease unless updates of it wait; True when this worker no longer
        holds it (released, or taken over), False when updates wait and the lease is still ours.

        The lease row is locked first: an update recorded meanwhile is either seen waiting
        here, or its worker's claim waits for this release and then takes the chat."""
        async with self._db.transaction() as tx:
            owner = await tx.fetchval(
                f"SELECT owner FROM chat_leases WHERE chat = ?{self._db.for_update}", chat
            )
            waiting = await tx.fetchval(
                "SELECT 1 FROM inbox WHERE chat = ? AND done_at IS NULL LIMIT 1", chat
            )
            if waiting:
                return bool(owner != self._worker)
            await tx.execute(_DROP, chat, self._worker)
        return True

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

    async def forget_updates_before(self, moment: datetime) -> int:
        """Drop updates processed before moment; returns how many went."""
        return await self._db.execute("DELETE FROM inbox WHERE done_at < ?", ts(moment))

    async def take_token(
        self, key: str, *, capacity: float, per_s: float, now: datetime
    ) -> float | None:
        """Take one token from key's bucket (capacity tokens, refilled at per_s); None if one
        was there, else the seconds until one is. Exact across workers: the row is locked.
        A store that one process serves keeps its buckets in memory: as exact, and no write."""
        if self._db.one_process:
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
        if self._db.one_process:
            return self._buckets.forget_full(ts(now))
        return await self._db.execute("DELETE FROM rate_buckets WHERE full_at <= ?", ts(now))
