"""Masking what a sensitive block must not show: the store keeps a sensitive block whole, and
everything that shows it to the model or to a group shows `redact(content)` instead.

The kinds are the Sticky Context design's (IP addresses, host:port pairs, SSH targets, KEY=value
secrets, sk-/ghp_/Bearer tokens) plus e-mail addresses, long hex or base64 secrets and every
credential `bot.core.credentials` recognises. Each span becomes a bracketed placeholder naming
its kind, so the model still knows something was there; the result never matches again, so
redacting twice changes nothing.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from bot.core.credentials import credential_patterns

# Placeholders (all lower case inside brackets, so no pattern below can match them again).
IP = "[ip]"
HOST_PORT = "[host:port]"
SSH_TARGET = "[ssh-target]"
EMAIL = "[email]"
SECRET = "[secret]"
TOKEN = "[token]"
PLACEHOLDERS = (IP, HOST_PORT, SSH_TARGET, EMAIL, SECRET, TOKEN)
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))

_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
# An octet, zero-padded or not (192.168.001.001 is an address too).
_OCTET = r"(?:25[0-5]|2[0-4]\d|[01]?\d?\d)"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
# Not part of a longer dotted number (a version such as 1.2.3.4.5) nor after a "v" (v1.2.3.4).
_IPV4_ALONE = rf"(?<![\w.]){_IPV4}(?![\w]|\.\d)"
_PORT = r"(?:6553[0-5]|655[0-2]\d|65[0-4]\d{2}|6[0-4]\d{3}|[1-5]\d{4}|[1-9]\d{0,3})"
_USER = r"[A-Za-z_][A-Za-z0-9_.+-]{0,63}"
# Environment-style names: upper case, at least two characters (E=mc2 stays physics).
_ENV_NAME = r"[A-Z](?:[A-Z0-9]|_(?=[A-Z0-9]))+"
_SECRET_WORD = (
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"access[_-]?token|auth[_-]?token|client[_-]?secret|private[_-]?key|credentials?)"
)

# A secret word alone or ending a name (DB_PASSWORD, db.pass, dbPassword), never inside a word
# (Compass: north).
_SECRET_NAME = rf"(?:[\w.-]*[_.-]|(?-i:[A-Za-z0-9]*[a-z0-9](?=[A-Z])))?{_SECRET_WORD}"

# Words that follow "password is" in ordinary prose ("the password is required", "the secret is
# to…") rather than a password: English function words and what is said of a password.
_NOT_A_VALUE = (
    r"(?:a|an|the|to|that|this|these|those|it|its|not|no|now|also|still|just|only|very|too|so|"
    r"in|on|at|of|for|from|with|by|as|and|or|but|if|then|than|when|where|which|who|what|how|"
    r"your|my|our|their|his|her|all|any|some|one|same|different|never|always|being|been|"
    r"be|is|are|was|were|will|would|should|can|could|may|might|must|required|optional|"
    r"needed|mandatory|wrong|incorrect|correct|right|invalid|valid|expired|missing|empty|"
    r"weak|strong|long|short|secure|safe|new|old|changed|reset|set|stored|saved|encrypted|"
    r"hashed|hidden|secret|unknown|case-sensitive|easy|hard|simple|important)"
)


@dataclass(frozen=True, slots=True)
class _Kind:
    """One kind of sensitive span: its pattern, what a match becomes, and a cheap sign without
    which the pattern cannot match (so ordinary text skips the costly search)."""

    name: str
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]
    sign: re.Pattern[str] | None = None
    folded: bool = False  # the sign is looked for in the lower-cased text (much cheaper than (?i))

    def mask(self, text: str) -> str:
        if self.sign is not None and not self.sign.search(text.lower() if self.folded else text):
            return text
        return self.pattern.sub(self.replace, text)


def _fixed(placeholder: str) -> Callable[[re.Match[str]], str]:
    return lambda match: placeholder


def _keep_name(placeholder: str) -> Callable[[re.Match[str]], str]:
    """KEY=value keeps KEY (the model may need to know a setting exists), masks the value."""
    return lambda match: f"{match.group('name')}{match.group('sep')}{placeholder}"


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(match: re.Match[str]) -> str:
    """A long run of letters and digits is a secret only when it looks random: all of lower,
    upper and digits (or hex), and spread over many symbols (paths and words are not)."""
    text = match.group(0)
    core = text.rstrip("=")
    if re.fullmatch(r"[0-9a-fA-F]+", core):
        return SECRET if len(core) >= 32 and re.search(r"\d", core) else text
    classes = sum(bool(re.search(p, core)) for p in (r"[a-z]", r"[A-Z]", r"\d"))
    return SECRET if classes == 3 and _entropy(core) >= 4.0 else text


def _ipv6(match: re.Match[str]) -> str:
    """An IPv6 address (bare, or in brackets with a port); clock times such as 12:30:45 and
    other colon-separated numbers are not addresses and stay."""
    address = match.group("bare") or match.group("addr")
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return match.group(0)
    return HOST_PORT if match.group("port") else IP


_AT = re.compile("@")
_QUAD = re.compile(r"\d\.\d+\.\d+\.\d")
_SK = re.compile("sk-")

_KINDS: tuple[_Kind, ...] = (
    # The Sticky Context design's tokens first (named as tokens), then every credential shape
    # whole (a private key block, a cloud key).
    _Kind(
        "a Bearer token",
        re.compile(r"\b(?P<name>Bearer)(?P<sep>\s+)[A-Za-z0-9._~+/=-]{8,}"),
        _keep_name(TOKEN),
        re.compile("Bearer"),
    ),
    _Kind("an sk- API key", re.compile(r"(?<![\w-])sk-[A-Za-z0-9_-]{12,}"), _fixed(TOKEN), _SK),
    _Kind("a GitHub token", re.compile(r"(?<![\w-])gh[pousr]_[A-Za-z0-9]{12,}"), _fixed(TOKEN)),
    *(
        _Kind(name, pattern, _fixed(SECRET))
        for name, pattern in credential_patterns()
        if name != "a password or secret assignment"
    ),
    _Kind(
        "a KEY=value secret",
        re.compile(
            rf"(?<![\w$])(?P<name>{_ENV_NAME})(?P<sep>=)(?!\[)(?:\"[^\"\n]*\"|'[^'\n]*'|\S+)"
        ),
        _keep_name(SECRET),
        re.compile(r"[A-Z0-9]="),
    ),
    _Kind(
        "a password or secret",
        re.compile(
            # Starts only where a name starts (not inside one), so a long text is read once.
            rf"(?i)(?<![\w$.-])(?P<name>{_SECRET_NAME})(?P<sep>\s*[:=]\s*)(?!\[)"
            # Any value: after a secret word and ':' or '=', even a plain word is the secret;
            # not a function word after ':', which starts prose ("The secret: the…").
            rf"(?:\"[^\"\n]+\"|'[^'\n]+'|(?!{_NOT_A_VALUE}\b)[^\s\"',;]+)"
        ),
        _keep_name(SECRET),
        re.compile(rf"{_SECRET_WORD}\s*[:=]"),
        folded=True,
    ),
    _Kind(
        "a password or secret",
        re.compile(
            # "my password is hunter2": one word after "is", unless prose goes on with it.
            rf"(?i)(?<![\w$.-])(?P<name>{_SECRET_NAME})(?P<sep>\s+is\s+)(?!\[)"
            rf"(?:\"[^\"\n]+\"|'[^'\n]+'|(?!{_NOT_A_VALUE}[\s.,;:!?]|{_NOT_A_VALUE}$)"
            r"[^\s\"',;]+?)(?=[.,;:!?]?(?:\s|$))"
        ),
        _keep_name(SECRET),
        re.compile(rf"{_SECRET_WORD}\s+is\s"),
        folded=True,
    ),
    _Kind(
        "a user:password pair",
        re.compile(
            # curl -u admin:hunter2, --user=admin:hunter2: the user and password both.
            r"(?<!\S)(?P<name>-u|--user)(?P<sep>\s+|=)(?:\"[^\"\n:]*:[^\"\n]*\"|"
            r"'[^'\n:]*:[^'\n]*'|[^\s:\"']+:\S+)"
        ),
        _keep_name(SECRET),
        re.compile(r"(?:-u|--user)[\s=]+\S*:"),
    ),
    _Kind(
        "an SSH target",
        re.compile(rf"\b{_USER}@{_IPV4}(?::{_PORT})?\b"),
        _fixed(SSH_TARGET),
        _AT,
    ),
    _Kind("an e-mail address", re.compile(rf"\b{_USER}@{_HOST}\b"), _fixed(EMAIL), _AT),
    _Kind(
        "an SSH target",
        re.compile(rf"(?<![\w@]){_USER}@[A-Za-z0-9][A-Za-z0-9-]*\b(?!\.\w)"),
        _fixed(SSH_TARGET),
        _AT,
    ),
    _Kind("a host:port pair", re.compile(rf"{_IPV4_ALONE}:{_PORT}\b"), _fixed(HOST_PORT), _QUAD),
    _Kind("an IP address", re.compile(_IPV4_ALONE), _fixed(IP), _QUAD),
    _Kind(
        "an IP address",
        re.compile(
            r"(?<![\w:])(?:\[(?P<addr>[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)\](?::(?P<port>\d{1,5}))?"
            r"|(?P<bare>(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}))(?![\w:])"
        ),
        _ipv6,
        re.compile(r"[0-9A-Fa-f]:[0-9A-Fa-f]*:"),
    ),
    _Kind(
        "a host:port pair",
        re.compile(rf"(?<![\w.@-])(?:{_HOST}|localhost):{_PORT}\b(?!\.\d)"),
        _fixed(HOST_PORT),
        re.compile(r"[A-Za-z]:\d"),
    ),
    _Kind(
        "a long hex or base64 secret",
        re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{32,}={0,2}(?![\w+/=-])"),
        _random_looking,
        re.compile(r"[A-Za-z0-9+/_-]{32}"),
    ),
)


def redact(text: str) -> str:
    """The text with every sensitive span replaced by its kind's placeholder; text without one
    comes back unchanged, and redacting a redacted text changes nothing."""
    for kind in _KINDS:
        text = kind.mask(text)
    return text


def sensitive_kinds(text: str) -> list[str]:
    """The names of the kinds found in text, in the order they are masked (for tests and the
    operator's raw view, which says what a block's redacted form hides)."""
    found: list[str] = []
    for kind in _KINDS:
        redacted = kind.mask(text)
        if redacted != text:
            found.append(kind.name)
            text = redacted
    return found


def has_placeholder(text: str) -> bool:
    """Whether text holds a placeholder redaction puts in (text written from a redacted one)."""
    return _PLACEHOLDER.search(text) is not None
