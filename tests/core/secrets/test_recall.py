"""The recogniser on the corpus: what issue 44 asks of it, as figures (a group refuses at least
98% of the credentials, a sensitive block hides at least 98% of all secrets, at most 1% of
ordinary lines are refused in groups and at most 2% changed in sensitive blocks)."""

from __future__ import annotations

import pytest

from tests.core.secrets.corpus import ORDINARY, SECRETS
from tests.core.secrets.scoring import Figures, ours, score


@pytest.fixture(scope="module")
def figures() -> Figures:
    return score(ours(), SECRETS, ORDINARY)


def test_groups_refuse_at_least_98_percent_of_the_credentials(figures: Figures) -> None:
    assert figures.credentials_refused_pct >= 98.0, figures.failures()


def test_sensitive_blocks_hide_at_least_98_percent_of_all_secrets(figures: Figures) -> None:
    assert figures.secrets_hidden_pct >= 98.0, figures.failures()


def test_groups_refuse_at_most_1_percent_of_ordinary_lines(figures: Figures) -> None:
    assert figures.ordinary_refused_pct <= 1.0, figures.failures()


def test_sensitive_blocks_change_at_most_2_percent_of_ordinary_lines(figures: Figures) -> None:
    assert figures.ordinary_changed_pct <= 2.0, figures.failures()


def test_every_kind_of_the_corpus_is_recognised_somewhere(figures: Figures) -> None:
    missed = {entry.kind for entry in figures.not_hidden}
    found = {entry.kind for entry in SECRETS} - missed
    assert missed <= found or not missed, sorted(missed)


def test_redacting_twice_changes_nothing() -> None:
    from bot.secrets import redact

    for entry in SECRETS:
        once = redact(entry.line)
        assert redact(once) == once, entry.line
