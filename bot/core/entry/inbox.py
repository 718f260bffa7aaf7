"""Updates recorded in the store as they arrive, then processed one at a time per chat, in
order, by whichever worker holds the chat.

Platforms are answered as soon as an update is recorded, so with several workers the next update
of a chat can reach any of them first; ordering comes from the store, not from arrival at a lock.
A worker that records an update tries to take the chat's lease in the same transaction and, if it
gets it, processes the chat's waiting updates until none is left (marking one processed reads
the next in the same transaction: a message costs the store few round trips). A worker that
ends (stopped or killed) leaves its chats to the others, which look for abandoned chats every
`storage.takeover_check_s`, and run the periodic jobs that are due at the same pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from bot.clock import Clock
from bot.config import ConfigError
from bot.core.entry.jobs import Jobs
from bot.core.replies import Reply, processing, replies_from_json, replies_to_json
from storage.delivery import DeliveryStore
from storage.errors import Unavailable, WorkerConflict
from storage.models import PendingUpdate

log = logging.getLogger(__name__)

ABANDONED_BATCH = 100  # chats taken up per check
# A handler works out an update's answer, and a sender sends it (rebuilt from the update's
# payload, so an answer kept in the store can go out from any worker). The answer goes out once
# the update's processing is recorded: an update whose processing cannot be recorded (the
# database went away) is answered by its next processing, never twice.
Handler = Callable[[PendingUpdate], Awaitable[Sequence[Reply]]]
Sender = Callable[[PendingUpdate, Sequence[Reply]], Awaitable[None]]


async def join_workers(
    store: DeliveryStore, clock: Clock, *, advice: str, sole: str | None = None
) -> None:
    """Register this process as a worker of the store (alone in role sole, if given); when
    that conflicts with a live process, ConfigError saying so and then advice."""
    try:
        await store.register_worker(now=clock(), sole=sole)
    except WorkerConflict as conflict:
        raise ConfigError(f"{conflict}: {advice}") from None


class Inbox:
    """Records updates once (a repeated delivery to any worker is recognised) and hands each to
    the handler exactly once per recording, one chat's updates one at a time in order, then its
    answer to the sender. No database connection is held while either runs.

    With resends (a platform that takes the same send twice as one, as Feishu's uuid does),
    the answer is kept in the store before it goes out and the update is done only once it
    has: a worker killed in between has it sent, once, by whichever worker takes the chat up.
    Without, the update is done before its answer goes out: a worker killed while it sends
    never sends it twice (the platform could not tell)."""

    def __init__(
        self,
        store: DeliveryStore,
        handler: Handler,
        sender: Sender,
        *,
        resends: bool,
        clock: Clock,
        jobs: Jobs,
        takeover_check_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._handler = handler
        self._sender = sender
        self._resends = resends
        self._clock = clock
        self._jobs = jobs
        self._check_s = takeover_check_s
        self._sleep = sleep
        self._draining: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()  # chats woken while their drain was finishing
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self, *, sole: str | None = None, advice: str = "") -> None:
        """Join the store's workers (alone in role sole, if given: ConfigError with advice
        when another live process holds it), take up updates left waiting, and start watching
        for abandoned chats."""
        await join_workers(
            self._store,
            self._clock,
            advice=advice
            or "a SQLite database serves one process; for several webhook workers use "
            "PostgreSQL (storage.url_env)",
            sole=sole,
        )
        await self.take_up_abandoned()
        self._watcher = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        """Finish the updates being processed, stop watching, and leave the workers: the
        chats' other waiting updates go to the other workers."""
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await self.idle()
        await self._store.leave_workers()

    async def idle(self) -> None:
        """Wait until this worker holds no chat."""
        while self._draining:
            await asyncio.gather(*list(self._draining.values()), return_exceptions=True)

    async def receive(
        self, platform: str, event_id: str, *, chat: str, position: int, payload: str
    ) -> bool:
        """Record an update (committed on return: the platform may be answered) and have its
        chat processed; False for a repeated delivery, which is not processed again."""
        arrival = await self._store.record_update(
            platform, event_id, chat=chat, position=position, payload=payload, now=self._clock()
        )
        if arrival.recorded:
            self.wake(chat, arrival.first)
        else:
            log.info("repeated delivery of %s event %s ignored", platform, event_id)
        return arrival.recorded

    def wake(self, chat: str, first: PendingUpdate | None = None) -> None:
        """Process the chat's waiting updates here, unless this worker already is. first: the
        chat's first waiting update, read while this worker took the chat (None: take it)."""
        if self._stopping:
            return
        if chat in self._draining:
            self._again.add(chat)
            return
        self._draining[chat] = asyncio.create_task(self._drain(chat, first))

    async def take_up_abandoned(self) -> None:
        """Process the chats whose updates wait while no live worker holds them."""
        for chat in await self._store.abandoned_chats(ABANDONED_BATCH):
            if chat not in self._draining:
                self.wake(chat)

    async def _watch(self) -> None:
        while True:
            await self._sleep(self._check_s)
            try:
                if not self._store.worker_live:
                    await self._rejoin()
                await self.take_up_abandoned()
                await self._jobs.run_due()
            except Exception as error:  # the database may be back at the next check
                log.warning("looking for abandoned chats failed: %s", error)

    async def _rejoin(self) -> None:
        """Register again after losing liveness, once the chats being processed are done (the
        others may have taken them; a second processing of one update is the price, never a
        lost one)."""
        await self.idle()
        worker = await self._store.register_worker(now=self._clock())
        log.warning("registered again as worker %d", worker)

    async def _drain(self, chat: str, first: PendingUpdate | None) -> None:
        try:
            while True:
                self._again.discard(chat)
                if first is not None:  # the chat was taken as its update was recorded
                    await self._process_waiting(chat, first)
                elif await self._store.claim_chat(chat, now=self._clock()):
                    await self._process_waiting(chat, await self._store.next_update(chat))
                first = None
                if chat not in self._again:
                    return
        except Exception:
            log.exception("processing the updates of chat %s stopped; it is retried later", chat)
            with contextlib.suppress(Exception):
                await self._store.drop_lease(chat)
        finally:
            del self._draining[chat]

    async def _process_waiting(self, chat: str, pending: PendingUpdate | None) -> None:
        """Process the chat's updates in order, starting with pending (the first waiting, as
        read), until none waits (or this worker stops)."""
        while True:
            if self._stopping:
                await self._store.drop_lease(chat)
                return
            if not self._store.worker_live:
                return  # the others may hold the chat now; the watcher registers again
            if pending is None:
                if await self._store.release_chat(chat):
                    return
                pending = await self._store.next_update(chat)  # recorded meanwhile
                continue
            if pending.replies is not None:  # processed before, its answer not sent yet
                replies: Sequence[Reply] = replies_from_json(pending.replies)
            else:
                try:
                    # What it posts besides its answer (a proposal) is posted once, even when
                    # it is processed again (a worker died before it was marked done).
                    with processing(_key(pending)):
                        replies = await self._handler(pending)
                except Unavailable as error:  # the turn could not be recorded: nothing was sent
                    log.warning(
                        "update %d of chat %s could not be recorded (%s); it is processed "
                        "again when the database is back",
                        pending.seq,
                        chat,
                        error,
                    )
                    return  # the lease stays: the watcher takes the chat up again
                except Exception:  # one bad update must not hold up the chat
                    log.exception("processing update %d of chat %s failed", pending.seq, chat)
                    replies = ()
            pending, released = await self._answer(chat, pending, replies)
            if released:
                return

    async def _answer(
        self, chat: str, pending: PendingUpdate, replies: Sequence[Reply]
    ) -> tuple[PendingUpdate | None, bool]:
        """Send an update's answer and mark the update done, in the order resends allows (see
        the class); the chat's next waiting update, and whether the chat was given up with it
        (none waited). Sent while this worker's drain of the chat runs, and while the chat is
        held where another worker could take it: replies stay in order."""
        if not replies:
            return await self._finish(chat, pending)
        if self._resends:
            if pending.replies is None:
                await self._store.hold_replies(pending.seq, replies_to_json(replies))
            await self._send(pending, replies)
            return await self._finish(chat, pending)
        done = await self._store.finish_before_reply(pending.seq, chat, now=self._clock())
        await self._send(pending, replies)
        return done

    async def _finish(self, chat: str, pending: PendingUpdate) -> tuple[PendingUpdate | None, bool]:
        """Mark the update done and give up the chat if none waits, in one transaction."""
        return await self._store.finish_and_release(pending.seq, chat, now=self._clock())

    async def _send(self, pending: PendingUpdate, replies: Sequence[Reply]) -> None:
        try:
            await self._sender(pending, replies)
        except Exception:  # the sender logs and counts what it could not send; this is a bug
            log.exception("sending the answer to update %d failed", pending.seq)


def _key(pending: PendingUpdate) -> str:
    """An update's key for what it makes: its place in the inbox and a digest of what it says
    (SQLite may give a place again once the inbox's rows are gone)."""
    digest = hashlib.sha256(pending.payload.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{pending.platform}:{pending.seq}:{digest[:16]}"
