"""Running `pinbot` webhook workers as an operator does: real processes on one database, and
a load balancer in front of them (for the multi-worker tests and the benchmark)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from tests.forked import Forks
from tests.process import PINBOT

STARTED = " started ("  # what a worker logs once it serves
WAIT_S = 60  # a safety net for a hung worker, never a pause
# Also a safety net, not a pause: three workers importing lark-oapi at once on a machine
# running other suites (load 15 on two cores) once took longer than WAIT_S to start.
START_S = 180


class Worker:
    """One `pinbot` process serving webhooks on its own port (program: how `pinbot` is run,
    e.g. pinned to a core or from another tree; forks: forked from tests/forked.py's forking
    process instead, a real process all the same that starts without importing pinbot again)."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        port: int,
        path: str,
        program: Sequence[str] = (PINBOT,),
        forks: Forks | None = None,
    ) -> None:
        self.args, self.env, self.port, self.program = args, env, port, program
        self.forks = forks
        self.url = f"http://127.0.0.1:{port}{path}"
        self.process: asyncio.subprocess.Process | None = None
        self.pid: int | None = None
        self.log: list[str] = []
        self._reader: asyncio.Task[None] | None = None
        self._logged = asyncio.Condition()  # notified at each line the worker logs
        self._exit: asyncio.Future[int] | None = None  # a forked worker's exit status
        self._fifo: _Fifo | None = None  # a forked worker's standard error

    async def start(self) -> None:
        started = asyncio.Event()
        if self.forks is None:
            self.process = await asyncio.create_subprocess_exec(
                *self.program,
                *self.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.env},
            )
            assert self.process.stderr is not None
            self.pid = self.process.pid
            self._reader = asyncio.create_task(self._read(self.process.stderr, started))
            exited: asyncio.Future[int] = asyncio.ensure_future(self.process.wait())
        else:
            self._fifo = await _Fifo.open()
            self.pid = await self.forks.fork(*self.args, env=self.env, stderr=str(self._fifo.path))
            self._exit = exited = self.forks.exit(self.pid)
            self._reader = asyncio.create_task(self._read(self._fifo.reader, started))
        waiting = asyncio.create_task(started.wait())
        either: set[asyncio.Future[Any]] = {waiting, exited}
        await asyncio.wait(either, timeout=START_S, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self.forks is None:
            exited.cancel()
        elif not started.is_set() and exited.done():  # what it said is all there is
            await self._read_to_the_end()
        assert started.is_set(), "worker did not start:\n" + "\n".join(self.log)

    async def _read(self, stderr: asyncio.StreamReader, started: asyncio.Event) -> None:
        async for line in stderr:
            text = line.decode(errors="replace").rstrip()
            if text == _Fifo.END:
                break
            self.log.append(text)
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
        assert self.pid is not None
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def running(self) -> bool:
        if self._exit is not None:
            return not self._exit.done()
        return self.process is not None and self.process.returncode is None

    async def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        assert self.pid is not None
        if self.forks is None:
            assert self.process is not None
            self.process.send_signal(how)
            ended: Awaitable[int] = self.process.wait()
        else:
            assert self._exit is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, how)
            ended = self._exit
        try:
            code = await asyncio.wait_for(ended, WAIT_S)
        except TimeoutError:
            raise AssertionError("worker did not stop:\n" + "\n".join(self.log)) from None
        await self._read_to_the_end()
        return code

    async def _read_to_the_end(self) -> None:
        """Once the process has ended: everything it wrote, read."""
        if self._fifo is not None:  # it wrote its last before it ended: read up to END
            await self._fifo.end()
        if self._reader is not None:
            await self._reader
        if self._fifo is not None:
            self._fifo.close()
            self._fifo = None


class _Fifo:
    """A named pipe a forked worker writes its standard error to, read from the test's event
    loop. The test keeps a writing end of its own: reading sees no end of file before the
    worker opens it, and after the worker ended, END written there comes after all it wrote."""

    END = "tests.workers: the worker's standard error ends here"

    def __init__(self, folder: str, reader: asyncio.StreamReader) -> None:
        self.folder = folder
        self.path = Path(folder) / "stderr"
        self.reader = reader
        self._transport: asyncio.BaseTransport | None = None
        self._writer = -1

    @classmethod
    async def open(cls) -> _Fifo:
        fifo = cls(tempfile.mkdtemp(prefix="pinbot-worker-"), asyncio.StreamReader())
        os.mkfifo(fifo.path)
        reading = os.open(fifo.path, os.O_RDONLY | os.O_NONBLOCK)
        fifo._writer = os.open(fifo.path, os.O_WRONLY | os.O_NONBLOCK)
        protocol = asyncio.StreamReaderProtocol(fifo.reader)
        fifo._transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: protocol, os.fdopen(reading, "rb", buffering=0)
        )
        return fifo

    async def end(self) -> None:
        """Write END (once the worker has ended: after everything it wrote)."""
        while True:
            try:  # shorter than PIPE_BUF: written whole or not at all
                os.write(self._writer, f"{self.END}\n".encode())
                return
            except BlockingIOError:  # the pipe is full: the reader empties it meanwhile
                await asyncio.sleep(0)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        os.close(self._writer)
        shutil.rmtree(self.folder, ignore_errors=True)


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
