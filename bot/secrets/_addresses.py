"""Where things are, hidden in sensitive blocks but never a reason to refuse one: IPv4 and IPv6
addresses, host:port pairs, SSH targets and e-mail addresses; and long random-looking strings,
which are keys more often than not. Versions, times, ratios and clone URLs are not addresses."""

from __future__ import annotations

import ipaddress
import math
from collections import Counter

from bot.secrets._rule import (
    EMAIL,
    HOST_PORT,
    IP,
    SECRET,
    SSH_TARGET,
    Match,
    Rule,
    compile_re2,
    is_word,
)

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|0\d\d|[1-9]?\d)"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_USER = r"[A-Za-z_][A-Za-z0-9_.+-]*"

# Words before a dotted quad that make it a version, not an address.
_VERSION_WORDS = frozenset(
    ("version", "ver", "release", "build", "firmware", "版本", "rev", "patch", "v", "ver.")
)
# Single words before `:digits` that are not hosts (Step:2, page:12, room:101).
_NOT_HOSTS = frozenset(
    """
    step page room chapter line rule item note part level stage round table row col column
    section figure fig verse act scene ratio score issue ticket pr slide day week
    """.split()  # noqa: SIM905
)


def _alone(match: Match, text: str) -> bool:
    """Not part of a longer dotted number or name: no word character, dot or colon-digit right
    before or after."""
    start, end = match.start(), match.end()
    if start > 0 and (is_word(text[start - 1]) or text[start - 1] in ".:-"):
        return False
    after = text[end : end + 2]
    if after[:1] and (is_word(after[0]) or after[0] == "-"):
        return False
    return not (after[:1] in (".", ":") and after[1:2].isdigit())


def _ipv4(match: Match, text: str) -> bool:
    if not _alone(match, text):
        return False
    words = text[max(0, match.start() - 16) : match.start()].lower().rstrip(" :#").split()
    return not words or words[-1] not in _VERSION_WORDS


def _ipv6(match: Match, text: str) -> bool:
    if not _alone(match, text):
        return False
    address = match.group("address")
    if address.count(":") < 2:
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def _host_port(match: Match, text: str) -> bool:
    if not _alone(match, text):
        return False
    host: str = match.group("host")
    port = int(match.group("port"))
    if port > 65535 or not any(character.isalpha() for character in host):
        return False
    if "." in host:
        return host.rsplit(".", 1)[1].isalpha()
    return host.islower() and host not in _NOT_HOSTS


def _numbered_host(match: Match, text: str) -> bool:
    """user@web1: a machine's name has a number (alice@home is a way of speaking)."""
    after = text[match.end() : match.end() + 2]
    if after[:1] and (is_word(after[0]) or (after[:1] == "." and is_word(after[1:2] or " "))):
        return False
    host: str = match.group("host")
    return not host.startswith("-") and not host.endswith("-")


def _email(match: Match, text: str) -> bool:
    # git@github.com:org/repo.git and ssh://git@github.com/… say where a repository is, not a
    # mailbox.
    if text[max(0, match.start() - 3) : match.start()] == "://":
        return False
    if match.start() > 0 and text[match.start() - 1] == ":":  # a URL's user:password@host
        return False
    after = text[match.end() : match.end() + 2]
    return not (after[:1] == ":" and after[1:2] not in ("", " ") and not after[1:2].isdigit())


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(match: Match, text: str) -> bool:
    """A long run of letters and digits is a secret when it looks random: hex with digits and
    letters, or all of lower, upper and digits over many symbols (paths and words are not)."""
    core = match.group(0).rstrip("=")
    symbols = set(core)
    if symbols <= _HEX:
        return bool(symbols & _DIGITS) and bool(symbols - _DIGITS)
    classes = symbols & _LOWER, symbols & _UPPER, symbols & _DIGITS
    return all(classes) and _entropy(core) >= 4.0


_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _rule(kind: str, pattern: str, placeholder: str, **options: object) -> Rule:
    return Rule(kind, compile_re2(pattern), False, placeholder, **options)  # type: ignore[arg-type]


def address_rules() -> list[Rule]:
    """Rules for addresses and random-looking strings (hidden in sensitive blocks only)."""
    return [
        _rule(
            "an SSH target",
            rf"(?i)(?:ssh|scp|sftp|rsync|mosh|telnet)\s+(?:\S+\s+){{0,6}}?(?P<value>{_USER}@{_LABEL}"
            rf"(?:\.{_LABEL})*)",
            SSH_TARGET,
            group="value",
            word_before=True,
            sign="@",
        ),
        _rule("an SSH target", rf"{_USER}@{_IPV4}(?::\d{{1,5}})?", SSH_TARGET, sign="@"),
        _rule(
            "an SSH target",
            # A machine's name with a number in it (web1, db-03): only those can match.
            rf"{_USER}@(?P<host>[A-Za-z0-9-]*[0-9][A-Za-z0-9-]*)",
            SSH_TARGET,
            word_before=True,
            accept=_numbered_host,
            sign="@",
        ),
        _rule(
            "an e-mail address",
            rf"[A-Za-z0-9._%+-]+@(?:{_LABEL}\.)+[A-Za-z]{{2,24}}",
            EMAIL,
            word_before=True,
            word_after=True,
            accept=_email,
            sign="@",
        ),
        _rule("a host:port pair", rf"{_IPV4}:\d{{1,5}}", HOST_PORT, accept=_ipv4),
        _rule("an IP address", _IPV4, IP, accept=_ipv4),
        _rule(
            "a host:port pair",
            r"\[(?P<address>[0-9A-Fa-f:.]{2,45})\]:\d{1,5}",
            HOST_PORT,
            accept=_ipv6,
            sign=":",
        ),
        _rule(
            "an IP address",
            # An IPv4 tail makes it a mapped address (::ffff:10.11.12.13).
            r"(?P<address>[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}){0,3})",
            IP,
            accept=_ipv6,
            sign="::",
        ),
        _rule(
            "an IP address",
            r"(?P<address>(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4})",
            IP,
            accept=_ipv6,
        ),
        _rule(
            "a host:port pair",
            rf"(?P<host>{_LABEL}(?:\.{_LABEL})*):(?P<port>\d{{2,5}})",
            HOST_PORT,
            accept=_host_port,
            sign=":",
        ),
        _rule(
            "a long random-looking string",
            r"[A-Za-z0-9+/_-]{32,}={0,2}",
            SECRET,
            word_before=True,
            accept=_random_looking_alone,
        ),
    ]


def _random_looking_alone(match: Match, text: str) -> bool:
    start, end = match.start(), match.end()
    if start > 0 and text[start - 1] in "+/-.":
        return False
    if end < len(text) and (is_word(text[end]) or text[end] in "+/=-"):
        return False
    return _random_looking(match, text)
