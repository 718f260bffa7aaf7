"""The scope-key grammar: built, parsed and classified in one module."""

from __future__ import annotations

import pytest

from bot.adapters import PLATFORMS
from bot.core.people.keys import (
    READ_PLATFORMS,
    Scope,
    ScopeKind,
    direct_key,
    group_children,
    group_key,
    group_key_of,
    is_group_scope,
    is_shared_scope,
    member_scope,
    parse_scope,
    read_scope,
    sender_session,
    split_member_entry,
    topic_key,
)


def test_keys_are_built_in_openclaws_form() -> None:
    group = group_key("telegram", "-100")
    assert direct_key("feishu", "ou_1") == "feishu:direct:ou_1"
    assert group == "telegram:group:-100"
    assert topic_key(group, "7") == "telegram:group:-100:topic:7"
    assert member_scope(group, "42") == "telegram:group:-100::u:42"
    assert sender_session(topic_key(group, "7"), "42") == "telegram:group:-100:topic:7:sender:42"
    assert group_children(group) == ("telegram:group:-100::u:", "telegram:group:-100:")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("telegram:direct:42", Scope("telegram:direct:42", "telegram", ScopeKind.DIRECT, "42")),
        (
            "agent:main:console:group:-1",
            Scope("console:group:-1", "console", ScopeKind.SHARED, "-1"),
        ),
        (
            "feishu:group:oc_1::u:ou_2",
            Scope("feishu:group:oc_1::u:ou_2", "feishu", ScopeKind.MEMBER, "oc_1", "ou_2"),
        ),
        ("telegram:group:-1:topic:3", None),  # a session key, not a scope
        ("telegram:direct:42::u:1", None),
        ("telegram:channel:-1", None),
        ("telegram:group:", None),
        ("telegram:group:a b", None),
        ("", None),
    ],
)
def test_parse_scope(key: str, expected: Scope | None) -> None:
    assert parse_scope(key) == expected


def test_classification_decides_audit_and_group_rules() -> None:
    assert is_shared_scope("telegram:group:-1")
    assert not is_shared_scope("telegram:group:-1::u:4")
    assert not is_shared_scope("telegram:direct:4")
    assert is_group_scope("telegram:group:-1::u:4") and is_group_scope("telegram:group:-1")
    assert not is_group_scope("telegram:direct:4")
    parsed = parse_scope("telegram:group:-1::u:4")
    assert parsed is not None and parsed.group_key == "telegram:group:-1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("telegram:group:-5::u:42", ("telegram:group:-5", "42")),
        ("agent:a:telegram:group:-5:topic:3::u:42", ("telegram:group:-5", "42")),
        ("telegram:direct:5::u:42", None),
        ("telegram:group:-5::u:", None),
        ("42", None),
    ],
)
def test_member_entries(text: str, expected: tuple[str, str] | None) -> None:
    assert split_member_entry(text) == expected


def test_group_key_of_session_keys() -> None:
    assert group_key_of("telegram:group:-5:topic:3:sender:9") == "telegram:group:-5"
    assert group_key_of("agent:x:feishu:group:oc_1") == "feishu:group:oc_1"
    assert group_key_of("telegram:direct:5") is None


@pytest.mark.parametrize(
    "key",
    [
        "telegram:direct:42",
        "telegram:group:-100123",
        "telegram:group:-100123::u:42",
        "telegram:direct:9007199254740991",  # 2**53 - 1, Telegram's largest id
        "feishu:direct:ou_7d8a6e6df7621556ce0d21922b676706",
        "feishu:group:oc_a0553eda9014c201e6969b478895c230::u:ou_2",
        "console:group:team/a::u:42",
    ],
)
def test_keys_the_bot_writes_are_read_and_round_trip(key: str) -> None:
    scope = read_scope(key)
    assert scope is not None and scope.key == key and scope == parse_scope(key)


@pytest.mark.parametrize(
    "key",
    [
        "telegram:group:-100123x",
        "telegram:group:42",  # Telegram's groups are negative
        "telegram:direct:-42",  # and its users positive
        "telegram:group:-1::u:-5",
        f"telegram:group:-{'1' * 40}",
        "telegram:direct:9007199254740992",
        "telegram:direct:042",
        "telegram:direct:+42",
        "TELEGRAM:direct:42",
        "foo:direct:1",
        "irc:group:-1",
        "feishu:group:..",
        "feishu:group:ou_1",
        "console:direct:a\x00b",
        "agent:main:telegram:direct:42",  # only with agent_prefix
        " telegram:direct:42",
        "telegram:direct:42 ",
        "telegram:group:-1:topic:3",
    ],
)
def test_keys_the_bot_never_writes_are_not_read(key: str) -> None:
    assert read_scope(key) is None


def test_an_agent_prefix_is_dropped_only_when_asked() -> None:
    scope = read_scope("agent:main:telegram:direct:42", agent_prefix=True)
    assert scope is not None and scope.key == "telegram:direct:42"
    assert read_scope("agent:main:TELEGRAM:direct:42", agent_prefix=True) is None


def test_the_platforms_read_are_the_platforms_served() -> None:
    assert set(READ_PLATFORMS) == set(PLATFORMS)
