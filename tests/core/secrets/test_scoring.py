"""The scoring of secret recognisers (tests/core/secrets/scoring.py), on tiny candidates and a
tiny corpus of its own, so the figures the benchmark prints mean what they say."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.core.secrets.scoring import WARM_UP, Candidate, Figures, score


@dataclass(frozen=True, slots=True)
class Secret:
    kind: str
    line: str
    hidden: tuple[str, ...]
    credential: bool


@dataclass(frozen=True, slots=True)
class Ordinary:
    kind: str
    line: str


SECRETS = (
    Secret("token", "my token is tok_ABCDEF123456", ("tok_ABCDEF123456",), True),
    Secret("password", "password=hunter2xyz", ("hunter2xyz",), True),
    Secret("url", "https://bob:pa55word@example.org", ("pa55word", "bob"), True),
    Secret("ip", "ssh to 10.1.2.3 please", ("10.1.2.3",), False),
)
ORDINARY = (
    Ordinary("prose", "the meeting is at 10:30"),
    Ordinary("prose", "a token of thanks"),
    Ordinary("code", "x = compute(y)"),
    Ordinary("prose", "passwords must be long"),
    Ordinary("prose", "see you tomorrow"),
)


def _everything() -> Candidate:
    return Candidate("everything", refuses=lambda line: True, redact=lambda line: "[secret]")


def _nothing() -> Candidate:
    return Candidate("nothing", refuses=lambda line: False, redact=lambda line: line)


def test_a_candidate_refusing_and_hiding_everything_scores_100_everywhere() -> None:
    figures = score(_everything(), SECRETS, ORDINARY)
    assert figures.credentials == 3  # the address is not a credential
    assert figures.credentials_refused == 3
    assert figures.credentials_refused_pct == 100.0
    assert figures.secrets == 4
    assert figures.secrets_hidden == 4
    assert figures.secrets_hidden_pct == 100.0
    assert figures.ordinary_refused_pct == 100.0
    assert figures.ordinary_changed_pct == 100.0
    assert figures.not_refused == () and figures.not_hidden == ()
    assert figures.refused_ordinary == ORDINARY
    assert figures.changed_ordinary == ORDINARY


def test_a_candidate_doing_nothing_scores_0_everywhere_and_lists_every_secret() -> None:
    figures = score(_nothing(), SECRETS, ORDINARY)
    assert figures.credentials_refused == 0
    assert figures.credentials_refused_pct == 0.0
    assert figures.secrets_hidden_pct == 0.0
    assert figures.ordinary_refused_pct == 0.0
    assert figures.ordinary_changed_pct == 0.0
    assert figures.not_refused == SECRETS[:3]
    assert figures.not_hidden == SECRETS
    assert figures.refused_ordinary == () and figures.changed_ordinary == ()


def test_an_address_refused_or_not_counts_only_towards_hidden() -> None:
    only_address = Candidate(
        "address",
        refuses=lambda line: "10.1.2.3" in line,
        redact=lambda line: line.replace("10.1.2.3", "[ip]"),
    )
    figures = score(only_address, SECRETS, ())
    assert figures.credentials_refused == 0
    assert figures.secrets_hidden == 1
    assert figures.secrets_hidden_pct == 25.0
    assert figures.not_hidden == SECRETS[:3]


def test_a_secret_is_hidden_only_when_none_of_its_hidden_parts_survive() -> None:
    # Masks the password of the URL but leaves its user name.
    half = Candidate(
        "half",
        refuses=lambda line: False,
        redact=lambda line: line.replace("pa55word", "[secret]"),
    )
    figures = score(half, SECRETS[2:3], ())
    assert figures.secrets_hidden == 0
    assert figures.not_hidden == SECRETS[2:3]


def test_ordinary_figures_count_refused_and_changed_lines_separately() -> None:
    prudish = Candidate(
        "prudish",
        refuses=lambda line: "token" in line or "password" in line,
        redact=lambda line: line.replace("10:30", "[host:port]"),
    )
    figures = score(prudish, (), ORDINARY)
    assert figures.ordinary == 5
    assert figures.ordinary_refused == 2
    assert figures.ordinary_refused_pct == pytest.approx(40.0)
    assert figures.ordinary_changed == 1
    assert figures.ordinary_changed_pct == pytest.approx(20.0)
    assert figures.refused_ordinary == (ORDINARY[1], ORDINARY[3])
    assert figures.changed_ordinary == (ORDINARY[0],)


def test_an_empty_corpus_scores_as_nothing_missed_and_nothing_wrongly_refused() -> None:
    figures = score(_nothing(), (), ())
    assert figures.credentials_refused_pct == 100.0
    assert figures.secrets_hidden_pct == 100.0
    assert figures.ordinary_refused_pct == 0.0
    assert figures.ordinary_changed_pct == 0.0
    assert figures.us_per_line == 0.0


def test_every_line_is_judged_once_inside_the_session_after_a_warm_up() -> None:
    calls: list[tuple[str, str]] = []
    inside: list[bool] = []

    @contextlib.contextmanager
    def session() -> Iterator[None]:
        inside.append(True)
        yield
        inside.append(False)

    def refuses(line: str) -> bool:
        calls.append(("refuses", line))
        assert inside == [True]
        return False

    def redact(line: str) -> str:
        calls.append(("redact", line))
        return line

    figures = score(Candidate("counted", refuses, redact, session), SECRETS, ORDINARY)
    assert inside == [True, False]
    lines = [WARM_UP] + [e.line for e in (*SECRETS, *ORDINARY)]
    assert sorted(calls) == sorted(
        [*(("refuses", x) for x in lines), *(("redact", x) for x in lines)]
    )
    assert figures.us_per_line > 0


def test_a_judge_answers_for_both_in_one_call() -> None:
    def never(line: str) -> bool:
        raise AssertionError("judge was given: refuses and redact are not called")

    judged: list[str] = []

    def judge(line: str) -> tuple[bool, str]:
        judged.append(line)
        return "password" in line, line.replace("hunter2xyz", "[secret]")

    one_call = Candidate("one call", never, lambda line: str(never(line)), judge=judge)
    figures = score(one_call, SECRETS, ORDINARY)
    assert judged == [WARM_UP] + [e.line for e in (*SECRETS, *ORDINARY)]
    assert figures.credentials_refused == 1
    assert figures.secrets_hidden == 1
    assert figures.ordinary_refused == 1  # "passwords must be long"
    assert figures.ordinary_changed == 0


def test_json_and_failures_show_the_failing_lines() -> None:
    figures: Figures = score(_nothing(), SECRETS, ORDINARY)
    shown = figures.as_json(examples=2)
    assert shown["credentials_refused_pct"] == 0.0
    assert shown["not_refused"] == [
        "token: my token is tok_ABCDEF123456",
        "password: password=hunter2xyz",
    ]
    message = figures.failures()
    assert "3 credentials not refused" in message
    assert "'password=hunter2xyz'" in message
    assert score(_everything(), SECRETS, ()).failures() == ""


def test_a_long_failing_line_is_cut_in_the_json_not_in_the_message() -> None:
    long = Secret("pem", "-----BEGIN PRIVATE KEY-----\n" + "A" * 300, ("A" * 300,), True)
    figures = score(_nothing(), (long,), ())
    (shown,) = figures.as_json()["not_hidden"]
    assert len(shown) <= len("pem: ") + 120 and "\\n" in shown
    assert "A" * 300 in figures.failures()
