"""Streamed replies on Telegram (issue 31, item 3): how long after the model's first token a user
sees the first words, and how long after its last token the finished message stands.

The real `pinbot telegram` process (polling mode, `llm.stream: true`, the real OpenAI client)
talks to the fake Bot API in its own process and to a fake OpenAI-compatible server in this one
that streams each answer at a set time to first token and token rate. The fake model records
when it wrote the first and last content chunk, the fake Bot API when each call arrived (both on
the system's monotonic clock), and each chat's figures are (first sendMessage − first token) and
(the call that leaves the chat showing the whole formatted answer − last token). This tree and an
earlier commit run alternately in the same run; processes are pinned to cores as FIELD-NOTES
advise (the bot on one, the fakes and this driver on the other).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.baseline import ROOT, tree_of
from bench.cores import BOT_CORE, OTHERS_CORE, on_core, pinned
from bench.stats import percentile
from bot.adapters.telegram_send import formatted_parts
from tests.fakes.openai_server import FakeOpenAI, completion
from tests.fakes.telegram_server import TOKEN, message, private_chat, user
from tests.process import PINBOT
from tests.workers import Worker

BASELINE = "cccd511"  # main before issue 31's item 3
FIRST_TOKEN_S = 0.5  # the fake model's time to first token
TOKEN_S = 0.02  # and its pace: 50 chunks of 5 characters a second
ONE_WAY_MS = 50  # the fake Bot API's network delay each way (a 100 ms round trip)
LENGTHS = (300, 1_000, 2_000, 3_500, 5_000, 8_000)  # answers' lengths in characters, in turn
KEY_ENV = "PINBOT_BENCH_KEY"
WAIT_S = 120  # a safety net for a wave that never completes, never a pause
POLL_S = 0.05
# Telegram's pace for one message, "about once a second" (SPEC): writes that arrive closer than
# this (a tenth of a second allowed for the way there) count as faster.
PACE_MS = 900
QUESTION = re.compile(r"question (\d+)")


@dataclass(frozen=True)
class Settings:
    """How much to measure: turns per run, in waves of `concurrent` chats, runs per tree, and
    the answers' lengths in characters, chat by chat in turn."""

    turns: int
    concurrent: int
    runs: int
    lengths: tuple[int, ...] = LENGTHS


QUICK = Settings(6, 6, 1, (300, 1_000, 2_000))
FULL = Settings(12, 6, 3)


def answer_for(chat: int, lengths: Sequence[int]) -> str:
    """The model's Markdown answer in this chat: lines of text with formatting that the final
    edit shows and the plain previews do not, lengths[chat % len(lengths)] characters long."""
    length = lengths[chat % len(lengths)]
    lines = [f"**Answer for chat {chat}.** Here it is:"]
    while sum(len(line) + 1 for line in lines) < length:
        n = len(lines)
        lines.append(f"{n}. A line of the answer with `code {n}` and _emphasis_, then more words.")
    return "\n".join(lines)[:length]


def final_texts(chat: int, lengths: Sequence[int]) -> list[str]:
    """What Telegram shows once the answer is complete: its formatted parts' texts."""
    return [text for text, _ in formatted_parts(answer_for(chat, lengths))]


