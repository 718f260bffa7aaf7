"""What a compaction costs in tokens, with and without pin suggestions (issue 39): a long DM
through the real Pinbot.handle with the default chat settings, compacted several times, and the
compaction part of usage read back from the store (what /usage shows under compaction).

The model here answers as a model would (a 200-word summary; three suggestions where asked) and
reports no usage, so every call is counted the way the ledger counts a server that reports none:
the request as sent (messages and tool definitions, as JSON) and the answer, at 4 characters a
token. Three settings: `off` (the summary alone, as before), `dm` on a server that takes tools
(one call with both), and `dm` on a server that refuses them (the summary, then a call of its
own for the suggestions)."""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from bot.config import parse_config
from bot.core.entry.incoming import SILENT, Incoming
from bot.core.entry.pinbot import Pinbot
from bot.core.people import ChatKind, Conversation
from bot.llm.base import ModelReply, ModelRequest, Progress, TextSink, ToolCall, ToolsRefused
from bot.llm.suggest import COMPACT_TOOL
from storage import Store

TURNS = 60
SPEAKER = Conversation("bench", ChatKind.DIRECT, "1", "1")
QUESTION = (
    "We are planning the migration of the billing service to the new cluster; I prefer small "
    "steps and a rollback plan for each. What should we do next, given what we decided so far? "
)
ANSWER = (
    "Here is the next step. Move the read-only reports first: they have no writes, so a "
    "rollback is a DNS change. Then copy the invoices table with the dual-write script, compare "
    "the row counts and checksums every hour for a day, and switch the writers in the quiet "
    "window on Sunday at 02:00 UTC. Keep the old cluster running for a week; the rollback for "
    "each step is in the runbook under the same heading. Tell me when the reports are moved. "
)
SUMMARY = " ".join(["The user plans the billing migration in small steps with rollbacks."] * 18)
SUGGESTIONS = [
    {
        "label": "style",
        "content": "Prefers small migration steps, each with its own rollback plan.",
        "reason": "Said at the start and repeated in every request.",
    },
    {
        "label": "window",
        "content": "Switches writers in the quiet window, Sundays at 02:00 UTC.",
        "reason": "Agreed as the team's change window.",
    },
    {
        "label": "project",
        "content": "Migrating the billing service to the new cluster.",
        "reason": "The topic of the whole conversation.",
    },
]


class AnsweringModel:
    """Answers turns, summaries and suggestions at realistic lengths; refuses tools if told."""

    def __init__(self, *, tools: bool) -> None:
        self._tools = tools
        self.compactions = 0  # summaries answered: one a compaction

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        if request.tools and not self._tools:
            raise ToolsRefused("The model server does not support tools.", "bench")
        self.compactions += request.purpose == "summary"
        if request.purpose == "summary" and request.tools:
            arguments = json.dumps({"summary": SUMMARY, "suggestions": SUGGESTIONS})
            return ModelReply("", [ToolCall("call_1", COMPACT_TOOL, arguments)])
        if request.purpose == "summary":
            return ModelReply(SUMMARY)
        if request.purpose == "suggestions":
            return ModelReply(json.dumps({"suggestions": SUGGESTIONS}))
        return ModelReply(ANSWER)

    async def close(self) -> None:
        pass


async def _measure(folder: Path, mode: str, *, tools: bool) -> dict[str, Any]:
    config = parse_config(
        {"pins": {"suggest_on_compaction": mode}, "limits": {"model_turns_per_minute": 0}},
        "<bench>",
    )
    async with await Store.open(folder / f"compaction-{mode}-{tools}.sqlite3") as store:
        model = AnsweringModel(tools=tools)
        bot = Pinbot(config, store, model)
        for turn in range(TURNS):
            await bot.handle(Incoming(SPEAKER, f"{QUESTION}(turn {turn})"), SILENT)
        day = bot.clock().date().isoformat()
        part = await store.sender_usage("bench", "1", day, day, compaction=True)
    compactions = max(1, model.compactions)
    calls = part.calls / compactions
    return {
        "compactions": compactions,
        "calls_per_compaction": round(calls, 2),
        "prompt_tokens": round(part.prompt_tokens / compactions),
        "completion_tokens": round(part.completion_tokens / compactions),
        "tokens": round(part.billed_tokens / compactions),
    }


def run() -> dict[str, Any]:
    """Tokens per compaction (estimated at 4 characters a token) in the three settings, and
    what suggestions add."""

    async def all_three() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="pinbot-compaction-") as name:
            folder = Path(name)
            return {
                "off": await _measure(folder, "off", tools=True),
                "combined": await _measure(folder, "dm", tools=True),
                "fallback": await _measure(folder, "dm", tools=False),
            }

    # The server without tools is one log line each run; the figures say it.
    logging.getLogger("bot.core.conversation.compaction").setLevel(logging.ERROR)
    figures = asyncio.run(all_three())
    base = figures["off"]["tokens"]
    for name in ("combined", "fallback"):
        added = figures[name]["tokens"] - base
        figures[name]["added_tokens"] = added
        figures[name]["added_pct"] = round(100 * added / base, 1) if base else 0.0
    return {"turns": TURNS, "suggestions": len(SUGGESTIONS), **figures}


def describe(figures: dict[str, Any]) -> str:
    """The figures as one line of the benchmark's table."""
    off, both, alone = figures["off"], figures["combined"], figures["fallback"]
    return (
        f"Compaction tokens (a {figures['turns']}-turn DM, {off['compactions']} compactions, "
        f"estimated at 4 characters a token), per compaction: summary alone {off['tokens']:,} "
        f"({off['prompt_tokens']:,} prompt + {off['completion_tokens']:,} completion); with "
        f"{figures['suggestions']} pin suggestions in the same call {both['tokens']:,} "
        f"(+{both['added_tokens']:,}, +{both['added_pct']}%); in a call of their own (server "
        f"without tools) {alone['tokens']:,} in {alone['calls_per_compaction']:g} calls "
        f"(+{alone['added_tokens']:,}, +{alone['added_pct']}%)"
    )


if __name__ == "__main__":
    figures = run()
    print(describe(figures))
    print(json.dumps(figures, indent=2))
