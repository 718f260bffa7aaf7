"""When a block ends: `--until <date or date-time>` and `--for <duration>` as users write them,
read in UTC (the bot's time everywhere: budgets reset at UTC midnight too) unless the time
gives its own offset. A date alone ends at the end of that day; a duration counts from now."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MAX_DAYS = 3650  # the furthest end a block may have: ten years
_DURATION = re.compile(r"(?:(\d{1,5})w)?(?:(\d{1,5})d)?(?:(\d{1,6})h)?(?:(\d{1,7})m)?")
_UNITS = (timedelta(weeks=1), timedelta(days=1), timedelta(hours=1), timedelta(minutes=1))
CLEAR = "-"  # `--until -`: the block no longer ends
UNTIL_EXAMPLE = "--until 2026-12-24 or --until 2026-12-24T18:00 (UTC, or with +08:00)"
FOR_EXAMPLE = "--for 3d, --for 12h or --for 1w2d (weeks, days, hours, minutes)"


@dataclass(frozen=True)
class Ends:
    """An end as asked for: at a time, after a duration from when the change is made, or never
    (both None: `--until -`, the block no longer ends)."""

    at: datetime | None = None
    after: timedelta | None = None

    def resolve(self, now: datetime) -> datetime | None:
        """The end this asks for, made now (None: never)."""
        if self.after is not None:
            return now + self.after
        return self.at


def parse_until(text: str) -> Ends | str:
    """`--until`'s value (a date, a date-time, or `-`), or what is wrong with it."""
    if text == CLEAR:
        return Ends()
    unreadable = f"{text!r} is not a date or a date-time; write e.g. {UNTIL_EXAMPLE}"
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            at = _day_end(date.fromisoformat(text))
        elif "T" not in text.upper() and " " not in text:
            return unreadable
        else:
            moment = datetime.fromisoformat(text.replace("z", "Z"))
            at = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            at.astimezone(UTC)  # a time that has no UTC form (year 1 or 9999 with an offset)
    except ValueError:
        return unreadable
    except OverflowError:
        return f"{text!r} is outside the dates a block may end at (from now to {MAX_DAYS} days on)"
    return Ends(at=at)


def parse_for(text: str) -> Ends | str:
    """`--for`'s value (`3d`, `12h`, `1w2d`, `90m`), or what is wrong with it."""
    match = _DURATION.fullmatch(text.casefold())
    if not text or match is None:
        return f"{text!r} is not a duration; write e.g. {FOR_EXAMPLE}"
    length = sum(
        (int(n) * unit for n, unit in zip(match.groups(), _UNITS, strict=True) if n), timedelta()
    )
    if length <= timedelta(0):
        return f"{text!r} is no time at all; write e.g. {FOR_EXAMPLE}"
    if length > timedelta(days=MAX_DAYS):
        return f"{text!r} is longer than a block may last ({MAX_DAYS} days)"
    return Ends(after=length)


def end_problem(ends_at: datetime, now: datetime) -> str | None:
    """What is wrong with an end a user gives a block now: passed, or too far ahead."""
    if ends_at <= now:
        return f"{shown_end(ends_at)} has already passed; give a time in the future"
    if ends_at - now > timedelta(days=MAX_DAYS):
        return f"{shown_end(ends_at)} is further ahead than a block may last ({MAX_DAYS} days)"
    return None


def shown_end(ends_at: datetime) -> str:
    """An end as replies show it, in UTC."""
    at = ends_at.astimezone(UTC)
    return f"{at.year:04d}-{at.month:02d}-{at.day:02d} {at.hour:02d}:{at.minute:02d} UTC"


def _day_end(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
