"""`--when`, `--until` and `--for` as `/pin add` and `/pin edit` read them: keywords with
quotes, ends as dates, date-times and durations, and clear errors for what cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.blocks.ends import Ends
from bot.core.commands.parse import ParseError, PinCommand, Verb, parse_pin

NOW = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)


def _command(text: str) -> PinCommand:
    parsed = parse_pin(text)
    assert isinstance(parsed, PinCommand), parsed
    return parsed


@pytest.mark.parametrize(
    "text",
    [
        'add runbook --when deploy,"release notes" Run the checks first.',
        'add runbook Run the checks first. --when deploy,"release notes"',
        'add runbook Run the checks first. --pinned --when deploy,"release notes"',
    ],
)
def test_when_reads_comma_separated_keywords_at_either_end(text: str) -> None:
    command = _command(text)
    assert command.verb is Verb.ADD
    assert command.content == "Run the checks first."
    assert command.when == ("deploy", "release notes")


def test_until_and_for_give_an_end() -> None:
    day = _command("add trip Flight LH123 --until 2026-12-24")
    assert day.ends == Ends(at=datetime(2026, 12, 25, tzinfo=UTC))  # the whole day
    moment = _command("add trip Flight LH123 --until 2026-12-24T18:00+01:00")
    assert moment.ends is not None and moment.ends.resolve(NOW) == datetime(
        2026, 12, 24, 17, tzinfo=UTC
    )
    lasting = _command("add trip --for 1w2d Flight LH123")
    assert lasting.content == "Flight LH123"
    assert lasting.ends is not None and lasting.ends.resolve(NOW) == NOW + timedelta(days=9)


def test_edit_changes_only_keywords_or_end_and_takes_them_back_with_a_dash() -> None:
    command = _command("edit runbook --when -")
    assert (command.content, command.when, command.ends) == (None, (), None)
    command = _command("edit runbook --until -")
    assert command.ends == Ends() and command.ends.resolve(NOW) is None
    command = _command("edit runbook New text --for 12h")
    assert command.content == "New text"
    assert command.ends == Ends(after=timedelta(hours=12))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("add r x --when", "--when needs a value after it"),
        ("add r x --when a,,b", "a keyword is empty"),
        ("add r x --when " + ",".join(f"k{n}" for n in range(21)), "a block takes at most 20"),
        ("add r x --when " + "k" * 41, "longer than 40 characters"),
        ("add r x --until 24.12.2026", "is not a date or a date-time"),
        ("add r x --for 3 days", "--for is inside the content"),
        ("add r x --for 3days", "is not a duration"),
        ("add r x --for 0h", "is no time at all"),
        ("add r x --until 2026-12-24 --for 3d", "not both"),
        ("add r x --until -", "it is for /pin edit"),
        ("add r x --when a --when b", "--when is given twice"),
        ("add r text --when a, b", "--when is inside the content"),
        ("add r x --wen a", "Did you mean --when?"),
        ("edit r", "edit needs a label and the new content, or --when"),
    ],
)
def test_unreadable_timing_flags_say_what_to_write(text: str, problem: str) -> None:
    parsed = parse_pin(text)
    assert isinstance(parsed, ParseError)
    assert problem in parsed.message, parsed.message


def test_words_near_a_short_flag_stay_content() -> None:
    command = _command("add style Prefer git commit --fork over --force")
    assert command.content == "Prefer git commit --fork over --force"
    assert command.when is None and command.ends is None
