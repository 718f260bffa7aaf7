"""The metrics and health listener of a long-running command (`metrics.listen`): GET /metrics
(Prometheus text format), /healthz (200 while the process runs its loop) and /readyz (200 only
when the store answers with the current schema and the platform connection works)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from bot import metrics, package_version
from bot.clock import Clock, utc_now
from bot.config import Config
from bot.metrics import Meters
from storage import Store
from storage.errors import Locked
from storage.models import StoreCheck
from storage.schema import LATEST

log = logging.getLogger(__name__)

# A probe never waits longer than this on the store: a database that stopped answering makes
# /readyz answer 503 within it, not hang the load balancer's probe.
STORE_CHECK_S = 2.0
# Why the platform connection is not working now (None: it is).
PlatformCheck = Callable[[], str | None]


@contextlib.contextmanager
def counting(config: Config) -> Iterator[Meters | None]:
    """Count (bot.metrics) meanwhile when metrics.listen is set; the meters, or None."""
    if config.metrics.address is None:
        yield None
        return
    meters = metrics.enable(
        version=package_version(),
        model=config.llm.called,
        currency=config.pricing.currency,
        models=tuple(config.llm.models),
    )
    try:
        yield meters
    finally:
        metrics.disable()


class Health:
    """Readiness: the store answers, its schema is current, and the platform connection (if
    any) works; and the figures read at each scrape (readiness, the inbox of a webhook
    worker).

    The store is checked by one check at a time, on a connection of the checks' own
    (Store.check): a probe waits at most check_s for it, and a check still running then is
    not waited for (a frozen database hangs it, and waiting to cancel it would hang too): its
    connection is dropped, and a probe meanwhile waits for that same check, never starts
    another."""

    def __init__(
        self,
        store: Store,
        platform: PlatformCheck | None = None,
        *,
        inbox: bool = False,
        clock: Clock = utc_now,
        check_s: float = STORE_CHECK_S,
    ) -> None:
        self._store = store
        self._platform = platform
        self._inbox = inbox
        self._clock = clock
        self._check_s = check_s
        self._running: asyncio.Task[StoreCheck] | None = None

    async def _checked(self) -> StoreCheck | str:
        """The store's check, or why it gave none (in one line)."""
        task = self._running
        if task is None or task.done():
            task = self._running = asyncio.create_task(self._store.check(inbox=self._inbox))
            task.add_done_callback(_seen)
        done, _ = await asyncio.wait({task}, timeout=self._check_s)
        if not done:
            self._store.drop_check()
            return f"the database did not answer within {self._check_s:g} s"
        try:
            return task.result()
        except Locked:
            return "the database is locked by another connection: nothing can be written now"
        except Exception as error:  # whatever the driver says, the store does not answer
            return f"the database cannot be reached ({type(error).__name__})"

    async def _not_ready(self) -> tuple[str | None, StoreCheck | None]:
        checked = await self._checked()
        if isinstance(checked, str):
            return checked, None
        if checked.version != LATEST:
            return (
                f"the database schema is at step {checked.version} and this pinbot needs step "
                f"{LATEST}: run pinbot migrate"
            ), checked
        return (self._platform() if self._platform is not None else None), checked

    async def not_ready(self) -> str | None:
        """Why this process is not ready to serve, in one line; None when it is."""
        return (await self._not_ready())[0]

    async def refresh(self, meters: Meters) -> None:
        """Bring the figures read at scrape time up to date: readiness, and the updates waiting
        in this worker's chats (left as they were when the store does not answer)."""
        reason, checked = await self._not_ready()
        meters.ready.set(0 if reason else 1)
        if not self._inbox or checked is None:
            return
        meters.waiting.set(checked.waiting)
        now = self._clock().timestamp()
        oldest = checked.oldest
        meters.oldest_wait.set(max(0.0, now - oldest) if oldest is not None else 0.0)


def _seen(task: asyncio.Task[StoreCheck]) -> None:
    """A check nobody waited for to the end failed quietly: readiness said so already."""
    if not task.cancelled():
        task.exception()


def application(meters: Meters, health: Health) -> web.Application:
    """The listener's routes."""

    async def scrape(request: web.Request) -> web.Response:
        await health.refresh(meters)
        return web.Response(
            body=generate_latest(meters.registry),
            headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4},
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        reason = await health.not_ready()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@contextlib.asynccontextmanager
async def serving(
    config: Config, health: Health, *, told: list[str] | None = None
) -> AsyncIterator[int | None]:
    """Listen on metrics.listen meanwhile (when counting: see counting()); the port really
    listened on (metrics.listen may end in :0), logged, or None when off. With told, the line
    saying where is put there instead, for the caller to log once it serves (a start that is
    refused then says only why)."""
    address, meters = config.metrics.address, metrics.active()
    if address is None or meters is None:
        yield None
        return
    from bot.serving import serve_app

    host, wanted = address
    runner, port = await serve_app(
        application(meters, health), host=host, port=wanted, port_setting="metrics.listen"
    )
    bound = str(runner.addresses[0][0]) if runner.addresses else host
    shown = f"[{bound}]" if ":" in bound else bound
    line = f"metrics listening on http://{shown}:{port} (/metrics, /healthz, /readyz)"
    if told is None:
        log.info("%s", line)
    else:
        told.append(line)
    try:
        yield port
    finally:
        await runner.cleanup()
