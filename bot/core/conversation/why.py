"""`/pin why`: the blocks that went with the speaker's last request here, and why each went
(sent always, or brought by which keyword) or stayed out (over the triggered budget, ended,
idle), with token figures, as the turn recorded them."""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.conversation.render import SENT, Reason, Record, Why, read_record

NO_REQUEST = (
    "You have sent no message to the model here yet that is still kept (or it went before "
    "this bot recorded it), so there is nothing to explain. Send a message, then /pin why."
)
NO_BLOCKS = "Your last request here carried no pinned blocks."
_WORDS = {
    Reason.ALWAYS: "always sent",
    Reason.OVER_BUDGET: "mentioned ({keyword!r}), but over pins.triggered_budget_tokens",
    Reason.ENDED: "ended",
    Reason.IDLE: "idle",
}


Figures = Mapping[tuple[str, str], int]  # (scope name, label) → the block's tokens now


def _tokens(why: Why, figures: Figures) -> int:
    """A block's tokens as its turn recorded them, or (sent always: not recorded) as it is now."""
    if why.reason is not Reason.ALWAYS:
        return why.tokens
    return figures.get((why.scope_name, why.label), 0)


def _line(why: Why, group: bool, figures: Figures) -> str:
    where = f"{why.scope_name}, " if group else ""
    if why.reason is Reason.KEYWORD:
        reason = f"its keyword {why.keyword!r} was mentioned"
    else:
        reason = _WORDS[why.reason].format(keyword=why.keyword)
    count = _tokens(why, figures)
    tokens = f", about {count:,} tokens" if count else ""
    return f"- {why.label} ({where}{why.level.value}{tokens}): {reason}"


def why_text(stored: str | None, *, group: bool, budget: int, figures: Figures) -> str:
    """The reply to `/pin why` for the record the speaker's last turn here kept (None: none);
    figures gives the tokens of the blocks here now, for those the turn sent always."""
    record = read_record(stored) if stored else None
    if record is None:
        return NO_REQUEST
    return "\n".join(_lines(record, group=group, budget=budget, figures=figures))


def _lines(record: Record, *, group: bool, budget: int, figures: Figures) -> list[str]:
    sent = [w for w in record.why if w.reason in SENT]
    out = [w for w in record.why if w.reason not in SENT]
    lines = []
    if sent:
        total = sum(_tokens(w, figures) for w in sent)
        lines.append(f"Sent with your last request here (about {total:,} tokens):")
        lines += [_line(w, group, figures) for w in sent]
    else:
        lines.append(NO_BLOCKS)
    fired = sum(w.tokens for w in sent if w.reason is Reason.KEYWORD)
    if any(w.reason in (Reason.KEYWORD, Reason.OVER_BUDGET) for w in record.why):
        lines.append(
            f"Blocks brought by a keyword used about {fired:,} of the {budget:,} tokens they may "
            "use together (pins.triggered_budget_tokens); past it, the lowest priority stays out."
        )
    if out:
        lines.append("Left out:")
        lines += [_line(w, group, figures) for w in out]
    if record.waiting:
        noun = "block waits" if record.waiting == 1 else "blocks wait"
        lines.append(
            f"{record.waiting} {noun} for keywords that were not mentioned (/pin list shows them)."
        )
    return lines
