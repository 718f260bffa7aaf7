"""Scoring a secret recogniser on a labelled corpus (issue 44): how many credentials it refuses,
how many secrets its redaction hides, how often it refuses or changes ordinary text, and what a
line costs. The same figures for ours and for each library candidate, so they can stand side by
side in the tests' messages and in `python -m bench`.

The corpus's entries are read through the protocols below (kind, line, hidden, credential), so
any frozen dataclass or tuple-like record with those fields can be scored.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


class SecretEntry(Protocol):
    """A corpus line holding a secret: `hidden` are the substrings that must not survive
    redaction; `credential` False marks an address (hidden, but never refused)."""

    @property
    def kind(self) -> str: ...

    @property
    def line(self) -> str: ...

    @property
    def hidden(self) -> tuple[str, ...]: ...

    @property
    def credential(self) -> bool: ...


class OrdinaryEntry(Protocol):
    """A corpus line that holds no secret: it must be neither refused nor changed."""

    @property
    def kind(self) -> str: ...

    @property
    def line(self) -> str: ...


def _no_session() -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Candidate:
    """A recogniser to score: `refuses(line)` is what keeps a line out of a group block,
    `redact(line)` is what a sensitive block shows. `session()` is entered once around the
    whole scoring (a library whose settings are process-wide sets them there), so its cost is
    not counted per line. A candidate whose refusal and redaction come from one scan (a
    library's: refused when anything is found) may give `judge(line)`, both answers from one
    call, which scoring then uses instead of the two; it must answer as they do."""

    name: str
    refuses: Callable[[str], bool]
    redact: Callable[[str], str]
    session: Callable[[], AbstractContextManager[Any]] = field(default=_no_session)
    judge: Callable[[str], tuple[bool, str]] | None = None

    def judged(self, line: str) -> tuple[bool, str]:
        """Whether the line is refused, and the line redacted."""
        if self.judge is not None:
            return self.judge(line)
        return self.refuses(line), self.redact(line)


@dataclass(frozen=True)
class Figures:
    """A candidate's score on one corpus. Counts with their totals, the failing entries (for
    messages), and the mean time to judge a line (refusal and redaction) over every line."""

    name: str
    credentials: int
    credentials_refused: int
    secrets: int
    secrets_hidden: int
    ordinary: int
    ordinary_refused: int
    ordinary_changed: int
    us_per_line: float
    not_refused: tuple[SecretEntry, ...] = ()
    not_hidden: tuple[SecretEntry, ...] = ()
    refused_ordinary: tuple[OrdinaryEntry, ...] = ()
    changed_ordinary: tuple[OrdinaryEntry, ...] = ()

    @property
    def credentials_refused_pct(self) -> float:
        """Share of the credential entries refused, in percent (100 when there are none)."""
        return _pct(self.credentials_refused, self.credentials, empty=100.0)

    @property
    def secrets_hidden_pct(self) -> float:
        """Share of all secret entries (addresses too) with nothing of `hidden` left after
        redaction, in percent (100 when there are none)."""
        return _pct(self.secrets_hidden, self.secrets, empty=100.0)

    @property
    def ordinary_refused_pct(self) -> float:
        """Share of the ordinary lines refused, in percent (0 when there are none)."""
        return _pct(self.ordinary_refused, self.ordinary, empty=0.0)

    @property
    def ordinary_changed_pct(self) -> float:
        """Share of the ordinary lines that redaction changed, in percent (0 when none)."""
        return _pct(self.ordinary_changed, self.ordinary, empty=0.0)

    def as_json(self, examples: int = 10) -> dict[str, Any]:
        """The figures as plain JSON values, with at most `examples` failing lines of each
        sort (their kinds and texts, cut to 120 characters)."""

        def shown(entries: Sequence[SecretEntry | OrdinaryEntry]) -> list[str]:
            return [f"{e.kind}: {_cut(e.line)}" for e in entries[:examples]]

        return {
            "name": self.name,
            "credentials": self.credentials,
            "credentials_refused": self.credentials_refused,
            "credentials_refused_pct": round(self.credentials_refused_pct, 1),
            "secrets": self.secrets,
            "secrets_hidden": self.secrets_hidden,
            "secrets_hidden_pct": round(self.secrets_hidden_pct, 1),
            "ordinary": self.ordinary,
            "ordinary_refused": self.ordinary_refused,
            "ordinary_refused_pct": round(self.ordinary_refused_pct, 1),
            "ordinary_changed": self.ordinary_changed,
            "ordinary_changed_pct": round(self.ordinary_changed_pct, 1),
            "us_per_line": round(self.us_per_line, 1),
            "not_refused": shown(self.not_refused),
            "not_hidden": shown(self.not_hidden),
            "refused_ordinary": shown(self.refused_ordinary),
            "changed_ordinary": shown(self.changed_ordinary),
        }

    def failures(self, limit: int = 20) -> str:
        """A readable list of the failing lines, at most `limit` of each sort (for a test's
        assertion message); empty when nothing failed."""
        parts = []
        for title, entries in (
            ("credentials not refused", self.not_refused),
            ("secrets not hidden by redaction", self.not_hidden),
            ("ordinary lines refused", self.refused_ordinary),
            ("ordinary lines changed by redaction", self.changed_ordinary),
        ):
            if entries:
                lines = "\n".join(f"  {e.kind}: {e.line!r}" for e in entries[:limit])
                more = f"\n  … and {len(entries) - limit} more" if len(entries) > limit else ""
                parts.append(f"{self.name}: {len(entries)} {title}:\n{lines}{more}")
        return "\n".join(parts)


def _pct(part: int, whole: int, empty: float) -> float:
    return 100.0 * part / whole if whole else empty


def _cut(text: str, limit: int = 120) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Clock:
    """Total time and number of calls, timed one call at a time with perf_counter."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    def mean_us(self) -> float:
        return 1e6 * self.seconds / self.calls if self.calls else 0.0


