"""Processes pinned to cores: the bot on a core of its own, the load generator and the fake
servers on the other, so that the figures of the bot steady on a shared 2-core machine
(FIELD-NOTES: about ±5% pinned against ±20% sharing both cores)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

BOT_CORE, OTHERS_CORE = 1, 0


def can_pin() -> bool:
    """Whether this machine has the two cores pinning puts the bot and the rest on."""
    return {BOT_CORE, OTHERS_CORE} <= os.sched_getaffinity(0)


def pinned(core: int, on: bool = True) -> list[str]:
    """A command prefix that runs a program on core (none when off or pinning is impossible)."""
    return ["taskset", "-c", str(core)] if on and can_pin() else []


@contextlib.contextmanager
def on_core(core: int, on: bool = True) -> Iterator[None]:
    """This process on core meanwhile (unchanged when off or pinning is impossible)."""
    if not (on and can_pin()):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
