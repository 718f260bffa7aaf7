"""A PostgreSQL worker's liveness: held by one session for the process's lifetime; when the
server ends that session, the worker knows, the others may take its chats, and it can register
again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg

from storage import Store
from storage.dialect import WORKER_LOCKS

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_worker_that_loses_its_liveness_knows_and_registers_again(pg_url: str) -> None:
    store, other = await Store.open(url=pg_url), await Store.open(url=pg_url)
    try:
        first = await store.register_worker(now=NOW)
        await other.register_worker(now=NOW)
        arrival = await store.record_update("p", "1", chat="c", position=0, payload="", now=NOW)
        assert store.worker_live and arrival.first is not None  # it took the chat
        assert await store.claim_chat("c", now=NOW)
        admin = await asyncpg.connect(pg_url)
        try:  # the server ends the liveness session, as a network failure would
            assert await admin.fetchval(
                "SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = "
                "'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2",
                WORKER_LOCKS,
                first,
            )
        finally:
            await admin.close()

        async def lost() -> None:
            while store.worker_live:
                await asyncio.sleep(0)

        await asyncio.wait_for(lost(), 10)  # a safety net, not a pause
        assert await other.abandoned_chats(10) == ["c"]  # the others may take its chats now
        second = await store.register_worker(now=NOW)
        assert second != first and store.worker_live
        assert await other.abandoned_chats(10) == ["c"]  # its old lease stays dead
    finally:
        await store.close()
        await other.close()
