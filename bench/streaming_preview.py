"""`python -m bench.streaming_preview`: how streamed Telegram previews look when each preview is
formatted so far, against previews in plain text with one formatted final edit (what pinbot does).

A preview "rewrites" when its visible text is not a continuation of the one before: a marker
shown as `**` vanishes once it closes, so the text jumps under the reader's eyes.
"""

from __future__ import annotations

from bot.adapters.rich_text import TELEGRAM, render

CORPUS = [
    "**bold _both_ bold** then more words to stream **and more**",
    "Use `a < b && c > d`:\n```html\n<p>&amp; x > y</p>\n```\nafter",
    "😀👍𝄞 **bold** and `code` ✅ [link](https://example.org/x) end",
    "# Title\n## Sub\n- one\n- two\n1. first\n> quoted\n~~gone~~",
    "Here:\n```python\n" + "\n".join(f"print({i})" for i in range(20)) + "\n```\nDone.",
]
CHUNK = 5  # characters a streamed delta adds, about a token


def measure() -> dict[str, int]:
    """Previews, and how many of them rewrite earlier text, formatting as the text grows."""
    previews = rewrites = 0
    for text in CORPUS:
        previous = ""
        for end in range(CHUNK, len(text) + 1, CHUNK):
            shown = render(text[:end], TELEGRAM).text
            previews += 1
            if previous and not shown.startswith(previous.rstrip()):
                rewrites += 1
            previous = shown
    return {"previews": previews, "rewrites_formatting_so_far": rewrites, "rewrites_plain": 0}


if __name__ == "__main__":
    figures = measure()
    share = 100 * figures["rewrites_formatting_so_far"] / figures["previews"]
    print(
        f"{figures['previews']} streamed previews: formatted so far, "
        f"{figures['rewrites_formatting_so_far']} ({share:.0f}%) rewrite text already shown; "
        "plain previews with a formatted final edit: none"
    )
