"""The one recogniser of secrets: everything that asks "is there a secret here?" asks `find`.

Built on detect-secrets' provider plugins (their patterns, run by RE2 so that every rule is linear
in the text) and our own rules for what scanners of source files do not read: secrets in English
and Chinese prose, text glued to CJK characters, invisible characters inside a token, whole private
key blocks, the user's own `||marks||`, and, for sensitive blocks, addresses.

- `credential_kind(text)`: why a group must not see text (a credential), or None.
- `redact(text)`: the text with every secret, mark and address replaced by a placeholder naming
  its kind (`[secret]`, `[token]`, `[ip]`, `[host:port]`, `[ssh-target]`, `[email]`, `[hidden]`);
  redacting twice changes nothing.
- `hidden_kinds(text)`: what `redact` hides, in words, for honest replies.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from bot.secrets._addresses import address_rules
from bot.secrets._keys import key_spans
from bot.secrets._phrasing import phrasing_rules
from bot.secrets._providers import provider_rules
from bot.secrets._rule import (
    EMAIL,
    HIDDEN,
    HOST_PORT,
    IP,
    PLACEHOLDERS,
    SECRET,
    SSH_TARGET,
    TOKEN,
    Rule,
    Span,
    compile_re2,
)
from bot.secrets._text import fold

__all__ = [
    "EMAIL",
    "HIDDEN",
    "HOST_PORT",
    "IP",
    "MARK_KIND",
    "PLACEHOLDERS",
    "SECRET",
    "SSH_TARGET",
    "TOKEN",
    "Finding",
    "credential_kind",
    "find",
    "has_marks",
    "has_placeholder",
    "hidden_kinds",
    "hide_parts",
    "marked_parts",
    "placeholder_kinds",
    "redact",
    "redact_and_name",
]

MARK_KIND = "a part marked ||secret||"
_MARK = compile_re2(r"\|\|(?:[^|]|\|[^|])+\|\|")
_PLACEHOLDER = compile_re2(
    "|".join(p.replace("[", r"\[").replace("]", r"\]") for p in PLACEHOLDERS)
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret in a text: its kind in words, where it is (offsets of the text as given),
    whether it is a credential (refused where a group sees it) and what stands in its place."""

    kind: str
    start: int
    end: int
    credential: bool
    placeholder: str


@functools.cache
def _rules() -> tuple[Rule, ...]:
    marks = Rule(MARK_KIND, _MARK, credential=False, placeholder=HIDDEN, sign="||")
    return (marks, *provider_rules(), *phrasing_rules(), *address_rules())


def find(text: str) -> tuple[Finding, ...]:
    """Every secret, mark and address in text, in order of where they start (linear in the
    length of text)."""
    folded = fold(text)
    lowered = folded.text.lower()
    spans: list[Span] = list(key_spans(folded.text))
    for rule in _rules():
        spans.extend(rule.spans(folded.text, lowered))
    found = []
    for span in spans:
        start, end = folded.original(span.start, span.end)
        found.append(Finding(span.kind, start, end, span.credential, span.placeholder))
    found.sort(key=lambda finding: (finding.start, -finding.end))
    return tuple(found)


def credential_kind(text: str) -> str | None:
    """What kind of credential text holds (in words, "a GitHub token"), or None: what keeps text
    out of a place a group sees."""
    return next((finding.kind for finding in find(text) if finding.credential), None)


def redact(text: str, *, keep_local: bool = False) -> str:
    """The text with each secret, mark and address replaced by its placeholder; text without one
    comes back as it is. keep_local leaves this machine's own addresses (127.x, ::1, localhost,
    0.0.0.0) as they are, for the operator's log lines ("listening on http://127.0.0.1:8080")."""
    return redact_and_name(text, keep_local=keep_local)[0]


def redact_and_name(text: str, *, keep_local: bool = False) -> tuple[str, list[str]]:
    """`redact(text)` and `hidden_kinds(text)` from one reading of text."""
    findings = find(text)
    if keep_local:
        findings = tuple(f for f in findings if not _local(text[f.start : f.end], f))
    if not findings:
        return text, []
    parts: list[str] = []
    kinds: list[str] = []
    position = 0
    for first, end in _merged(findings):
        parts.append(text[position : first.start])
        parts.append(first.placeholder)
        kinds.append(first.kind)
        position = end
    parts.append(text[position:])
    return "".join(parts), list(dict.fromkeys(kinds))


def _local(found: str, finding: Finding) -> bool:
    """Whether an address found is this machine's own: loopback or unspecified, or localhost
    (with its port or not), and nothing more."""
    if finding.placeholder not in (IP, HOST_PORT):
        return False
    host = found
    if finding.placeholder == HOST_PORT:
        host = found[1 : found.index("]")] if found.startswith("[") else found.rpartition(":")[0]
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _merged(findings: tuple[Finding, ...]) -> list[tuple[Finding, int]]:
    """Overlapping findings as one span: the one that starts first (it names the span and gives
    its placeholder), and where the last of them ends."""
    merged: list[tuple[Finding, int]] = []
    for finding in findings:
        if merged and finding.start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finding.end))
        else:
            merged.append((finding, finding.end))
    return merged


def hidden_kinds(text: str) -> list[str]:
    """The kinds `redact` hides in text, in words, each once, in order of appearance (a span
    inside another is named by the outer one, as its placeholder is)."""
    return redact_and_name(text)[1]


_PLACEHOLDER_KINDS = {
    IP: "an IP address",
    HOST_PORT: "a host:port pair",
    SSH_TARGET: "an SSH target",
    EMAIL: "an e-mail address",
    SECRET: "a secret",
    TOKEN: "a token",
    HIDDEN: MARK_KIND,
}


def placeholder_kinds(text: str) -> list[str]:
    """What the placeholders in an already redacted text stand for, in words, each once."""
    if "[" not in text:
        return []
    found = (match.group(0) for match in _PLACEHOLDER.finditer(text))
    return list(dict.fromkeys(_PLACEHOLDER_KINDS[placeholder] for placeholder in found))


def has_marks(text: str) -> bool:
    """Whether text holds a part the user marked secret with `||…||`."""
    return "||" in text and _MARK.search(text) is not None


def marked_parts(text: str) -> list[str]:
    """What the user marked in text (the parts between `||` and `||`), each once."""
    if "||" not in text:
        return []
    return list(dict.fromkeys(match.group(0)[2:-2] for match in _MARK.finditer(text)))


def hide_parts(text: str, parts: Sequence[str]) -> str:
    """text with every occurrence of each part (of two characters or more) replaced by the
    mark's placeholder: a part marked in a newer version, hidden in the older ones that held it
    unmarked."""
    for part in parts:
        if len(part) >= 2 and part in text:
            text = text.replace(part, HIDDEN)
    return text


def has_placeholder(text: str) -> bool:
    """Whether text holds a placeholder redaction puts in (text written from a redacted one)."""
    return "[" in text and _PLACEHOLDER.search(text) is not None
