"""Watching the store's transactions from outside (the metrics): each watcher is told how long
each transaction took and whether the database could not be reached. Storage knows nothing of
who watches; with no watcher, watching costs one check."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from storage.errors import Unavailable

# (seconds the transaction took, whether the database could not be reached)
Watcher = Callable[[float, bool], None]
WATCHERS: list[Watcher] = []
# Set inside a transaction: its statements belong to it and are not transactions of their own.
_INSIDE: ContextVar[bool] = ContextVar("inside a watched transaction", default=False)


def watch(watcher: Watcher) -> None:
    """Tell watcher of every transaction from now on (once, however often it is given)."""
    if watcher not in WATCHERS:
        WATCHERS.append(watcher)


def unwatch(watcher: Watcher) -> None:
    """Stop telling watcher."""
    if watcher in WATCHERS:
        WATCHERS.remove(watcher)


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """One transaction (an autocommitted statement, a batch, or a transaction block), timed for
    the watchers; a statement inside a transaction is part of it, not one of its own. Only
    Unavailable counts as a failure: a refused write (a conflict, a limit) is the store
    working."""
    if not WATCHERS or _INSIDE.get():
        yield
        return
    token = _INSIDE.set(True)
    started = time.perf_counter()
    failed = False
    try:
        yield
    except Unavailable:
        failed = True
        raise
    finally:
        _INSIDE.reset(token)
        took = time.perf_counter() - started
        for watcher in WATCHERS:
            watcher(took, failed)
