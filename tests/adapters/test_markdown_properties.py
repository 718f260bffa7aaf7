"""Formatted replies never lose a character (issue 26), under hypothesis.

Each generated reply goes through what pinbot sends: Telegram's (text, entities) parts and
Feishu's `post` bodies, at the platforms' limits and at small limits that force splits. For
both platforms: every letter, digit, CJK character, emoji, `<`, `>` and `&` the reply must show
arrives, in order; nothing shown is invented (what arrives is in the reply, in order); no
message is empty; links go only to http, https and mailto. For Telegram, every entity is within
its message at character boundaries, properly nested or disjoint, nothing sits inside `pre` or
`code`, and no message is over the limit. For Feishu, a post holds only text, link and code
block elements.

CI runs 2,000 generated replies (8-12 s here, about 9 s of CPU, on two cores other sessions
shared), in four shards that parallel workers share. The longer run, 20,000 replies:

    PINBOT_PROPERTY_EXAMPLES=20000 .venv/bin/python -m pytest -q \\
        tests/adapters/test_markdown_properties.py

passed on 2026-12-01: 20,000 passing, 0 failing, in 179 s (101 s of CPU); see
docs/performance.md ("Formatted replies").
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.adapters.feishu_api import MESSAGE_LIMIT
from bot.adapters.feishu_format import formatted_posts
from bot.adapters.rich_text import Rich, Span
from bot.adapters.telegram_send import _part, formatted_parts
from tests.adapters.markdown_replies import (
    Piece,
    feishu_shown,
    in_order,
    replies,
    significant,
    telegram_problems,
    telegram_shown,
)

EXAMPLES = int(os.environ.get("PINBOT_PROPERTY_EXAMPLES", "2000"))
TELEGRAM_LIMIT = 4096
limits = st.one_of(st.just(0), st.integers(min_value=24, max_value=300))  # 0: the platform's


class Dropped(logging.Handler):
    """What the last check before Telegram dropped: never anything, the renderer's spans are
    valid by construction."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


dropped = Dropped()
LAST_CHECK = logging.getLogger("bot.adapters.telegram_send")
LAST_CHECK.addHandler(dropped)


def check_telegram(source: str, must_show: str, limit: int) -> None:
    parts = formatted_parts(source, limit)
    assert parts, f"nothing sent for {source!r}"
    source_shown, shown = significant(source), ""
    for text, entities in parts:
        sent = [json.loads(entity.to_json()) for entity in entities]
        assert telegram_problems(text, sent, limit) == []
        part_shown = telegram_shown(text, sent)
        assert in_order(significant(part_shown), source_shown), (part_shown, source)
        shown += part_shown + "\n"
    assert in_order(significant(must_show), significant(shown)), (must_show, shown)


def check_feishu(source: str, must_show: str, limit: int) -> None:
    posts = formatted_posts(source, limit)
    assert posts, f"nothing sent for {source!r}"
    source_shown, shown = significant(source), ""
    for content, _ in posts:
        post_shown, problems = feishu_shown(content)
        assert problems == []
        assert in_order(significant(post_shown), source_shown), (post_shown, source)
        shown += post_shown + "\n"
    assert in_order(significant(must_show), significant(shown)), (must_show, shown)


# The examples are run in shards, each of its own random examples, so that parallel workers
# share them (one test of 2,000 examples was the longest single test of the suite).
SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(
    max_examples=-(-EXAMPLES // SHARDS),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(reply=replies, limit=limits)
def test_formatted_replies_never_lose_a_character(shard: int, reply: Piece, limit: int) -> None:
    source, must_show = reply
    check_telegram(source, must_show, limit or TELEGRAM_LIMIT)
    assert dropped.records == [] and not LAST_CHECK.disabled  # valid before the last check
    check_feishu(source, must_show, limit or MESSAGE_LIMIT)


def test_what_the_last_check_drops_is_seen() -> None:
    """The property's watch on the last check works (a disabled logger would blind it)."""
    _part(Rich("abc", (Span("bold", 0, 2), Span("italic", 1, 3))))
    assert len(dropped.records) == 1 and not LAST_CHECK.disabled
    dropped.records.clear()


ISSUE_EXAMPLES = [
    ("if a<b and c>d then swap", "if a<b and c>d then swap"),
    ("The type is List<String>.", "The type is List<String>."),
    ("Wrap it in a <div> element.", "Wrap it in a <div> element."),
    ("``````", "``````"),
    ("<!-- hidden -->", "<!-- hidden -->"),
    ("[](http://x)", "http://x"),
    ("&amp; stays &amp;, \\< shows <", "&amp; stays &amp;, < shows <"),
    (
        "[run](javascript:alert(1)) [me](tg://user?id=42)",
        "run (javascript:alert(1)) me (tg://user?id=42)",
    ),
    ("<https://example.org> <tg://user?id=1>", "https://example.org <tg://user?id=1>"),
]


@pytest.mark.parametrize(("source", "shown"), ISSUE_EXAMPLES)
def test_the_issues_examples_on_both_platforms(source: str, shown: str) -> None:
    ((text, entities),) = formatted_parts(source)
    assert text == shown
    assert all(e.url in ("http://x", "https://example.org") for e in entities)
    ((content, _),) = formatted_posts(source, MESSAGE_LIMIT)
    assert feishu_shown(content) == (shown, [])
