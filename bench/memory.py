"""Peak RSS of a process that opens a store and serves turns on it: run as
`python -m bench.memory DB SCOPES TURNS` in its own process, it prints its peak RSS in KiB.

It reads VmHWM from /proc: getrusage's ru_maxrss survives exec, so a child would report the
benchmark parent's peak instead of its own."""

from __future__ import annotations

import asyncio
import random
import resource
import subprocess
import sys
from pathlib import Path

from bench.turn import TEXT


async def _serve(path: Path, scopes: int, turns: int) -> None:
    from bot.config import parse_config
    from bot.core.entry.incoming import SILENT, Incoming
    from bot.core.entry.pinbot import Pinbot
    from bot.core.people import ChatKind, Conversation
    from bot.llm.offline import OfflineChatModel
    from storage import Store

    store = await Store.open(path)
    bot = Pinbot(parse_config({}), store, OfflineChatModel())
    rng = random.Random(3)
    try:
        for _ in range(turns):
            index = rng.randrange(max(scopes, 1))
            conversation = Conversation("bench", ChatKind.DIRECT, str(index), str(index))
            await bot.handle(Incoming(conversation, TEXT), SILENT)  # a whole turn, history included
            await bot.handle(Incoming(conversation, "/pin list"), SILENT)
    finally:
        await store.close()


def peak_rss_kib(path: Path, scopes: int, turns: int) -> int:
    """Run the serving process and return its peak RSS in KiB."""
    root = Path(__file__).resolve().parent.parent
    output = subprocess.run(
        [sys.executable, "-m", "bench.memory", str(path), str(scopes), str(turns)],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    return int(output.strip().splitlines()[-1])


def _own_peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: best effort


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
    print(_own_peak_kib())
