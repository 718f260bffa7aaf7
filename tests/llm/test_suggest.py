"""Reading the model's pin suggestions, and the suggestion buttons' data."""

from __future__ import annotations

import json

from bot.core.decisions.suggestions import Suggestions, content_key, suggestion_tap
from bot.llm.base import ModelReply, ToolCall
from bot.llm.suggest import COMPACT_TOOL, Candidate, read_compaction, read_suggestions


def test_the_combined_answer_is_read_and_a_text_answer_is_its_summary() -> None:
    arguments = {
        "summary": " They talked. ",
        "suggestions": [
            {"label": "tz", "content": "Lisbon.", "reason": "asked"},
            {"label": "no-content"},
            "not an object",
            {"label": "x", "content": "No reason given."},
        ],
    }
    call = ToolCall("call_1", COMPACT_TOOL, json.dumps(arguments))
    read = read_compaction(ModelReply("", [call]))
    assert read.summary == "They talked." and read.readable
    assert read.candidates == [
        Candidate("tz", "Lisbon.", "asked"),
        Candidate("x", "No reason given.", ""),
    ]
    assert read_compaction(ModelReply("Only a summary.")).summary == "Only a summary."
    broken = read_compaction(ModelReply("", [ToolCall("c", COMPACT_TOOL, "{not json")]))
    assert not broken.readable


def test_suggestions_alone_are_found_in_the_text_or_not_at_all() -> None:
    item = {"label": "tea", "content": "Green tea.", "reason": "said so"}
    fenced = f"Sure:\n```json\n{json.dumps({'suggestions': [item]})}\n```"
    assert read_suggestions(fenced) == [Candidate("tea", "Green tea.", "said so")]
    assert read_suggestions(json.dumps([item])) == [Candidate("tea", "Green tea.", "said so")]
    assert read_suggestions('{"suggestions": []}') == []
    assert read_suggestions("I have no suggestions.") is None


def test_content_compares_up_to_case_spacing_and_punctuation() -> None:
    assert content_key("Lives in Lisbon.") == content_key("lives  in LISBON!")
    assert content_key("Ｌｉｓｂｏｎ") == content_key("lisbon")
    assert content_key("Lives in Lisbon") != content_key("Lives in Porto")
    assert content_key("Li\u200bves in Lis\u00adbon") == content_key("Lives in Lisbon")
    assert content_key("`Lives` in Lisbon 🏠") == content_key("Lives in Lisbon")
    assert content_key("Café") == content_key("CAFÉ") != content_key("Cafe")


def test_suggestion_buttons_carry_their_number_and_forged_data_is_none() -> None:
    assert suggestion_tap(Suggestions.tap("pin", 3)) == (True, 3)
    assert suggestion_tap(Suggestions.tap("dismiss", 12)) == (False, 12)
    for forged in ("pinbot:suggestion:pin:0", "pinbot:suggestion:pin:²", "pinbot:suggestion:x:1"):
        assert suggestion_tap(forged) is None
    assert suggestion_tap("pinbot:proposal:approve:1") is None
