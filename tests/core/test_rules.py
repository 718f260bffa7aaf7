"""The block policy owns every refusal of a block change: one code per rule, one text per code,
and each refusal a caller sees carries its code, so tests and the web page need no English."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import PinsConfig
from bot.core.blocks.review import RULE_TEXTS, BlockPolicy, Refused, Rule, Where, refusal
from storage.models import BlockState, Level, State
from tests.conftest import BotFactory, ask, dm

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_has_exactly_one_text() -> None:
    assert set(RULE_TEXTS) == set(Rule)
    assert len(set(RULE_TEXTS.values())) == len(Rule)  # no two rules share a text


def test_too_many_blocks_is_spelled_once() -> None:
    """The block limit's refusal is written in one place; nothing else words it again."""
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "bot").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"already hold|at their limit|blocks; the limit is|would hold \{", line)
    ]
    assert len(spelled) == 1 and spelled[0].startswith("bot/core/blocks/review.py:"), spelled


def test_refusals_carry_their_rule() -> None:
    policy = BlockPolicy(PinsConfig(max_label_length=5, max_total_chars=10))
    group = Where(shared=False, group=True)
    checks = {
        Rule.LABEL_TOO_LONG: policy.label_problem("toolong"),
        Rule.LABEL_SPACE: policy.label_problem("a b"),
        Rule.CONTENT_EMPTY: policy.content_problem(""),
        Rule.CREDENTIAL: policy.secret_problem("ghp_" + "a1B2c3D4e5" * 4, group=True),
        Rule.OVER_BUDGET: policy.limits_problem(
            [], [BlockState("x" * 11, Level.CONTEXT, State.ACTIVE)], group
        ),
    }
    for rule, found in checks.items():
        assert isinstance(found, Refused) and found.code is rule, rule
    assert refusal(Rule.MISSING, group, label="x").reason == (
        "There is no block labelled 'x' in your personal blocks in this group. "
        "Send /pin list to see them."
    )


async def test_a_command_reply_is_the_rules_text(make_bot: BotFactory) -> None:
    bot = make_bot(pins={"max_blocks_per_session": 1})
    await ask(bot, dm(), "/pin add a one")
    reply = await ask(bot, dm(), "/pin add b two")
    assert reply is not None and reply.text == refusal(Rule.TOO_MANY, count=2, limit=1).reason
