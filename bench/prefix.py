"""How much of each model request a provider can serve from its prefix cache: a 20-turn DM with
3 strong and 2 context blocks and no block change, through the real Pinbot.handle, against the
same conversation rendered the way pinbot did before (one marker per request, hashed over the
user's message too)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bot.config import parse_config
from bot.core.entry.incoming import SILENT, Incoming
from bot.core.entry.pinbot import Pinbot
from bot.core.people.keys import ChatKind, Conversation
from bot.llm.base import Message, ModelReply, ModelRequest, Progress, TextSink
from storage import Store

TURNS = 20
SPEAKER = Conversation("bench", ChatKind.DIRECT, "1", "1")
BLOCKS = [
    "/pin add-strong tone Answer briefly and politely; say when you are unsure.",
    "/pin add-strong safety Never suggest deleting files without asking first.",
    "/pin add-strong units Use metric units and ISO dates.",
    "/pin add-context project The project is pinbot, a chat-bot frontend in Python.",
    "/pin add-context team The team meets on Mondays at 10:00 UTC.",
]


class RecordingModel:
    """Answers every request with a fixed-size reply and keeps the exact messages it got."""

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []  # chat turns only, not summaries

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        if request.purpose == "summary":
            return ModelReply("The user asked questions 1 to N about the project.")
        self.requests.append([dict(m) for m in request.messages])
        return ModelReply(f"Answer {len(self.requests)}: " + "details " * 20)

    async def close(self) -> None:
        pass


def serialised(messages: list[Message]) -> str:
    """The request as a provider sees its prefix: the messages in order."""
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)


def _common_prefix(a: str, b: str) -> int:
    # Character by character is the point: providers reuse exact prefixes.
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071


def one_marker_per_request(messages: list[Message]) -> list[Message]:
    """The same request with both section markers replaced by one request-wide marker hashed
    over everything users wrote, the user's message included (pinbot's rendering before)."""
    text = serialised(messages)
    markers = sorted(set(_markers(text)))
    if not markers:
        return messages
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    old = "pin-" + digest
    result = []
    for message in messages:
        content = str(message["content"])
        for marker in markers:
            content = content.replace(marker, old)
        result.append({**message, "content": content})
    return result


def _markers(text: str) -> list[str]:
    return re.findall(r"pin-[0-9a-f]{16}", text)


def shares(requests: list[list[Message]]) -> list[float]:
    """For turns 2..N: the share of the previous request minus its newest user message that is
    an exact prefix of this request (1.0: the provider can reuse all of it)."""
    result = []
    for before, after in itertools.pairwise(requests):
        reusable = serialised(before[:-1])
        common = _common_prefix(reusable, serialised(after))
        result.append(min(common, len(reusable)) / len(reusable) if reusable else 1.0)
    return result


async def _conversation(history_max_turns: int) -> list[list[Message]]:
    with tempfile.TemporaryDirectory(prefix="pinbot-prefix-") as folder:
        store = await Store.open(Path(folder) / "prefix.sqlite3")
        model = RecordingModel()
        config = parse_config(
            {
                "limits": {"model_turns_per_minute": 0, "pin_commands_per_minute": 0},
                "chat": {
                    "history_max_turns": history_max_turns,
                    "history_max_chars": 100_000,
                    "compaction_keep_turns": 4,
                },
            }
        )
        bot = Pinbot(config, store, model)
        try:
            for command in BLOCKS:
                await bot.handle(Incoming(SPEAKER, command), SILENT)
            for number in range(1, TURNS + 1):
                await bot.handle(
                    Incoming(SPEAKER, f"Question {number}: what should I do next?"), SILENT
                )
        finally:
            await store.close()
        return model.requests


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "mean_pct": round(100 * statistics.mean(values), 2),
        "min_pct": round(100 * min(values), 2),
    }


def run() -> dict[str, Any]:
    """The cacheable share per turn, ours and before, and across a compaction."""
    requests = asyncio.run(_conversation(history_max_turns=TURNS + 1))
    ours = shares(requests)
    before = shares([one_marker_per_request(r) for r in requests])
    compacted = asyncio.run(_conversation(history_max_turns=8))
    across = shares(compacted)
    compaction_turns = [i for i, share in enumerate(across, start=2) if share < 1.0]
    return {
        "turns": TURNS,
        "ours": _summary(ours),
        "one_marker_per_request": _summary(before),
        "with_compaction": {
            **_summary(across),
            "compaction_at_turns": compaction_turns,
            "at_compaction_pct": [round(100 * across[t - 2], 2) for t in compaction_turns],
        },
    }
