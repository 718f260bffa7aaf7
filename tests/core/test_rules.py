"""The block policy owns every refusal of a block change: one code per rule, one text per code,
and each refusal a caller sees carries its code, so tests and the web page need no English."""

from __future__ import annotations

import re
import string
from pathlib import Path

from bot.config import PinsConfig
from bot.core.blocks.review import RULE_TEXTS, BlockPolicy, Refused, Rule, Where, refusal
from storage.models import BlockState, Level, State
from tests.conftest import BotFactory, ask, dm

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_has_exactly_one_text() -> None:
    assert set(RULE_TEXTS) == set(Rule)
    assert len(set(RULE_TEXTS.values())) == len(Rule)  # no two rules share a text


class Fact(str):
    """A fact a rule's text names, shown as its name in any format (`{length:,}` too)."""

    def __format__(self, spec: str) -> str:
        return "<" + str.__str__(self) + ">"


def test_every_rule_fills_in_to_its_own_text() -> None:
    """Each rule, its text filled in with every fact it names: a refusal with that code, not
    empty, and unlike every other rule's; the table is the failure message."""
    filled = {}
    for rule in Rule:
        names = {name for _, name, _, _ in string.Formatter().parse(RULE_TEXTS[rule]) if name}
        facts = {name: Fact(name) for name in names - {"noun", "Noun", "pin"}}
        refused = refusal(rule, Where(shared=False, group=False), **facts)
        assert refused.code is rule
        filled[rule] = refused.reason
    table = "\n".join(f"{rule.value}: {text}" for rule, text in filled.items())
    assert all(text.strip() for text in filled.values()), table
    assert len(set(filled.values())) == len(Rule), table


def test_the_block_rules_are_those_of_blocks() -> None:
    """What the metrics count as block_rules: the rules a change of blocks meets (and the
    refusals that carry one on), not how something was asked."""
    assert Rule.MISSING.block_rule and Rule.AS_IT_WAS.block_rule and Rule.BUSY.block_rule
    assert Rule.SUGGESTION_NOT_SAVED.block_rule and Rule.PROPOSAL_NOT_APPLIED.block_rule
    asked = (Rule.PINS_OFF, Rule.NOTHING_TO_UNDO, Rule.TOOL_UNKNOWN, Rule.PROPOSAL_DECIDED)
    assert not any(rule.block_rule for rule in asked)


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
