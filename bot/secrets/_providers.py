"""Provider credentials as detect-secrets (Yelp) knows them: its plugins' own patterns, run by RE2.

detect-secrets keeps one plugin per provider, maintained as providers change their formats; we take
each regex plugin's `denylist` as it ships. Its patterns are written for Python's backtracking
engine, so a lookaround at either end is turned into our edge check (RE2 runs no lookarounds), and
a repeat beyond RE2's bound of 1,000 is capped there. Plugins that judge by entropy or keywords
(built for source files, noisy on prose) and the public-IP plugin (addresses are ours) are left out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bot.secrets._rule import TOKEN, Rule, compile_re2

log = logging.getLogger(__name__)

# Not used: entropy and keyword plugins (every word of prose is "high entropy"; the keyword plugin
# reads source code), the public-IP plugin (addresses are hidden by our own rules), and the IBM
# and SoftLayer keyword plugins, whose generic words ("key", "pass", "token") our phrasing rules
# read in prose and in Chinese.
_LEFT_OUT = frozenset(
    {
        "Base64HighEntropyString",
        "HexHighEntropyString",
        "KeywordDetector",
        "IPPublicDetector",
        # Keyword plugins whose value check is a lookahead inside the pattern (RE2 runs none);
        # our secret-word rules read `ibm_cloud_iam_key = …` and `cos_secret_access_key: …`.
        "IbmCloudIamDetector",
        "IbmCosHmacDetector",
    }
)

# detect-secrets' secret types, in words for replies ("looks like a GitHub token").
_NAMES = {
    "Artifactory Credentials": "an Artifactory token",
    "AWS Access Key": "an AWS access key",
    "Azure Storage Account access key": "an Azure storage key",
    "Basic Auth Credentials": "a URL with a password",
    "Cloudant Credentials": "a Cloudant credential",
    "Discord Bot Token": "a Discord bot token",
    "GitHub Token": "a GitHub token",
    "GitLab Token": "a GitLab token",
    "IBM Cloud IAM Key": "an IBM Cloud key",
    "IBM COS HMAC Credentials": "an IBM COS key",
    "JSON Web Token": "a JSON web token",
    "Mailchimp Access Key": "a Mailchimp key",
    "NPM tokens": "an npm token",
    "OpenAI Token": "an OpenAI API key",
    "Private Key": "a private key",
    "PyPI Token": "a PyPI token",
    "SendGrid API Key": "a SendGrid key",
    "Slack Token": "a Slack token",
    "SoftLayer Credentials": "a SoftLayer credential",
    "Square OAuth Secret": "a Square secret",
    "Stripe Access Key": "a Stripe key",
    "Telegram Bot Token": "a Telegram bot token",
    "Twilio API Key": "a Twilio key",
}

# Lookarounds at the ends of detect-secrets' patterns, and the edge check each one means.
_LEADING = ("(?:(?<=\\W)|(?<=^))", "(?<![\\w.])", "(?<!\\w)")
_TRAILING = ("(?!\\w)",)
_BIG_REPEAT = re.compile(r"\{(\d+),(\d{4,})\}")


@dataclass(frozen=True, slots=True)
class Translated:
    """A detect-secrets pattern as RE2 runs it, with the edge checks its lookarounds meant."""

    pattern: str
    word_before: bool
    word_after: bool


def translate(pattern: str, flags: int) -> Translated:
    """detect-secrets' pattern for RE2: inline flags, no lookaround at either end, repeats
    capped."""
    word_before = word_after = False
    for lead in _LEADING:
        if pattern.startswith(lead):
            pattern, word_before = pattern[len(lead) :], True
    for trail in _TRAILING:
        if pattern.endswith(trail):
            pattern, word_after = pattern[: -len(trail)], True
    pattern = _BIG_REPEAT.sub(lambda m: "{" + m.group(1) + ",1000}", pattern)
    if flags & re.VERBOSE:
        pattern = _unverbose(pattern)
    if flags & re.IGNORECASE:
        pattern = "(?i)" + pattern
    return Translated(pattern, word_before, word_after)


def _unverbose(pattern: str) -> str:
    """A verbose pattern without its layout (spaces and # comments outside character classes)."""
    out: list[str] = []
    in_class = escaped = comment = False
    for character in pattern:
        if comment:
            comment = character != "\n"
        elif escaped:
            out.append(character)
            escaped = False
        elif character == "\\":
            out.append(character)
            escaped = True
        elif in_class:
            out.append(character)
            in_class = character != "]"
        elif character == "[":
            out.append(character)
            in_class = True
        elif character == "#":
            comment = True
        elif not character.isspace():
            out.append(character)
    return "".join(out)


def provider_rules() -> list[Rule]:
    """A rule for each pattern of detect-secrets' provider plugins that RE2 can run."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    rules: list[Rule] = []
    plugins: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in plugins.items():
        if plugin.__name__ in _LEFT_OUT or not issubclass(plugin, RegexBasedDetector):
            continue
        kind = _NAMES.get(secret_type, f"a {secret_type}")
        denylist: Iterable[re.Pattern[str]] = plugin.denylist  # type: ignore[assignment]
        for denied in denylist:
            rule = _rule(kind, denied.pattern, denied.flags)
            if rule is not None:
                rules.append(rule)
    return rules


def _rule(kind: str, pattern: str, flags: int) -> Rule | None:
    translated = translate(pattern, flags)
    try:
        compiled = compile_re2(translated.pattern)
    except Exception:  # re2.error: a construct RE2 does not run; the rest still serve
        log.debug("detect-secrets pattern not usable with RE2: %s", kind)
        return None
    return Rule(
        kind,
        compiled,
        credential=True,
        placeholder=TOKEN if "token" in kind else "[secret]",
        word_before=translated.word_before,
        word_after=translated.word_after,
        whole_token=kind != "a private key",
        trim=True,
    )
