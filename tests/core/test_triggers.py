"""Keyword triggers: a keyword matches ignoring case after NFKC, as whole words where words are
spaced, as a substring in Chinese and Japanese; `--when`'s keywords are read and checked."""

from __future__ import annotations

from bot.core.blocks.triggers import MAX_KEYWORDS, Matcher, matcher, parse_keywords


def test_whole_words_ignoring_case_and_width() -> None:
    found = Matcher([(1, ["deploy"]), (2, ["Release Plan"]), (3, ["cat"])])
    assert found.fired(["We DEPLOY today"]) == {1: "deploy"}
    assert found.fired(["ＤＥＰＬＯＹ now"]) == {1: "deploy"}  # full-width, folded by NFKC
    assert found.fired(["the release   plan, please"]) == {2: "Release Plan"}
    assert found.fired(["concatenate the deployment"]) == {}  # inside a longer word: no


def test_chinese_and_japanese_match_inside_a_run() -> None:
    found = Matcher([(1, ["部署"]), (2, ["部署脚本"]), (3, ["デプロイ"]), (4, ["deploy"])])
    assert found.fired(["我们今天部署脚本吧"]) == {1: "部署", 2: "部署脚本"}
    assert found.fired(["明日デプロイします"]) == {3: "デプロイ"}
    assert found.fired(["使用deploy脚本"]) == {4: "deploy"}  # an English word glued to Chinese


def test_every_text_of_the_window_counts() -> None:
    found = Matcher([(1, ["alpha"]), (2, ["beta"])])
    assert found.fired(["nothing here", "beta came before"]) == {2: "beta"}


def test_keywords_as_written_and_their_limits() -> None:
    assert parse_keywords('deploy, "release, plan",  x ') == ["deploy", "release, plan", "x"]
    assert parse_keywords("Deploy,deploy") == ["Deploy"]  # the same keyword once
    assert "empty" in str(parse_keywords("a,,b"))
    assert "at most 20" in str(parse_keywords(",".join(f"k{n}" for n in range(MAX_KEYWORDS + 1))))
    assert "longer than 40" in str(parse_keywords("x" * 41))
    assert "no letter" in str(parse_keywords("--"))


def test_a_thousand_blocks_are_matched_in_one_reading() -> None:
    triggers = tuple((n, tuple(f"word{n}x{k}" for k in range(5))) for n in range(1000))
    built = matcher(triggers)
    assert matcher(triggers) is built  # built once while the blocks stay the same
    message = "please tell me about word512x3 and the weather " * 10
    assert built.fired([message, "and word7x0"]) == {512: "word512x3", 7: "word7x0"}
