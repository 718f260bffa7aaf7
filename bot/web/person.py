"""A person's data on the web page: who a typed `platform:id` names (only a person the bot could
have met: a platform it serves, an id of the form that platform gives), the page of that person
other pages link to, and the words each kind of their data is shown with."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.people import READ_PLATFORMS, ScopeKind, direct_key, read_scope
from bot.web.views import segment

SHOWN_CHARS = 80  # of a mistyped person, echoed in the message about it
# What each kind of PersonData.counts is, as the operator reads it: what a forget does with it.
KINDS = {
    "blocks": "Pinned blocks: in their direct chat, and their personal blocks in groups",
    "versions": "Earlier versions of those blocks",
    "turns": "Messages of conversations: what they said, and the bot's answers in their "
    "direct chat",
    "usage": "Days of usage (a forget folds them into anonymous totals, so group budgets stay "
    "right)",
    "proposals": "Proposals they made, or decided (a decided one stays the group's, naming "
    '"a former member")',
    "suggestions": "Pin suggestions made to them",
    "audit": "Audit entries of shared blocks and group settings they changed (a forget keeps "
    'them, naming "a former member")',
    "settings": "Groups' and topics' own settings naming them a shared admin or a strong user "
    "(a forget takes them out, as a setting change)",
}
# How each platform's people are written, for the message about a mistyped one.
ID_FORMS = {
    "console": "console:<id> (the id `pinbot console --user` was given: no spaces or ':')",
    "feishu": "feishu:<open_id> (ou_…)",
    "telegram": "telegram:<user id> (a positive whole number)",
}
HOW = (
    "Write a person as platform:id, with the platform and id /whoami shows them: "
    + ", ".join(ID_FORMS[platform] for platform in sorted(ID_FORMS))
    + "."
)


@dataclass(frozen=True)
class Person:
    """One person of one platform, as the web page names them."""

    platform: str
    user: str

    def __str__(self) -> str:
        return f"{self.platform}:{self.user}"

    @property
    def page(self) -> str:
        """The address of their page."""
        return person_page(self.platform, self.user)


def read_person(typed: str) -> Person | str:
    """The person typed as `platform:id` (the platform in any case), or what is wrong with it:
    an unknown platform, or an id of a form that platform never gives (keys.read_scope)."""
    text = typed.strip()
    shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
    platform, colon, user = text.partition(":")
    platform = platform.casefold()
    if not colon or not platform or not user:
        return f"{shown!r} is not a person. {HOW}"
    if platform not in READ_PLATFORMS:
        known = ", ".join(sorted(READ_PLATFORMS))
        return f"There is no platform {platform[:SHOWN_CHARS]!r} here (only {known}). {HOW}"
    scope = read_scope(direct_key(platform, user))
    if scope is None or scope.kind is not ScopeKind.DIRECT or scope.owner != user:
        return f"{shown!r} is not a {platform} person: write {ID_FORMS[platform]}."
    return Person(platform, user)


def person_page(platform: str, user: str) -> str:
    """The page of the person user of platform, or '' when that is no person the bot reads
    (an operator's name in the audit log, "a former member", the anonymous usage total)."""
    found = read_person(f"{platform}:{user}")
    return f"/person?user={segment(str(found))}" if isinstance(found, Person) else ""


def scope_person_page(scope: str) -> str:
    """The page of the person whose blocks scope holds (a DM's owner, a member in a group), or
    '' for a group's shared scope and any key the bot does not read."""
    parsed = read_scope(scope)
    if parsed is None or parsed.kind is ScopeKind.SHARED:
        return ""
    owner = parsed.owner if parsed.kind is ScopeKind.DIRECT else parsed.sender
    return person_page(parsed.platform, owner or "")
