"""Feishu posts of the model's Markdown: literal text, link and code block elements only."""

from __future__ import annotations

import json

from bot.adapters.feishu_format import formatted_posts


def test_feishu_posts_are_literal_elements() -> None:
    markdown = (
        'Hi **<at user_id="all">x</at>** [d](https://x.org) [j](javascript:x)\n```go\nx\n```\nend'
    )
    ((content, literal),) = formatted_posts(markdown, 8000)
    assert json.loads(content)["zh_cn"]["content"] == [
        [
            {"tag": "text", "text": "Hi "},
            {"tag": "text", "text": '<at user_id="all">x</at>', "style": ["bold"]},
            {"tag": "text", "text": " "},
            {"tag": "a", "text": "d", "href": "https://x.org"},
            {"tag": "text", "text": " j (javascript:x)"},
        ],
        [{"tag": "text", "text": ""}],
        [{"tag": "code_block", "text": "x", "language": "go"}],
        [{"tag": "text", "text": ""}],
        [{"tag": "text", "text": "end"}],
    ]
    assert literal == 'Hi <at user_id="all">x</at> d (https://x.org) j (javascript:x)\n\nx\n\nend'
    assert formatted_posts("<!-- x -->", 8000)[0][1] == "<!-- x -->"
    assert [p for p, _ in formatted_posts("``````", 8000)] == [
        json.dumps({"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "``````"}]]}})
    ]