# Judged once, untimed, before the corpus: what a candidate builds on its first call (compiled
# patterns, a loaded model) is a start-up cost, not a line's.
WARM_UP = "warming up: nothing secret here"


def score(
    candidate: Candidate,
    secrets: Sequence[SecretEntry],
    ordinary: Sequence[OrdinaryEntry],
) -> Figures:
    """Judge every line once (`refuses` and `redact`, or `judge`), inside the candidate's
    session, and count: credential entries refused (addresses are not counted: a group may
    show them), secret entries (addresses too) with none of `hidden` left in the redacted line,
    ordinary lines refused, and ordinary lines that redaction changed. The µs per line is the
    mean over every line of the corpus, each line timed on its own, after one untimed call on
    WARM_UP."""
    clock = _Clock()
    not_refused: list[SecretEntry] = []
    not_hidden: list[SecretEntry] = []
    refused_ordinary: list[OrdinaryEntry] = []
    changed_ordinary: list[OrdinaryEntry] = []
    credentials = 0
    with candidate.session():
        candidate.judged(WARM_UP)
        for secret in secrets:
            with clock.timing():
                refused, redacted = candidate.judged(secret.line)
            if secret.credential:
                credentials += 1
                if not refused:
                    not_refused.append(secret)
            if any(part in redacted for part in secret.hidden):
                not_hidden.append(secret)
        for entry in ordinary:
            with clock.timing():
                refused, redacted = candidate.judged(entry.line)
            if refused:
                refused_ordinary.append(entry)
            if redacted != entry.line:
                changed_ordinary.append(entry)
    return Figures(
        name=candidate.name,
        credentials=credentials,
        credentials_refused=credentials - len(not_refused),
        secrets=len(secrets),
        secrets_hidden=len(secrets) - len(not_hidden),
        ordinary=len(ordinary),
        ordinary_refused=len(refused_ordinary),
        ordinary_changed=len(changed_ordinary),
        us_per_line=clock.mean_us(),
        not_refused=tuple(not_refused),
        not_hidden=tuple(not_hidden),
        refused_ordinary=tuple(refused_ordinary),
        changed_ordinary=tuple(changed_ordinary),
    )


def ours() -> Candidate:
    """Our recogniser, `bot.secrets`: a line is refused when `credential_kind` names a
    credential in it, and `redact` is its sensitive-block redaction."""
    from bot import secrets

    return Candidate(
        name="ours",
        refuses=lambda line: secrets.credential_kind(line) is not None,
        redact=secrets.redact,
    )
