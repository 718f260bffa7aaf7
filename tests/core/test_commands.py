"""The /pin parser: every form of SPEC section 3, and no input that raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.commands.parse import USAGE, ParseError, PinCommand, Verb, parse_pin
from storage.models import Level


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", PinCommand(Verb.HELP)),
        ("help", PinCommand(Verb.HELP)),
        ("add rules Be brief", PinCommand(Verb.ADD, label="rules", content="Be brief")),
        ("ADD rules Be brief", PinCommand(Verb.ADD, label="rules", content="Be brief")),
        ("add-strong r x", PinCommand(Verb.ADD, label="r", content="x", level=Level.STRONG)),
        ("add-context r x", PinCommand(Verb.ADD, label="r", content="x", level=Level.CONTEXT)),
        (
            "add r keep this --pinned",
            PinCommand(Verb.ADD, label="r", content="keep this", pinned=True),
        ),
        (
            "add r -- keep this --pinned",
            PinCommand(Verb.ADD, label="r", content="keep this --pinned"),
        ),
        ("add r --  --", PinCommand(Verb.ADD, label="r", content="--")),
        (
            "add r line one\nline two\n",
            PinCommand(Verb.ADD, label="r", content="line one\nline two"),
        ),
        ("add 规则 用中文回答", PinCommand(Verb.ADD, label="规则", content="用中文回答")),
        ("add r a--pinned", PinCommand(Verb.ADD, label="r", content="a--pinned")),
        # Without content the add pins the message it replies to.
        ("add r", PinCommand(Verb.ADD, label="r")),
        ("add r --pinned", PinCommand(Verb.ADD, label="r", pinned=True)),
        ("add r --", PinCommand(Verb.ADD, label="r")),
        ("add-strong r", PinCommand(Verb.ADD, label="r", level=Level.STRONG)),
        ("shared add r", PinCommand(Verb.ADD, shared=True, label="r")),
        ("add r x --PINNED", PinCommand(Verb.ADD, label="r", content="x", pinned=True)),
        (
            "add r x --Priority 5 --pinned",
            PinCommand(Verb.ADD, label="r", content="x", pinned=True, priority=5),
        ),
        (
            "add r x --pinned --priority -3",
            PinCommand(Verb.ADD, label="r", content="x", pinned=True, priority=-3),
        ),
        ("add r x --verbose", PinCommand(Verb.ADD, label="r", content="x --verbose")),
        ("add r use --prio wisely", PinCommand(Verb.ADD, label="r", content="use --prio wisely")),
        ("add r x --pined 5", PinCommand(Verb.ADD, label="r", content="x --pined 5")),
        ("add r -- x --prio", PinCommand(Verb.ADD, label="r", content="x --prio")),
        ("add r x --", PinCommand(Verb.ADD, label="r", content="x --")),
        ("level r strong", PinCommand(Verb.LEVEL, label="r", level=Level.STRONG)),
        ("level r Context", PinCommand(Verb.LEVEL, label="r", level=Level.CONTEXT)),
        ("list", PinCommand(Verb.LIST)),
        ("edit r new text", PinCommand(Verb.EDIT, label="r", content="new text")),
        (
            "edit r -- -- starts with dashes",
            PinCommand(Verb.EDIT, label="r", content="-- starts with dashes"),
        ),
        ("remove r", PinCommand(Verb.REMOVE, label="r")),
        ("idle r", PinCommand(Verb.IDLE, label="r")),
        ("activate r", PinCommand(Verb.ACTIVATE, label="r")),
        ("pin r", PinCommand(Verb.PIN, label="r")),
        ("unpin r", PinCommand(Verb.UNPIN, label="r")),
        ("clear", PinCommand(Verb.CLEAR)),
        ("clear confirm", PinCommand(Verb.CLEAR, confirm=True)),
        ("shared", PinCommand(Verb.HELP, shared=True)),
        ("shared help", PinCommand(Verb.HELP, shared=True)),
        ("shared list", PinCommand(Verb.LIST, shared=True)),
        ("shared add r x", PinCommand(Verb.ADD, shared=True, label="r", content="x")),
        (
            "shared add-strong r x --pinned",
            PinCommand(
                Verb.ADD, shared=True, label="r", content="x", level=Level.STRONG, pinned=True
            ),
        ),
        ("shared clear confirm", PinCommand(Verb.CLEAR, shared=True, confirm=True)),
        ("shared remove r", PinCommand(Verb.REMOVE, shared=True, label="r")),
        ("suggestions", PinCommand(Verb.SUGGESTIONS)),
        ("accept 3", PinCommand(Verb.ACCEPT, count=3)),
        ("Dismiss 12", PinCommand(Verb.DISMISS, count=12)),
    ],
)
def test_parses(text: str, expected: PinCommand) -> None:
    assert parse_pin(text) == expected


@pytest.mark.parametrize(
    ("text", "usage"),
    [
        ("add", "/pin add <label> <content>"),
        ("level r", "/pin level <label> strong|context"),
        ("level r loud", "/pin level <label> strong|context"),
        ("level r strong extra", "/pin level"),
        ("list extra", "/pin list"),
        ("edit r", "/pin edit <label> [<new content>]"),
        ("remove", "/pin remove <label>"),
        ("remove a b", "/pin remove <label>"),
        ("idle", "/pin idle <label>"),
        ("clear now", "/pin clear"),
        ("suggestions 1", "/pin suggestions"),
        ("accept", "/pin accept <n>"),
        ("dismiss x", "/pin dismiss <n>"),
        ("accept ²", "/pin accept <n>"),
        ("shared suggestions", "/pin shared proposals"),
        ("shared accept 1", "/pin shared proposals"),
    ],
)
def test_parse_errors_show_the_correct_form(text: str, usage: str) -> None:
    result = parse_pin(text)
    assert isinstance(result, ParseError)
    assert usage in result.message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("add h Eight --priority", "--priority needs a number after it"),
        ("add h x --priority 5 --priority 6", "--priority is given twice"),
        ("add h x --pinned --PINNED", "--pinned is given twice"),
        ("add h x --prio", "'--prio' is not a flag. Did you mean --priority?"),
        ("add h x --prio 5", "'--prio' is not a flag. Did you mean --priority?"),
        ("add h x --pined", "'--pined' is not a flag. Did you mean --pinned?"),
        ("add h x --Pinnned --priority 2", "'--Pinnned' is not a flag. Did you mean --pinned?"),
        ("add h x --prority 2", "'--prority' is not a flag. Did you mean --priority?"),
        ("add h x --p", "'--p' is not a flag. Did you mean --pinned or --priority?"),
    ],
)
def test_flags_without_values_repeated_or_misspelled_are_refused(text: str, problem: str) -> None:
    result = parse_pin(text)
    assert isinstance(result, ParseError)
    assert result.message.startswith(problem), result.message
    assert "put -- after the label: /pin add <label> -- <content>" in result.message
    assert result.message.endswith(f"Usage: {USAGE['add']}")


def test_a_shared_flag_problem_shows_the_shared_forms() -> None:
    result = parse_pin("shared add-strong h x --priority")
    assert isinstance(result, ParseError)
    assert "/pin shared add-strong <label> -- <content>" in result.message
    assert "Usage: /pin shared add-strong <label>" in result.message


@pytest.mark.parametrize(
    ("word", "meant"),
    [
        ("delete", "remove"),
        ("del", "remove"),
        ("rm", "remove"),
        ("delet", "remove"),
        ("show", "list"),
        ("ls", "list"),
        ("on", "activate"),
        ("off", "idle"),
        ("info", "status"),
        ("stats", "status"),
        ("lsit", "list"),
    ],
)
def test_synonyms_and_typos_suggest_the_subcommand_meant(word: str, meant: str) -> None:
    result = parse_pin(f"{word} tone")
    assert isinstance(result, ParseError)
    assert f"Did you mean '{meant}'? Usage: /pin {meant}" in result.message


def test_a_two_letter_typo_gets_no_guess() -> None:
    result = parse_pin("of tone")
    assert isinstance(result, ParseError) and "Did you mean" not in result.message


def test_unknown_subcommand_suggests_the_closest() -> None:
    result = parse_pin("lsit")
    assert isinstance(result, ParseError)
    assert "'list'" in result.message and "/pin help" in result.message


def test_double_shared_is_an_error() -> None:
    assert isinstance(parse_pin("shared shared list"), ParseError)


words = st.sampled_from(
    [
        "add",
        "add-strong",
        "add-context",
        "level",
        "list",
        "edit",
        "remove",
        "idle",
        "activate",
        "pin",
        "unpin",
        "clear",
        "confirm",
        "shared",
        "help",
        "--",
        "--pinned",
        "strong",
        "context",
        " ",
        "\n",
        "\t",
    ]
)


@settings(max_examples=400)
@given(st.lists(st.one_of(words, st.text()), max_size=8).map(" ".join))
def test_no_input_raises_and_each_yields_a_command_or_an_error(text: str) -> None:
    result = parse_pin(text)
    assert isinstance(result, PinCommand | ParseError)
    if isinstance(result, ParseError):
        assert result.message.strip()
    elif result.verb is Verb.ADD:
        assert result.label
        # No content means the command pins the message it replies to.
        assert result.content is None or result.content == result.content.strip() != ""


@settings(max_examples=200)
@given(st.text(min_size=1000, max_size=5000))
def test_long_arbitrary_input_never_raises(text: str) -> None:
    assert isinstance(parse_pin(text), PinCommand | ParseError)
