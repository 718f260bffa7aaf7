"""`pinbot` processes forked from one that imported pinbot once, for the tests that kill a bot
many times over (the crash loops): each fork is a real process, killed with a real SIGKILL, but
starts in milliseconds instead of the seconds its imports take (lark-oapi's alone are two).

`python -m tests.forked` is the forking process: it imports pinbot, says it is ready, then reads
one JSON command a line from standard input, `{"args": [...], "env": {...}}`, forks a child that
runs `bot.cli.main(args)` with env added to its environment, and answers `{"pid": N}`; when a
child ends it says `{"exited": N, "status": S}`. Every child writes to the forking process's
standard error. `Forks` drives it from a test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

FORK_TIMEOUT_S = 60  # a safety net for a hung process, not a pause


def _serve() -> None:
    # Everything a bot imports as it starts, what it imports lazily too (lark-oapi, openai).
    import lark_oapi  # noqa: F401
    import openai  # noqa: F401

    import bot.adapters.feishu
    import bot.adapters.telegram
    import bot.cli
    import bot.cli.feishu
    import bot.cli.runtime
    import bot.cli.telegram
    import bot.llm.openai_backend
    import storage.dialect.sqlite  # noqa: F401

    wakeup, woken = socket.socketpair()
    wakeup.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wakeup.fileno())
    commands = os.fdopen(sys.stdin.fileno(), "rb", buffering=0)
    selector = selectors.DefaultSelector()
    selector.register(commands, selectors.EVENT_READ)
    selector.register(woken, selectors.EVENT_READ)
    _say({"ready": True})
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj is woken:
                woken.recv(4096)
                _reap()
                continue
            chunk = commands.read(65536)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                command = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for sock in (wakeup, woken):
                        sock.close()
                    devnull = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(devnull, 0)
                    os.environ.update(command["env"])
                    status = 1
                    try:
                        status = bot.cli.main(command["args"])
                    finally:
                        sys.stderr.flush()
                        os._exit(status)
                _say({"pid": pid})
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exited": pid, "status": os.waitstatus_to_exitcode(status)})


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Forks:
    """The forking process, seen from a test: fork pinbot processes, kill them, wait for their
    end. Every line they log is kept in `log`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self.log: list[str] = []
        self._answers: asyncio.Queue[int] = asyncio.Queue()
        self._exited: dict[int, asyncio.Future[int]] = {}
        self._logged = asyncio.Condition()
        self._tasks = [
            asyncio.create_task(self._read_answers()),
            asyncio.create_task(self._read_log()),
        ]

    @classmethod
    async def start(cls, env: dict[str, str] | None = None) -> Forks:
        """Start the forking process (with env added to its environment) once it is ready."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.forked",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), FORK_TIMEOUT_S)
        assert json.loads(ready) == {"ready": True}, ready
        return cls(process)

    async def fork(self, *args: str, env: dict[str, str] | None = None) -> int:
        """Start `pinbot ARGS` with env added to the environment; its pid."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"args": args, "env": env or {}}).encode() + b"\n")
        await self._process.stdin.drain()
        return await asyncio.wait_for(self._answers.get(), FORK_TIMEOUT_S)

    def kill(self, pid: int) -> None:
        """SIGKILL a forked process now."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def ended(self, pid: int) -> int:
        """Wait for a forked process to end; its exit status (negative: the signal)."""
        return await asyncio.wait_for(asyncio.shield(self._exited[pid]), FORK_TIMEOUT_S)

    async def stop(self) -> None:
        """Kill every forked process still running, then the forking process."""
        for pid, exited in self._exited.items():
            if not exited.done():
                self.kill(pid)
                await self.ended(pid)
        assert self._process.stdin is not None
        self._process.stdin.close()
        await asyncio.wait_for(self._process.wait(), FORK_TIMEOUT_S)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _read_answers(self) -> None:
        assert self._process.stdout is not None
        async for line in self._process.stdout:
            said = json.loads(line)
            if "pid" in said:  # its end is awaited from now on, however soon it comes
                self._exited[int(said["pid"])] = asyncio.get_running_loop().create_future()
                self._answers.put_nowait(int(said["pid"]))
            elif "exited" in said:
                exited = self._exited.get(int(said["exited"]))
                if exited is not None and not exited.done():
                    exited.set_result(int(said["status"]))

    async def line(self, fragment: str, since: int = 0) -> str:
        """Wait for a logged line holding fragment, from line number since on; the line."""

        def found() -> str | None:
            return next((line for line in self.log[since:] if fragment in line), None)

        async with self._logged:
            await asyncio.wait_for(self._logged.wait_for(found), FORK_TIMEOUT_S)
        line = found()
        assert line is not None
        return line

    async def _read_log(self) -> None:
        assert self._process.stderr is not None
        async for line in self._process.stderr:
            self.log.append(line.decode(errors="replace").rstrip())
            async with self._logged:
                self._logged.notify_all()


if __name__ == "__main__":
    _serve()
