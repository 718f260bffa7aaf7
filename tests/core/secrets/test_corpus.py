"""The corpus's own shape: enough lines, kinds and Chinese; every hidden part in its line."""

from __future__ import annotations

import importlib
import random
import re
from collections import Counter

from tests.core.secrets import corpus
from tests.core.secrets.corpus import ORDINARY, SECRETS, Ordinary, Secret

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_ADDRESS_KINDS = {"ipv4", "ipv6", "host-port", "ssh-target", "email"}


def test_enough_secrets_over_enough_kinds() -> None:
    assert len(SECRETS) >= 300
    kinds = Counter(secret.kind for secret in SECRETS)
    assert len(kinds) >= 30
    assert min(kinds.values()) >= 6


def test_only_addresses_are_not_credentials() -> None:
    assert {s.kind for s in SECRETS if not s.credential} == _ADDRESS_KINDS
    assert {s.kind for s in SECRETS if s.credential}.isdisjoint(_ADDRESS_KINDS)


def test_enough_ordinary_lines_many_of_them_chinese() -> None:
    assert len(ORDINARY) >= 500
    assert len({line.kind for line in ORDINARY}) >= 15
    assert sum(1 for line in ORDINARY if _CJK.search(line.line)) >= 100


def test_every_hidden_part_is_in_its_line() -> None:
    missing = [
        (secret.kind, part)
        for secret in SECRETS
        for part in secret.hidden
        if not part or part not in secret.line
    ]
    assert missing == []
    assert all(secret.hidden for secret in SECRETS)


def test_no_line_is_repeated() -> None:
    lines = [secret.line for secret in SECRETS] + [line.line for line in ORDINARY]
    repeated = [line for line, count in Counter(lines).items() if count > 1]
    assert repeated == []


def _fields(
    secrets: tuple[Secret, ...], ordinary: tuple[Ordinary, ...]
) -> tuple[list[tuple[str, str, tuple[str, ...], bool]], list[tuple[str, str]]]:
    return (
        [(s.kind, s.line, s.hidden, s.credential) for s in secrets],
        [(o.kind, o.line) for o in ordinary],
    )


def test_the_corpus_is_the_same_on_every_import() -> None:
    before = _fields(corpus.SECRETS, corpus.ORDINARY)
    random.seed(2718)  # the corpus must not depend on the global generator
    again = importlib.reload(corpus)
    assert _fields(again.SECRETS, again.ORDINARY) == before
