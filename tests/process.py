"""Running the `pinbot` command as a user would, for the tests that judge it from outside: as a
real process (run_pinbot), or, where a process adds nothing to what a test judges (output, exit
status, files), its `main` in this process with the same inputs (run_pinbot_here)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

PINBOT = str(Path(sys.executable).parent / "pinbot")
PROCESS_TIMEOUT_S = 60  # a safety net for a hung process, not a pause


async def run_pinbot(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """Run `pinbot ARGS` with stdin, the environment plus env, in folder cwd (default: this
    one); returns (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), PROCESS_TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def run_pinbot_here(
    *args: str,
    stdin: bytes = b"",
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    """What run_pinbot returns, without a process: `bot.cli.main(ARGS)` in a thread of its own
    (it may call asyncio.run), with stdin, stdout and stderr, the environment plus env (a None
    value: the variable unset) and the folder cwd set for the call, and everything it changes
    for the whole process (logging, the secrets it hides, metrics) put back afterwards. Not for
    what only a process shows: signals, a crash's exit status, serving until stopped, the modes
    of the files it creates, variables read at start."""
    _import_feishu_here(args)
    return await asyncio.wait_for(
        asyncio.to_thread(_main_here, args, stdin, env or {}, cwd), PROCESS_TIMEOUT_S
    )


def _import_feishu_here(args: tuple[str, ...]) -> None:
    """lark-oapi, which `pinbot feishu` imports, keeps the event loop it is first imported in:
    imported here, that is the test's loop, as for the other tests, not the call's own."""
    if args[:1] == ("feishu",):
        import bot.adapters.feishu  # noqa: F401


_ONE_AT_A_TIME = threading.Lock()  # stdio, environment and folder belong to the whole process
# signal number -> (the loop, the handler, its arguments) a call in this process asked for
_SIGNALLED: dict[int, tuple[asyncio.AbstractEventLoop, Any, tuple[Any, ...]]] = {}


class _Stream(io.TextIOWrapper):
    """A captured standard stream that keeps only what the call's own threads write: a fake
    server answering in the test's thread meanwhile logs to the test's output, as it would
    beside a real process."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="\n")

    def write(self, text: str) -> int:
        if threading.current_thread() is threading.main_thread():
            return len(text)
        return super().write(text)

    def text(self) -> str:
        """Everything written, as run_pinbot decodes a process's output."""
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode()


def _main_here(
    args: tuple[str, ...], stdin: bytes, env: Mapping[str, str | None], cwd: Path | None
) -> tuple[int, str, str]:
    from bot import metrics
    from bot.adapters import console
    from bot.cli import main
    from bot.logs import REDACTOR

    with _ONE_AT_A_TIME, logging_kept(), _environment(env), _folder(cwd), _no_signals():
        out, err = _Stream(), _Stream()
        saved = sys.stdin, sys.stdout, sys.stderr, console.run_console.__defaults__
        hidden = list(REDACTOR._secrets)
        metered = metrics.active()
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        sys.stdout, sys.stderr = out, err
        # run_console's default sink is the sys.stdout of when it was imported.
        console.run_console.__defaults__ = (None, out)
        try:
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse: --help, --version, a usage error
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            return code, out.text(), err.text()
        finally:
            sys.stdin, sys.stdout, sys.stderr, console.run_console.__defaults__ = saved
            REDACTOR._secrets[:] = hidden
            if metrics.active() is not metered:
                metrics.disable()


@contextlib.asynccontextmanager
async def serving_here(
    *args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None
) -> AsyncIterator[list[str]]:
    """`pinbot ARGS` (a command that serves until SIGINT or SIGTERM) run as run_pinbot_here
    runs it, until the block ends; then its SIGTERM handler is called, as the signal would,
    and the list gets its stderr. The command must have started serving when the block ends;
    a command that failed to start fails here with its output."""
    _SIGNALLED.clear()
    _import_feishu_here(args)
    call = asyncio.ensure_future(
        asyncio.to_thread(_main_here, args, b"", env or {}, cwd), loop=asyncio.get_running_loop()
    )
    err: list[str] = []
    try:
        yield err
    finally:
        if signal.SIGTERM in _SIGNALLED:
            loop, handler, arguments = _SIGNALLED.pop(signal.SIGTERM)
            loop.call_soon_threadsafe(handler, *arguments)
        code, out, stderr = await asyncio.wait_for(call, PROCESS_TIMEOUT_S)
        err.append(stderr)
    assert code == 0, (code, out, stderr)


@contextlib.contextmanager
def _no_signals() -> Iterator[None]:
    """Signal handlers asked for outside the main thread are not installed (Python allows them
    only there) but kept in _SIGNALLED, for serving_here to call as the signal would."""
    loop_class = asyncio.SelectorEventLoop
    install = loop_class.add_signal_handler

    def add_signal_handler(loop: Any, signum: int, callback: Any, *args: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            install(loop, signum, callback, *args)
        else:
            _SIGNALLED[signum] = (loop, callback, args)

    loop_class.add_signal_handler = add_signal_handler  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        loop_class.add_signal_handler = install  # type: ignore[method-assign]


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    before = dict(os.environ)
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


@contextlib.contextmanager
def _folder(cwd: Path | None) -> Iterator[None]:
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """Logging's set-up (every logger's level, handlers, propagation) as it was before, after:
    what configures logging (setup_logging, the Feishu adapter adopting lark-oapi's logger) would
    otherwise change what later code in this process writes."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    saved = [(lg, lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]
    try:
        yield
    finally:
        for logger, level, handlers, propagate, disabled in saved:
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.disabled = disabled
