"""The limit rule is written once (`Limits`): the same rule over numbers (the review, the store's
check inside a transaction) and as SQL (the guard of a write that reads nothing first) gives
the same answers."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from storage.models import Limits, Sql


@pytest.mark.parametrize("limits", [Limits(3, 10), Limits(3), Limits(0, 1)])
def test_the_rule_over_numbers_and_as_sql_agree(limits: Limits) -> None:
    db = sqlite3.connect(":memory:")
    numbers = range(0, 13)
    for old, new in itertools.product(numbers, numbers):
        for rule in (limits.blocks_hold, limits.chars_hold):
            sql = rule(Sql("?", old), Sql("?", new))
            (held,) = db.execute(f"SELECT {sql.text}", sql.args).fetchone()
            assert bool(held) is rule(old, new), (rule.__name__, old, new)


def test_only_growth_past_a_limit_breaks_it() -> None:
    limits = Limits(3, 10)
    assert limits.blocks_hold(2, 3) and not limits.blocks_hold(3, 4)
    assert limits.blocks_hold(5, 4) and limits.blocks_hold(5, 5)  # over a lowered limit
    assert limits.chars_hold(0, 10) and not limits.chars_hold(9, 11)
    assert limits.chars_hold(20, 15) and Limits(3).chars_hold(0, 10**9)  # 0: no budget
