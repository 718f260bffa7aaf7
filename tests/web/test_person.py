"""Who the web page takes for a person: a platform the bot serves and an id of the form that
platform gives, whose page other pages link to; anything else names nobody."""

from __future__ import annotations

import pytest

from bot.web.person import Person, person_page, read_person, scope_person_page


@pytest.mark.parametrize(
    ("typed", "person"),
    [
        ("telegram:42", Person("telegram", "42")),
        ("  Telegram:42\n", Person("telegram", "42")),
        ("feishu:ou_abc-1", Person("feishu", "ou_abc-1")),
        ("console:ann", Person("console", "ann")),
    ],
)
def test_a_person_as_whoami_shows_them(typed: str, person: Person) -> None:
    assert read_person(typed) == person


@pytest.mark.parametrize(
    "typed",
    [
        "",
        "42",
        "telegram:",
        ":42",
        "slack:42",
        "telegram:0",
        "telegram:-5",
        "telegram:4 2",
        "telegram:42:1",
        f"telegram:{2**53}",
        "feishu:42",
        "console:a\x00b",
    ],
)
def test_anything_else_is_told_how_to_write_a_person(typed: str) -> None:
    problem = read_person(typed)
    assert isinstance(problem, str) and "write" in problem.casefold()


def test_pages_link_only_to_people() -> None:
    assert person_page("telegram", "42") == "/person?user=telegram%3A42"
    for actor in ("web:alice", "a former member", "", "forget"):
        assert person_page("telegram", actor) == ""
    assert scope_person_page("telegram:direct:42") == "/person?user=telegram%3A42"
    assert scope_person_page("telegram:group:-1::u:42") == "/person?user=telegram%3A42"
    assert scope_person_page("telegram:group:-1") == ""  # a group's shared blocks: nobody's
    assert scope_person_page("telegram:group:42::u:42") == ""  # no key the bot writes
