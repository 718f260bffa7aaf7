"""`pinbot` processes forked from one that imported pinbot once, for the tests that start many
(the crash loops, the webhook workers): each fork is a real process, killed with a real signal,
but starts in milliseconds instead of the seconds its imports take (lark-oapi's alone are two).

`python -m tests.forked` is the forking process: it imports pinbot, says it is ready, then reads
one JSON command a line from standard input, `{"args": [...], "env": {...}}`, forks a child that
runs `bot.cli.main(args)` with env as its environment, and answers `{"pid": N}`; when a
child ends it says `{"exited": N, "status": S}`. Children write to the forking process's
standard error, or, when the command has `"stderr": PATH`, to that FIFO (their standard output
then /dev/null). Told `{"mark": M}`, it writes MARK and M on standard error and answers
`{"marked": M}`. `ForkServer` runs it (one per test process), and `Forks` drives it from a
test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
from typing import Any

FORK_TIMEOUT_S = 60  # a safety net for a hung process, not a pause
MARK = "tests.forked mark "  # the line that ends what one test was told (Forks.detach)
_marks = itertools.count(1)


def _serve() -> None:
    # Everything a bot imports as it starts, what it imports lazily too (openai; lark-oapi,
    # seconds of it, at the first Feishu command: a process that forks none spares them).
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
                if "mark" in command:  # everything said before it has been read once it is
                    sys.stderr.write(f"{MARK}{command['mark']}\n")
                    sys.stderr.flush()
                    _say({"marked": command["mark"]})
                    continue
                if command["args"][:1] == ["feishu"]:
                    import lark_oapi  # noqa: F401
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for sock in (wakeup, woken):
                        sock.close()
                    devnull = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(devnull, 0)
                    if "stderr" in command:  # a FIFO of the test's: standard error of its own
                        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                        own = os.open(command["stderr"], os.O_WRONLY)
                        os.dup2(own, 2)
                        os.close(own)
                    os.environ.clear()  # the test's environment, as a process it started
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


class ForkServer:
    """The forking process, started once per test process (the fork_server fixture) and lent
    to one test at a time (Forks.attach): it only ever forks, so what one test did leaves
    nothing in it for the next, and its seconds of imports are paid once."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forked"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        assert self.process.stdout is not None
        said = b""
        while not said.endswith(b"\n"):  # read unbuffered: nothing after the line is taken
            ready, _, _ = select.select([self.process.stdout], [], [], FORK_TIMEOUT_S)
            chunk = os.read(self.process.stdout.fileno(), 1) if ready else b""
            if not chunk:
                self.stop()
                raise RuntimeError(f"the forking process did not start: {said!r}")
            said += chunk
        assert json.loads(said) == {"ready": True}, said

    def stop(self) -> None:
        """End the forking process (its children are the tests' to end)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(FORK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


class Forks:
    """The forking process, seen from a test: fork pinbot processes, kill them, wait for their
    end. Every line they log is kept in `log`."""

    def __init__(
        self,
        server: ForkServer,
        answers: asyncio.StreamReader,
        errors: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._server = server
        self._transports = transports
        self.log: list[str] = []
        self._answers: asyncio.Queue[int] = asyncio.Queue()
        self._exited: dict[int, asyncio.Future[int]] = {}
        self._logged = asyncio.Condition()
        self._mark = str(next(_marks))
        loop = asyncio.get_running_loop()
        # the mark read from standard output, from standard error
        self._marked: tuple[asyncio.Future[None], asyncio.Future[None]] = (
            loop.create_future(),
            loop.create_future(),
        )
        self._tasks = [
            asyncio.create_task(self._read_answers(answers)),
            asyncio.create_task(self._read_log(errors)),
        ]

    @classmethod
    async def attach(cls, server: ForkServer) -> Forks:
        """The forking process, for this test (its event loop) until detach."""
        loop = asyncio.get_running_loop()
        readers: list[asyncio.StreamReader] = []
        transports: list[asyncio.BaseTransport] = []
        for pipe in (server.process.stdout, server.process.stderr):
            assert pipe is not None
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            # a descriptor of the test's own: closing the transport leaves the server's open
            own = os.fdopen(os.dup(pipe.fileno()), "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(lambda: protocol, own)  # noqa: B023
            readers.append(reader)
            transports.append(transport)
        return cls(server, readers[0], readers[1], transports)

    async def fork(
        self, *args: str, env: dict[str, str] | None = None, stderr: str | None = None
    ) -> int:
        """Start `pinbot ARGS` with env added to this process's environment as it is now (not
        the forking process's, which is that of the test that started it); its pid. With
        stderr (the path of a FIFO open for reading), its standard error is that FIFO and its
        standard output /dev/null; otherwise both are the forking process's."""
        command: dict[str, Any] = {"args": args, "env": {**os.environ, **(env or {})}}
        if stderr is not None:
            command["stderr"] = stderr
        stdin = self._server.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(command).encode() + b"\n")
        stdin.flush()  # a line at a time, far below a pipe's buffer: the write never waits
        return await asyncio.wait_for(self._answers.get(), FORK_TIMEOUT_S)

    def kill(self, pid: int) -> None:
        """SIGKILL a forked process now."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def exit(self, pid: int) -> asyncio.Future[int]:
        """A forked process's exit status (negative: the signal), once it has ended."""
        return asyncio.shield(self._exited[pid])

    async def ended(self, pid: int) -> int:
        """Wait for a forked process to end; its exit status (negative: the signal)."""
        return await asyncio.wait_for(asyncio.shield(self._exited[pid]), FORK_TIMEOUT_S)

    async def detach(self) -> None:
        """Kill every forked process still running and wait for its end, which is the last
        the forking process says of this test's processes; then stop listening to it."""
        for pid, exited in self._exited.items():
            if not exited.done():
                self.kill(pid)
                await self.ended(pid)
        # Each process wrote its last before it ended: the forking process's mark, written to
        # both pipes after that, comes after everything they said, and once it is read nothing
        # of this test is left in the pipes for the next one.
        stdin = self._server.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"mark": self._mark}).encode() + b"\n")
        stdin.flush()
        await asyncio.wait_for(asyncio.gather(*self._marked), FORK_TIMEOUT_S)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for transport in self._transports:
            transport.close()

    async def _read_answers(self, answers: asyncio.StreamReader) -> None:
        async for line in answers:
            said = json.loads(line)
            if "pid" in said:  # its end is awaited from now on, however soon it comes
                self._exited[int(said["pid"])] = asyncio.get_running_loop().create_future()
                self._answers.put_nowait(int(said["pid"]))
            elif "exited" in said:
                exited = self._exited.get(int(said["exited"]))
                if exited is not None and not exited.done():
                    exited.set_result(int(said["status"]))
            elif said.get("marked") == self._mark:
                self._marked[0].set_result(None)

    async def line(self, fragment: str, since: int = 0) -> str:
        """Wait for a logged line holding fragment, from line number since on; the line."""

        def found() -> str | None:
            return next((line for line in self.log[since:] if fragment in line), None)

        async with self._logged:
            await asyncio.wait_for(self._logged.wait_for(found), FORK_TIMEOUT_S)
        line = found()
        assert line is not None
        return line

    async def _read_log(self, errors: asyncio.StreamReader) -> None:
        async for line in errors:
            if line.decode(errors="replace").rstrip() == f"{MARK}{self._mark}":
                self._marked[1].set_result(None)
                continue
            self.log.append(line.decode(errors="replace").rstrip())
            async with self._logged:
                self._logged.notify_all()


if __name__ == "__main__":
    _serve()
