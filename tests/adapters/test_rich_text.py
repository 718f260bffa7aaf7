"""The renderer's decisions, one by one: what Markdown consumes and what it never does, spans
that platforms accept, splitting, and the last check before Telegram."""

from __future__ import annotations

import logging

import pytest

from bot.adapters.rich_text import (
    FEISHU,
    TELEGRAM,
    Rich,
    Span,
    allowed_link,
    render,
    span_problems,
    split_rich,
)
from bot.adapters.telegram_send import _part, formatted_parts


def shown(markdown: str) -> tuple[str, list[tuple[str, str]]]:
    rich = render(markdown, TELEGRAM)
    return rich.text, [(s.kind, rich.text[s.start : s.end]) for s in rich.spans]


def test_inline_formatting_and_what_it_consumes() -> None:
    assert shown("**bold _both_** ~~gone~~ `a<b`") == (
        "bold both gone a<b",
        [("bold", "bold both"), ("italic", "both"), ("strikethrough", "gone"), ("code", "a<b")],
    )
    assert shown("unclosed **bold and _half") == ("unclosed **bold and _half", [])
    assert shown(r"\*not\* \<b> \\ \&amp;") == (r"*not* <b> \ &amp;", [])


def test_html_comments_and_entities_are_text() -> None:
    for text in ["<b>x</b>", "<!-- x -->", "a<b and c>d", "&amp; &lt; &#60; &nbsp;", "<?php ?>"]:
        assert shown(text) == (text, [])
    assert shown("<div>\n<p>block</p>\n</div>") == ("<div>\n<p>block</p>\n</div>", [])


def test_headings_lists_quotes_and_rules() -> None:
    text, spans = shown("# Title\n\n- one\n- two\n\n3. three\n04. four\n5.\n\n> said\n\n---")
    assert text == "Title\n\n• one\n• two\n\n3. three\n04. four\n5.\n\nsaid\n\n———"
    assert spans == [("bold", "Title"), ("quote", "said")]
    nested = render("> a\n> > b\n>\n> c", TELEGRAM)
    assert nested.text == "a\n\n> b\n\nc" and [s.kind for s in nested.spans] == ["quote"]
    assert render("> a\n> > b", FEISHU).text == "> a\n\n> > b"


def test_links_keep_only_http_https_and_mailto() -> None:
    assert shown("[a](https://x.org) [b](mailto:me@x.org) <https://y.org> <c@d.ee>")[1] == [
        ("link", "a"),
        ("link", "b"),
        ("link", "https://y.org"),
        ("link", "c@d.ee"),
    ]
    assert shown("[a](javascript:alert(1)) [b](tg://user?id=1) [c](rel/x) [d](http://)") == (
        "a (javascript:alert(1)) b (tg://user?id=1) c (rel/x) d (http://)",
        [],
    )
    assert shown("<tg://user?id=1> <javascript:x()>") == ("<tg://user?id=1> <javascript:x()>", [])
    assert shown("[](https://x.org) ![](https://x.org/i.png) ![a *b*](tg://i)")[0] == (
        "https://x.org https://x.org/i.png a b (tg://i)"
    )
    assert shown("[a]: https://x.org\n\n[a]") == ("[a]: https://x.org\n\n[a]", [])
    for url in ["http://x.org", "HTTPS://X.ORG/p", "mailto:a@b.c"]:
        assert allowed_link(url)
    for url in ["http://", "https:///p", "mailto:", "ftp://x", "//x.org", "http://[::1", "x"]:
        assert not allowed_link(url)


def test_no_code_and_no_link_inside_a_telegram_link() -> None:
    assert shown("[**a** `b` ![i](https://i.org)](https://x.org)") == (
        "a b i (https://i.org)",
        [("link", "a b i (https://i.org)"), ("bold", "a")],
    )
    feishu = render("[`b`](https://x.org)", FEISHU)  # Feishu keeps the backticks instead
    assert feishu.text == "`b`" and [s.kind for s in feishu.spans] == ["link"]


def test_code_blocks_keep_everything_they_hold() -> None:
    rich = render("```html\n<p>&amp;</p>\n<!-- c -->\n```", TELEGRAM)
    assert rich == Rich("<p>&amp;</p>\n<!-- c -->", (Span("pre", 0, 23, language="html"),))
    assert shown("```py title=x.py\nx\n```") == ("py title=x.py\nx", [("pre", "x")])
    assert shown("```python\n```") == ("python", [])  # an empty block still shows its language
    assert shown("``````") == ("", [])
    assert formatted_parts("``````") == [("``````", ())]  # nothing to show: sent as it came
    assert shown("    indented <b>\n") == ("indented <b>", [("pre", "indented <b>")])


def test_tables_are_shown_as_written() -> None:
    table = "| a | **b** |\n|---|---|\n| 1 | 2 | 3 |"
    assert shown(f"Data:\n\n{table}") == (f"Data:\n\n{table}", [("pre", table)])
    assert shown(f"> {table.replace(chr(10), chr(10) + '> ')}")[0] == table


def test_spans_are_split_with_the_text() -> None:
    code = "\n".join(f"line {i}" for i in range(10))
    rich = render(f"**intro**\n\n```sh\n{code}\n```", TELEGRAM)
    parts = split_rich(rich, 30)
    assert all(len(part.text) <= 30 and not span_problems(part) for part in parts)
    assert parts[0].text.startswith("intro\n\nline 0") and len(parts) == 3
    blocks = [
        (p.text[s.start : s.end], s.language) for p in parts for s in p.spans if s.kind == "pre"
    ]
    assert "\n".join(block for block, _ in blocks) == code
    assert {language for _, language in blocks} == {"sh"}
    assert [p.text for p in split_rich(Rich("x" * 25), 10)] == ["x" * 10, "x" * 10, "x" * 5]


def test_span_problems_names_what_telegram_refuses() -> None:
    text = "abcdef"
    assert span_problems(Rich(text, (Span("bold", 0, 3), Span("italic", 2, 5)))) != []
    assert span_problems(Rich(text, (Span("pre", 0, 6), Span("bold", 1, 2)))) != []
    assert span_problems(Rich(text, (Span("link", 0, 6, "https://x.org"), Span("code", 1, 2))))
    assert span_problems(Rich(text, (Span("link", 0, 6, "tg://x"),))) != []
    assert span_problems(Rich(text, (Span("bold", 0, 9),))) != []
    assert span_problems(Rich(text, (Span("bold", 0, 6), Span("code", 0, 6)))) == []
    assert span_problems(Rich(text, (Span("quote", 0, 6), Span("pre", 1, 4)))) == []


def test_the_last_check_drops_and_logs_what_would_be_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    text, entities = _part(Rich("abcdef", (Span("bold", 0, 3), Span("italic", 2, 5))))
    assert text == "abcdef" and [e.type for e in entities] == ["bold"]
    assert "dropping entities Telegram would refuse" in caplog.text