def _responder(lengths: Sequence[int]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The fake model's answer to a benchmark question."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        said = str(body["messages"][-1]["content"])
        found = QUESTION.search(said)
        assert found, f"not a benchmark question: {said!r}"
        return completion(answer_for(int(found.group(1)), lengths))

    return respond


def _bot_program(tree: Path) -> list[str]:
    if tree == ROOT:
        return [*pinned(BOT_CORE), PINBOT]
    # The earlier commit's own code first on the path (PYTHONPATH; -P keeps this folder off
    # it); the command line is the same.
    entry = "import sys; from bot.cli import main; sys.exit(main())"
    return [*pinned(BOT_CORE), sys.executable, "-P", "-c", entry]


class Chats:
    """The fake Bot API's calls as the chats show them: each chat's sendMessage and
    editMessageText calls, in order, read from the fake a slice at a time."""

    def __init__(self, control: httpx.AsyncClient, lengths: Sequence[int]) -> None:
        self._control = control
        self._lengths = lengths
        self._read = 0
        self.calls: dict[int, list[dict[str, Any]]] = {}

    async def refresh(self) -> None:
        """Read the calls that arrived since the last refresh."""
        answer = await self._control.get("/_control/calls", params={"since": self._read})
        new = answer.json()
        self._read += len(new)
        for call in new:
            if call["method"] in ("sendMessage", "editMessageText"):
                chat = int(call["params"]["chat_id"])
                self.calls.setdefault(chat, []).append(call)

    def complete(self, chat: int) -> bool:
        """Whether every part of the chat's formatted answer is shown."""
        shown = {call["params"]["text"] for call in self.calls.get(chat, [])}
        return all(text in shown for text in final_texts(chat, self._lengths))


async def _wave(control: httpx.AsyncClient, chats: Chats, wave: Sequence[int]) -> None:
    """Push one question in each chat of the wave; wait until each shows its whole answer."""
    questions = [message(private_chat(c), f"question {c}", user(c)) for c in wave]
    (await control.post("/_control/push", json=questions)).raise_for_status()
    deadline = time.perf_counter() + WAIT_S
    while True:
        await chats.refresh()
        if all(chats.complete(chat) for chat in wave):
            return
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no complete answer after {WAIT_S} s")
        await asyncio.sleep(POLL_S)


def _figures(model: FakeOpenAI, chats: Chats, lengths: Sequence[int]) -> list[dict[str, float]]:
    """Per turn: first visible text − first token and final message − last token (ms), its
    edits, and the shortest gap between two writes to the streamed message (its sendMessage
    and every edit, the final one included; ms): the pace Telegram's flood limit cares about."""
    figures = []
    for streamed in model.streamed:
        said = str(model.requests[streamed.request]["messages"][-1]["content"])
        found = QUESTION.search(said)
        assert found
        chat = int(found.group(1))
        calls, parts = chats.calls[chat], final_texts(chat, lengths)
        first = next(c["at"] for c in calls if c["method"] == "sendMessage")
        final = next(c["at"] for c in calls if c["params"]["text"] == parts[-1])
        # Only the first message is streamed: every edit in the chat is one of it.
        edits = [c["at"] for c in calls if c["method"] == "editMessageText"]
        writes = [first, *edits]
        gaps = [later - earlier for earlier, later in itertools.pairwise(writes)]
        figures.append(
            {
                "first_ms": (first - streamed.first_token_at) * 1000,
                "final_ms": (final - streamed.last_token_at) * 1000,
                "edits": len(edits),
                "min_write_gap_ms": min(gaps) * 1000 if gaps else 1000.0,
            }
        )
    return figures


async def _run_tree(
    tree: Path, folder: Path, settings: Settings, first_chat: int
) -> tuple[list[dict[str, float]], float]:
    """One run of turns through `pinbot telegram` of tree: each turn's figures, and the bot's
    CPU seconds per turn."""
    telegram = subprocess.Popen(
        [
            *pinned(OTHERS_CORE),
            sys.executable,
            "-m",
            "tests.fakes.telegram_server",
            "--one-way-ms",
            str(ONE_WAY_MS),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    model = await FakeOpenAI().start()
    model.respond = _responder(settings.lengths)
    model.first_token_s, model.token_s = FIRST_TOKEN_S, TOKEN_S
    bot: Worker | None = None
    try:
        assert telegram.stdout is not None
        base = f"http://127.0.0.1:{int(telegram.stdout.readline())}"
        config = {
            "storage": {"path": str(folder / "streaming.sqlite3")},
            "telegram": {"base_url": f"{base}/bot", "poll_timeout_s": 1},
            "llm": {
                "backend": "openai",
                "base_url": model.base_url,
                "model": "fake-model",
                "api_key_env": KEY_ENV,
                "stream": True,
                "max_retries": 0,
                "max_completion_tokens": 8_000,
            },
            "limits": {"model_turns_per_minute": 0},
        }
        path = folder / "streaming.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        env = {KEY_ENV: "sk-bench", "TELEGRAM_BOT_TOKEN": TOKEN}
        if tree != ROOT:
            env["PYTHONPATH"] = str(tree)
        bot = Worker(["telegram", "--config", str(path)], env, 0, "", _bot_program(tree))
        await bot.start()
        async with httpx.AsyncClient(base_url=base) as control:
            chats = Chats(control, settings.lengths)
            numbers = list(range(first_chat, first_chat + settings.turns))
            cpu_before = bot.cpu_seconds()
            for start in range(0, settings.turns, settings.concurrent):
                await _wave(control, chats, numbers[start : start + settings.concurrent])
            cpu = bot.cpu_seconds() - cpu_before
        return _figures(model, chats, settings.lengths), cpu / settings.turns
    finally:
        if bot is not None and bot.running:
            await bot.stop()
        await model.stop()
        telegram.terminate()
        telegram.wait()


def _summary(samples: list[dict[str, float]], cpu: list[float]) -> dict[str, float]:
    first = [s["first_ms"] for s in samples]
    final = [s["final_ms"] for s in samples]
    return {
        "turns": len(samples),
        "first_p50_ms": round(percentile(first, 0.5), 1),
        "first_p95_ms": round(percentile(first, 0.95), 1),
        "final_p50_ms": round(percentile(final, 0.5), 1),
        "final_p95_ms": round(percentile(final, 0.95), 1),
        "edits_per_turn": round(sum(s["edits"] for s in samples) / len(samples), 1),
        "min_write_gap_ms": round(min(s["min_write_gap_ms"] for s in samples), 1),
        "turns_writing_faster": sum(s["min_write_gap_ms"] < PACE_MS for s in samples),
        "bot_cpu_ms_per_turn": round(statistics.median(cpu) * 1000, 1),
    }


def run(settings: Settings) -> dict[str, Any]:
    """This tree and BASELINE, alternating runs; p50/p95 over every turn of each."""
    samples: dict[str, list[dict[str, float]]] = {"ours": [], "baseline": []}
    cpu: dict[str, list[float]] = {"ours": [], "baseline": []}
    with tree_of(BASELINE) as old, tempfile.TemporaryDirectory() as name, on_core(OTHERS_CORE):
        trees = {"ours": ROOT, "baseline": old}
        for run in range(settings.runs):
            for which, tree in trees.items():
                if tree is None:
                    continue
                folder = Path(name) / f"{which}-{run}"
                folder.mkdir()
                turns, per_turn = asyncio.run(_run_tree(tree, folder, settings, 1000 * (run + 1)))
                samples[which] += turns
                cpu[which].append(per_turn)
    return {
        "first_token_s": FIRST_TOKEN_S,
        "token_s": TOKEN_S,
        "one_way_ms": ONE_WAY_MS,
        "lengths": list(settings.lengths),
        "concurrent_chats": settings.concurrent,
        "baseline": BASELINE,
        "ours": _summary(samples["ours"], cpu["ours"]),
        "baseline_figures": (
            _summary(samples["baseline"], cpu["baseline"]) if samples["baseline"] else None
        ),
    }


if __name__ == "__main__":
    import json

    quick = "--quick" in sys.argv
    print(json.dumps(run(QUICK if quick else FULL), indent=2))
