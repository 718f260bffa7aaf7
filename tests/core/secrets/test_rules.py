"""The recogniser's machinery: the literal a pattern starts with (a cheap skip), detect-secrets'
patterns as RE2 runs them, and that every provider plugin it ships is in use."""

from __future__ import annotations

import re
from typing import Any

import pytest

import bot.secrets as recogniser
from bot.secrets._providers import translate
from bot.secrets._rule import literal_start


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("AIza[0-9A-Za-z_-]{35}", "AIza"),
        (r"SG\.[a-zA-Z0-9_-]{22}", "SG."),
        ("(?i)xox(?:a|b)-", "(?i)xox"),
        ("ab?c", None),  # b may be absent: only "a", too short to be worth it
        ("abc*d", "ab"),
        ("AKIA|ASIA", None),  # a choice at the top: no one literal
        ("(?:AKIA|ASIA)[0-9A-Z]{16}", None),
        ("[A-Z]{4}", None),
        (r"https://hooks\.slack\.com/x", "https://hooks.slack.com/x"),
    ],
)
def test_the_literal_a_pattern_starts_with(pattern: str, literal: str | None) -> None:
    assert literal_start(pattern) == literal


def test_a_lookaround_at_either_end_becomes_an_edge_check() -> None:
    translated = translate(r"(glpat|gldt)-[A-Za-z0-9_\-]{20,50}(?!\w)", 0)
    assert translated.pattern == r"(glpat|gldt)-[A-Za-z0-9_\-]{20,50}" and translated.word_after
    translated = translate(r"(?:(?<=\W)|(?<=^))secret=(\w+)", re.IGNORECASE)
    assert translated.pattern == r"(?i)secret=(\w+)" and translated.word_before
    assert translate(r"x{50,1024}", 0).pattern == "x{50,1000}"


def test_every_provider_plugin_of_detect_secrets_is_in_use() -> None:
    """An upgrade of detect-secrets whose patterns RE2 cannot run is noticed here, not in the
    field: every regex plugin but those left out on purpose gives at least one rule."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    from bot.secrets._providers import _LEFT_OUT, _NAMES

    kinds = {rule.kind for rule in recogniser._rules()}
    plugins: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in plugins.items():
        if plugin.__name__ in _LEFT_OUT:
            continue
        assert _NAMES.get(secret_type, f"a {secret_type}") in kinds, secret_type


def test_a_token_glued_to_chinese_or_split_by_an_invisible_character_is_found() -> None:
    assert recogniser.redact("使用AKIAIOSFODNN7QWERTYU登录") == "使用[secret]登录"
    assert recogniser.redact("AKIA\u200bIOSFODNN7QWERTYU ok") == "[secret] ok"
    assert recogniser.redact("password：tulip") == "password：[secret]"
