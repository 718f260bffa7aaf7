"""Running `pinbot` webhook workers as an operator does: real processes on one database, and
a load balancer in front of them (for the multi-worker tests and the benchmark)."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from tests.process import PINBOT

STARTED = " started ("  # what a worker logs once it serves
WAIT_S = 60  # a safety net for a hung worker, never a pause
# Also a safety net, not a pause: three workers importing lark-oapi at once on a machine
# running other suites (load 15 on two cores) once took longer than WAIT_S to start.
START_S = 180


class Worker:
    """One `pinbot` process serving webhooks on its own port (program: how `pinbot` is run,
    e.g. pinned to a core or from another tree)."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        port: int,
        path: str,
        program: Sequence[str] = (PINBOT,),
    ) -> None:
        self.args, self.env, self.port, self.program = args, env, port, program
        self.url = f"http://127.0.0.1:{port}{path}"
        self.process: asyncio.subprocess.Process | None = None
        self.log: list[str] = []
        self._reader: asyncio.Task[None] | None = None
        self._logged = asyncio.Condition()  # notified at each line the worker logs

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.program,
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **self.env},
        )
        started = asyncio.Event()
        self._reader = asyncio.create_task(self._read(started))
        waiting = asyncio.create_task(started.wait())
        exited = asyncio.create_task(self.process.wait())
        await asyncio.wait({waiting, exited}, timeout=START_S, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        exited.cancel()
        assert started.is_set(), "worker did not start:\n" + "\n".join(self.log)

    async def _read(self, started: asyncio.Event) -> None:
        assert self.process is not None and self.process.stderr is not None
        async for line in self.process.stderr:
            self.log.append(line.decode(errors="replace").rstrip())
            if STARTED in self.log[-1]:
                started.set()
            async with self._logged:
                self._logged.notify_all()

    async def logged(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first line the worker logs (or logged) that pattern finds, once it does."""

        def found() -> re.Match[str] | None:
            return next((m for line in self.log if (m := pattern.search(line))), None)

        async with self._logged:
            await asyncio.wait_for(self._logged.wait_for(lambda: found() is not None), WAIT_S)
        match = found()
        assert match is not None
        return match

    def cpu_seconds(self) -> float:
        """CPU time the process has used so far (Linux)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(how)
        try:
            code = await asyncio.wait_for(self.process.wait(), WAIT_S)
        except TimeoutError:
            raise AssertionError("worker did not stop:\n" + "\n".join(self.log)) from None
        if self._reader is not None:
            await self._reader
        return code


class Cluster:
    """N workers on one database and a load balancer in front of them: each post goes to the
    next worker in turn, and to the one after when a worker does not answer."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self._turn = itertools.count()
        self.session: aiohttp.ClientSession | None = None

    async def post(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> int:
        assert self.session is not None
        first = next(self._turn)
        for offset in range(len(self.workers) * 3):
            worker = self.workers[(first + offset) % len(self.workers)]
            if not worker.running:
                continue
            try:
                async with self.session.post(worker.url, json=body, headers=headers) as response:
                    if response.status < 500:
                        return response.status
            except aiohttp.ClientConnectionError:
                continue  # stopping or starting: the balancer tries the next one
        raise AssertionError("no worker took the update")

    async def post_to(self, index: int, body: dict[str, Any], headers: dict[str, str]) -> int:
        assert self.session is not None
        async with self.session.post(self.workers[index].url, json=body, headers=headers) as r:
            return r.status

    def logs(self) -> str:
        return "\n".join(f"[{n}] {line}" for n, w in enumerate(self.workers) for line in w.log)
