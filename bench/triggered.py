"""Issue 48's figures: what keyword-triggered blocks cost a turn, and what a plain turn costs
against the commit before them (BEFORE).

A group member's turn through the real core path (`ChatService.blocks_for_turn`: the scopes'
blocks read with the call counting, ends and idle clean-up, the selection, the rendering) in
three cases, interleaved turn by turn on two stores built alike:

- plain: the member's personal scope holds bench.data's 10 plain blocks, the group's shared
  scope nothing;
- triggered, none mentioned: the same, and the group's shared scope holds 1,000 triggered
  blocks of 5 keywords each (realistic words and phrases, some Chinese), the most a scope may
  hold (`pins.max_blocks_per_session: 1000`, the key's upper bound, is why they sit in the
  shared scope and the plain ones in the personal one); the messages mention none of them;
- triggered, mentioned: the same store, messages that mention one or two keywords.

Each turn also reads the user's two previous messages (`pins.trigger_turns`), none of which
mentions a keyword. Reported: p50 and p95 per turn in ms, each triggered case's p95 over the
plain one's, and what building the scope's matcher costs once.

The plain turn against BEFORE: the same harness on DM stores of bench.data's shape, each tree
building its own store and measured in a fresh process on its own packages, alternating runs
(bench.history.call_in), wall time per turn and the process's CPU per turn.

`python -m bench.triggered [--quick]` runs this part alone; `python -m bench` runs it with
everything else."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import data
from bench.stats import percentile

BEFORE = "d7a6962"  # 263939b^: the last commit before triggered blocks (issue 48)
TRIGGERED = 1_000  # triggered blocks in each group's shared scope
KEYWORDS = 5  # keywords a triggered block has
MEMBERS = 9  # members of each group with personal blocks
TARGET_MS = 1.0  # 1,000 triggered blocks may add at most this to a turn's p95
PLAIN_TARGET = 1.05  # a plain turn's CPU against BEFORE's (5% of run-to-run noise)
QUICK = {"groups": 2, "turns": 200, "plain_scopes": 1_000, "plain_turns": 500, "plain_runs": 1}
FULL = {"groups": 8, "turns": 3_000, "plain_scopes": 10_000, "plain_turns": 3_000, "plain_runs": 5}

# What a team's knowledge base is about: topics, and what about them (keywords are a topic, or a
# kind of it: "release checklist").
TOPICS = (
    "deploy",
    "release",
    "invoice",
    "onboarding",
    "vacation",
    "payroll",
    "kubernetes",
    "terraform",
    "postgres",
    "backup",
    "incident",
    "oncall",
    "roadmap",
    "budget",
    "hiring",
    "interview",
    "laptop",
    "vpn",
    "password",
    "expenses",
    "travel",
    "contract",
    "customer",
    "support",
    "refund",
    "pricing",
    "marketing",
    "newsletter",
    "webinar",
    "conference",
    "security",
    "audit",
    "gdpr",
    "compliance",
    "license",
    "firewall",
    "monitoring",
    "grafana",
    "prometheus",
    "alerting",
    "dashboard",
    "latency",
    "database",
    "migration",
    "schema",
    "staging",
    "production",
    "rollback",
    "hotfix",
    "sprint",
    "retro",
    "standup",
    "okr",
    "quarterly",
    "offsite",
    "office",
    "parking",
    "printer",
    "wifi",
    "slack",
    "jira",
    "confluence",
    "github",
    "pipeline",
    "docker",
    "helm",
    "nginx",
    "certificate",
    "dns",
    "domain",
    "email",
    "calendar",
    "meeting",
    "reimbursement",
    "insurance",
    "benefits",
    "pension",
    "training",
    "mentoring",
    "feedback",
    "promotion",
)
KINDS = (
    "checklist",
    "policy",
    "process",
    "template",
    "owner",
    "deadline",
    "review",
    "guide",
    "schedule",
    "request",
    "approval",
    "runbook",
    "limits",
    "rules",
    "contacts",
    "form",
    "steps",
    "plan",
    "report",
    "setup",
    "account",
    "access",
    "costs",
    "timeline",
    "faq",
    "status",
    "notes",
    "escalation",
    "handbook",
    "calendar",
)
CHINESE = (
    "部署流程",
    "报销",
    "周报",
    "值班表",
    "发布计划",
    "请假",
    "服务器",
    "合同模板",
    "年假",
    "客户反馈",
)
# Words of messages that mention no keyword.
_QUIET = (
    "could you help me think about what we should do this week with the new team please "
    "summarise the discussion from yesterday and tell me which option looks better for us "
    "I am not sure whether the numbers are right so check them again and explain the main "
    "points in simple words thanks a lot also what would you suggest as a next step here"
)
FILLER = tuple(_QUIET.split())
CHINESE_FILLER = "请帮我总结一下昨天的讨论并告诉我下一步应该做什么谢谢"


def group_chat(group: int) -> str:
    """The chat id of synthetic group number group (its shared scope: bench.data's form)."""
    return f"-100{group}"


def member_scope_of(index: int) -> str:
    """Personal scope number index: member (index % MEMBERS) + 1 of group index // MEMBERS."""
    group, member = divmod(index, MEMBERS)
    return f"{data.group_scope_of(group * 10)}::u:{member + 1}"


def keywords_of(rng: random.Random) -> list[str]:
    """A triggered block's keywords: a topic, three kinds of topics, and a fourth kind or (one
    block in ten) a Chinese keyword."""
    found = [rng.choice(TOPICS)]
    while len(found) < KEYWORDS:
        if len(found) == KEYWORDS - 1 and rng.random() < 0.1:
            keyword = rng.choice(CHINESE)
        else:
            keyword = f"{rng.choice(TOPICS)} {rng.choice(KINDS)}"
        if keyword not in found:
            found.append(keyword)
    return found


def triggered_rows(groups: int, seed: int = 48) -> list[tuple[object, ...]]:
    """TRIGGERED triggered blocks in each group's shared scope, as rows of the blocks table
    (BLOCK_INSERT_COLUMNS): one in five strong, a few of higher priority."""
    from storage.models import label_key
    from storage.rows import encode_triggers

    rng = random.Random(seed)
    stamp = time.time() - 3600
    found: list[tuple[object, ...]] = []
    for group in range(groups):
        scope = data.group_scope_of(group * 10)
        for number in range(TRIGGERED):
            label = f"kb{number}"
            keywords = keywords_of(rng)
            content = f"About {keywords[0]}: " + " ".join(rng.choice(data.WORDS) for _ in range(30))
            level = "strong" if number % 5 == 0 else "context"
            priority = rng.choice((0, 0, 0, 5))
            at = stamp + number / 1000
            block = (scope, label, label_key(label), content[:200], level, "active", priority)
            # times, not idle, not sensitive, its keywords, no end
            found.append((*block, at, at, None, None, 0, encode_triggers(keywords), None))
    return found


def build(folder: Path, groups: int) -> tuple[Path, Path]:
    """Two stores alike: the members' plain blocks alone, and the same with the groups'
    triggered blocks (written straight into the table, as bench.data builds its stores)."""
    from storage.rows import BLOCK_INSERT_COLUMNS

    plain, triggered = folder / "triggered-none.sqlite3", folder / "triggered-1000.sqlite3"
    for path in (plain, triggered):
        data.build_sqlite(path, groups * MEMBERS, member_scope_of)
    columns = ", ".join(BLOCK_INSERT_COLUMNS)
    with sqlite3.connect(triggered) as db:
        db.executemany(
            f"INSERT INTO blocks ({columns}) VALUES ({', '.join('?' * len(BLOCK_INSERT_COLUMNS))})",
            triggered_rows(groups),
        )
    asyncio.run(data._catch_up_search(triggered))
    with sqlite3.connect(triggered) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return plain, triggered


def message(rng: random.Random, mentions: int = 0) -> str:
    """A user's message of 15 to 30 words (one in ten Chinese) mentioning this many keywords
    (a topic or a kind of one)."""
    if rng.random() < 0.1:
        words = [CHINESE_FILLER[: rng.randrange(10, len(CHINESE_FILLER))]]
    else:
        words = [rng.choice(FILLER) for _ in range(rng.randrange(15, 31))]
    for _ in range(mentions):
        keyword = (
            rng.choice(TOPICS)
            if rng.random() < 0.5
            else f"{rng.choice(TOPICS)} {rng.choice(KINDS)}"
        )
        words.insert(rng.randrange(len(words) + 1), f" {keyword} ")
    return " ".join(words)


def _stats(samples_ns: Sequence[int]) -> dict[str, float]:
    ms = [s / 1e6 for s in samples_ns]
    return {
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p95_ms": round(percentile(ms, 0.95), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


CASES = ("plain", "none_mentioned", "mentioned")


async def _interleaved(plain: Path, triggered: Path, groups: int, turns: int) -> dict[str, Any]:
    from bot.config import parse_config
    from bot.core.entry import Pinbot
    from bot.core.people import ChatKind, Conversation, MessageContext
    from bot.llm.offline import OfflineChatModel
    from storage import open_store

    config = parse_config({"pins": {"enable_in_group": True, "max_blocks_per_session": 1000}})
    stores = {path: await open_store(path=str(path)) for path in (plain, triggered)}
    bots = {path: Pinbot(config, store, OfflineChatModel()) for path, store in stores.items()}
    rng = random.Random(4848)
    samples: dict[str, list[int]] = {case: [] for case in CASES}
    fired: list[int] = []
    try:
        for turn in range(-groups * 3, turns):  # first, untimed: each group's matcher is built
            index = rng.randrange(groups * MEMBERS)
            group, member = divmod(index, MEMBERS)
            conversation = Conversation(
                "telegram", ChatKind.GROUP, group_chat(group), str(member + 1)
            )
            assert conversation.personal_scope == member_scope_of(index)
            recent = [message(rng), message(rng)]
            quiet, mentioning = message(rng), message(rng, rng.choice((1, 2)))
            for case, path, text in (
                ("plain", plain, quiet),
                ("none_mentioned", triggered, quiet),
                ("mentioned", triggered, mentioning),
            ):
                start = time.perf_counter_ns()
                context = MessageContext.resolve(conversation, config.pins, None)
                blocks = await bots[path].chat.blocks_for_turn(context, text, recent)
                took = time.perf_counter_ns() - start
                selection = blocks.selection
                assert selection is not None and len(selection.always) == 9  # one of 10 idle
                assert bool(selection.fired) is (case == "mentioned"), (case, text)
                if turn >= 0:
                    samples[case].append(took)
                    if case == "mentioned":
                        fired.append(len(selection.fired))
    finally:
        for store in stores.values():
            await store.close()
    figures: dict[str, Any] = {case: _stats(found) for case, found in samples.items()}
    figures["mentioned"]["fired_blocks_mean"] = round(statistics.fmean(fired), 1)
    return figures


def matcher_build_ms(groups: int) -> float:
    """What building one scope's matcher of TRIGGERED blocks costs (median of the groups)."""
    from bot.core.blocks.triggers import Matcher
    from storage.rows import decode_triggers

    rows = triggered_rows(groups)
    took = []
    for group in range(groups):
        keywords = [(i, decode_triggers(str(row[12]))) for i, row in enumerate(rows)]
        keywords = keywords[group * TRIGGERED : (group + 1) * TRIGGERED]
        start = time.perf_counter_ns()
        Matcher(keywords)
        took.append(time.perf_counter_ns() - start)
    return round(statistics.median(took) / 1e6, 3)


def measure(folder: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The three cases (the module's docstring), with the triggered ones' p95 over the plain
    one's."""
    groups, turns = settings["groups"], settings["turns"]
    plain, triggered = build(folder, groups)
    figures = asyncio.run(_interleaved(plain, triggered, groups, turns))
    base = figures["plain"]
    for case in ("none_mentioned", "mentioned"):
        found = figures[case]
        found["p95_over_plain_ms"] = round(found["p95_ms"] - base["p95_ms"], 3)
        found["p50_over_plain_ms"] = round(found["p50_ms"] - base["p50_ms"], 3)
        found["p95_ratio"] = round(found["p95_ms"] / base["p95_ms"], 3) if base["p95_ms"] else 0.0
    return {
        "groups": groups,
        "turns": turns,
        "triggered_blocks": TRIGGERED,
        "keywords_per_block": KEYWORDS,
        "plain_blocks": data.BLOCKS_PER_SCOPE,
        "matcher_build_ms": matcher_build_ms(groups),
        **figures,
    }


# --- a plain turn against the commit before triggered blocks ---------------------------------
# Runs on either tree's packages (bench.history.call_in): only what both have.


def plain_turns(path: str, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """A DM turn's blocks path (as bench.turn measures it) on the store at path, built first
    (bench.data, by this tree's schema) when there is none: p50 and p95 wall ms per turn, and
    the process's CPU ms per turn."""
    if not Path(path).exists():
        data.build_sqlite(Path(path), scopes)
    return asyncio.run(_plain_turns(Path(path), scopes, turns, seed))


async def _plain_turns(path: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    from bot.config import parse_config
    from bot.core.entry import Pinbot
    from bot.core.people import ChatKind, Conversation, MessageContext
    from bot.llm.offline import OfflineChatModel
    from storage import open_store

    store = await open_store(path=str(path))
    config = parse_config({})
    bot = Pinbot(config, store, OfflineChatModel())
    rng = random.Random(seed)
    picks = [rng.randrange(scopes) for _ in range(turns)]
    samples = []
    try:
        for index in picks[: turns // 10]:  # warm: the caches a running bot has
            conversation = Conversation("bench", ChatKind.DIRECT, str(index), str(index))
            await bot.chat.rendered_blocks(
                MessageContext.resolve(conversation, config.pins, None), "hi"
            )
        cpu = time.process_time()
        for index in picks:
            conversation = Conversation("bench", ChatKind.DIRECT, str(index), str(index))
            start = time.perf_counter_ns()
            context = MessageContext.resolve(conversation, config.pins, None)
            rendered = await bot.chat.rendered_blocks(context, "What should I do next?")
            samples.append(time.perf_counter_ns() - start)
            assert rendered.strong and rendered.context
        cpu = time.process_time() - cpu
    finally:
        await store.close()
    return {**_stats(samples), "cpu_ms": round(cpu * 1000 / turns, 4)}


def plain_against(folder: Path, settings: dict[str, Any], before: str = BEFORE) -> dict[str, Any]:
    """plain_turns on this tree and on before's, each on a store its own tree built, alternating
    runs; medians, and ours over before's."""
    from bench import baseline
    from bench.history import call_in

    scopes, turns, runs = settings["plain_scopes"], settings["plain_turns"], settings["plain_runs"]
    with baseline.tree_of(before) as old:
        if old is None:
            return {"commit": before, "available": False}
        trees = {"ours": baseline.ROOT, "before": old}
        stores = {name: folder / f"plain-{name}.sqlite3" for name in trees}
        found: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for run in range(runs):
            order = list(trees) if run % 2 == 0 else list(trees)[::-1]
            for name in order:
                args = (str(stores[name]), scopes, turns, 100 + run)
                found[name].append(call_in(trees[name], "triggered", "plain_turns", *args))
    medians = {
        name: {key: round(statistics.median(r[key] for r in runs_), 4) for key in runs_[0]}
        for name, runs_ in found.items()
    }
    ours, then = medians["ours"], medians["before"]
    return {
        "commit": before,
        "available": True,
        "runs": runs,
        "scopes": scopes,
        "turns": turns,
        **medians,
        "p50_ratio": round(ours["p50_ms"] / then["p50_ms"], 3),
        "p95_ratio": round(ours["p95_ms"] / then["p95_ms"], 3),
        "cpu_ratio": round(ours["cpu_ms"] / then["cpu_ms"], 3),
    }


def run(folder: Path, quick: bool) -> dict[str, Any]:
    """Every figure of issue 48."""
    settings = QUICK if quick else FULL
    return {"turns": measure(folder, settings), "plain_vs_before": plain_against(folder, settings)}


def targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 48: 1,000 triggered blocks add at most 1 ms to a turn's p95, whether a message
    mentions a keyword or not, and a plain turn's CPU is no worse than before them."""
    turns = report["turns"]
    found = [
        (
            f"turn p95 with {TRIGGERED:,} triggered blocks ({what}) <= plain turn's + 1 ms",
            turns[case]["p95_over_plain_ms"] <= TARGET_MS,
            f"+{turns[case]['p95_over_plain_ms']} ms ({turns[case]['p95_ms']} vs "
            f"{turns['plain']['p95_ms']} ms)",
        )
        for case, what in (("none_mentioned", "none mentioned"), ("mentioned", "1 or 2 mentioned"))
    ]
    versus = report["plain_vs_before"]
    if versus["available"]:
        found.append(
            (
                f"a plain turn's CPU <= {versus['commit']}'s (5% noise allowed)",
                versus["cpu_ratio"] <= PLAIN_TARGET,
                f"{versus['ours']['cpu_ms']} vs {versus['before']['cpu_ms']} ms "
                f"({versus['cpu_ratio']}x)",
            )
        )
    return found


def describe(report: dict[str, Any]) -> str:
    """The figures as lines for the table."""
    t = report["turns"]
    plain, none, hit = t["plain"], t["none_mentioned"], t["mentioned"]
    lines = [
        f"Triggered blocks (issue 48): a group member's turn (blocks_for_turn), p50/p95 ms: "
        f"plain (10 personal blocks) {plain['p50_ms']}/{plain['p95_ms']}; with "
        f"{t['triggered_blocks']:,} triggered blocks of {t['keywords_per_block']} keywords in "
        f"the shared scope, none mentioned {none['p50_ms']}/{none['p95_ms']} "
        f"(p95 +{none['p95_over_plain_ms']} ms, {none['p95_ratio']:.2f}x), 1 or 2 mentioned "
        f"{hit['p50_ms']}/{hit['p95_ms']} (p95 +{hit['p95_over_plain_ms']} ms, "
        f"{hit['p95_ratio']:.2f}x; {hit['fired_blocks_mean']} blocks fired a turn); "
        f"the scope's matcher built once in {t['matcher_build_ms']} ms"
    ]
    v = report["plain_vs_before"]
    if v["available"]:
        lines.append(
            f"A plain DM turn against {v['commit']} (median of {v['runs']} alternating runs, "
            f"{v['scopes']:,} scopes): p50/p95 {v['ours']['p50_ms']}/{v['ours']['p95_ms']} ms "
            f"against {v['before']['p50_ms']}/{v['before']['p95_ms']} ms "
            f"({v['p50_ratio']:.2f}x/{v['p95_ratio']:.2f}x), CPU {v['ours']['cpu_ms']} ms "
            f"against {v['before']['cpu_ms']} ms a turn ({v['cpu_ratio']:.2f}x)"
        )
    else:
        lines.append(f"A plain turn against {v['commit']}: not in this checkout (a shallow clone)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run issue 48's measurements alone and print them."""
    parser = argparse.ArgumentParser(prog="python -m bench.triggered", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, one run")
    parser.add_argument("--before", default=BEFORE, help=f"the plain turn's commit ({BEFORE})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="pinbot-triggered-") as name:
        folder = Path(name)
        report = {
            "turns": measure(folder, settings),
            "plain_vs_before": plain_against(folder, settings, args.before),
        }
    print(json.dumps(report, indent=2))
    print(describe(report))
    for target, met, figure in targets(report):
        print(f"{'met   ' if met else 'MISSED'} {target}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
