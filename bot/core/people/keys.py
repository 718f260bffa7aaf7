"""Session and scope keys, and who speaks where: the one place their grammar is built, parsed and
classified, and the platform-free description of the conversation one incoming message comes from.

Session keys follow OpenClaw's form: `<platform>:direct:<user>`, `<platform>:group:<chat>`,
`<platform>:group:<chat>:topic:<thread>`, and `…:sender:<id>` where history is kept per sender.
Scopes (where blocks live) are a DM user's session key, a group's session key (its shared
blocks), or `<group session key>::u:<sender>` (a member's personal blocks in that group).
A leading `agent:<name>:` is accepted and ignored wherever a key is read.

`read_scope` is the stricter reading of what the bot itself writes: a platform it serves and ids
of the form that platform gives (Telegram: a user is a positive integer, a group a negative
one, at most 2**53 - 1 either way, no leading zeros or '+'; Feishu: chats `oc_…`, users `ou_…`;
the console: the ids its command line accepts). Anything else names a scope no request reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

DIRECT = "direct"
GROUP = "group"
MEMBER_MARK = "::u:"
TOPIC_MARK = ":topic:"
SENDER_MARK = ":sender:"
_AGENT_PREFIX = re.compile(r"^agent:[^:]+:")
_PART = r"[^:\s]+"
_SCOPE = re.compile(
    rf"^(?P<platform>{_PART}):(?:{DIRECT}:(?P<user>{_PART})"
    rf"|{GROUP}:(?P<chat>{_PART})(?:{re.escape(MEMBER_MARK)}(?P<sender>{_PART}))?)$"
)


TELEGRAM_MAX_ID = 2**53 - 1  # Telegram: "at most 52 significant bits"
_TELEGRAM_USER = re.compile(r"[1-9][0-9]{0,15}")
_TELEGRAM_GROUP = re.compile(r"-[1-9][0-9]{0,15}")
# A Feishu DM without the sender's open_id is keyed by its chat (oc_), as conversation.py does.
_FEISHU_USER = re.compile(r"o[uc]_[0-9A-Za-z_-]{1,64}")
_FEISHU_CHAT = re.compile(r"oc_[0-9A-Za-z_-]{1,64}")
# The console's command line takes any id without ':' or spaces; control characters are left
# out too (none can be typed into a terminal argument that a page would show as it is).
_CONSOLE_ID = re.compile(r"[^\s:\x00-\x1f\x7f]{1,128}")
# platform → (the form of a user id: a DM's owner, a member; the form of a group's chat id)
_ID_FORMS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "console": (_CONSOLE_ID, _CONSOLE_ID),
    "feishu": (_FEISHU_USER, _FEISHU_CHAT),
    "telegram": (_TELEGRAM_USER, _TELEGRAM_GROUP),
}
READ_PLATFORMS = tuple(_ID_FORMS)  # the platforms whose scopes the bot reads


def console_id_ok(text: str) -> bool:
    """Whether text is an id `pinbot console` may speak as (a user, group or topic): what its
    scope keys can hold and the web page and import read back."""
    return _CONSOLE_ID.fullmatch(text) is not None


class ScopeKind(StrEnum):
    """The three kinds of scope a block can live in."""

    DIRECT = "direct"  # one user's DM blocks
    SHARED = "shared"  # a group's shared blocks
    MEMBER = "member"  # one member's personal blocks in one group


@dataclass(frozen=True)
class Scope:
    """A parsed scope key."""

    key: str
    platform: str
    kind: ScopeKind
    owner: str  # the DM user, or the group's chat id
    sender: str | None = None  # the member, for MEMBER scopes

    @property
    def group_key(self) -> str | None:
        """The group session key of a group scope, None for a DM scope."""
        return None if self.kind is ScopeKind.DIRECT else group_key(self.platform, self.owner)


def strip_agent_prefix(key: str) -> str:
    """Drop a leading `agent:<name>:` as written in OpenClaw configs."""
    return _AGENT_PREFIX.sub("", key.strip(), count=1)


def direct_key(platform: str, user: str) -> str:
    """A DM's session key, which is also that user's DM scope."""
    return chat_key(platform, DIRECT, user)


def chat_key(platform: str, kind: str, chat: str | None) -> str:
    """The session key of a chat of any kind (`direct`, `group`, `channel`, …)."""
    return f"{platform}:{kind}:{chat}"


def group_key(platform: str, chat: str) -> str:
    """A group's session key, which is also its shared scope."""
    return chat_key(platform, GROUP, chat)


def topic_key(group: str, topic: str) -> str:
    """The session key of one forum topic of a group."""
    return f"{group}{TOPIC_MARK}{topic}"


def member_scope(group: str, sender: str) -> str:
    """A member's personal scope inside a group (also the form of group-limited allow entries)."""
    return f"{group}{MEMBER_MARK}{sender}"


def sender_session(session: str, sender: str) -> str:
    """The session key of one sender's own history inside a group conversation."""
    return f"{session}{SENDER_MARK}{sender}"


def group_key_of(key: str) -> str | None:
    """The `<platform>:group:<chat>` prefix of a group session or scope key; None otherwise."""
    parts = strip_agent_prefix(key).split(":")
    if len(parts) >= 3 and parts[1] == GROUP and parts[0] and parts[2]:
        return ":".join(parts[:3])
    return None


def topic_of(key: str) -> str | None:
    """The topic id of a topic's session key (`<group>:topic:<id>`); None for any other key."""
    group = group_key_of(key)
    bare = strip_agent_prefix(key)
    if group is None or not bare.startswith(f"{group}{TOPIC_MARK}"):
        return None
    return bare.removeprefix(f"{group}{TOPIC_MARK}")


def split_member_entry(text: str) -> tuple[str, str] | None:
    """`<group session key>::u:<sender>` → (group session key, sender); None if not that form."""
    if MEMBER_MARK not in text:
        return None
    key, _, sender = strip_agent_prefix(text).rpartition(MEMBER_MARK)
    group = group_key_of(key)
    return (group, sender) if group and sender else None


def parse_scope(key: str) -> Scope | None:
    """A scope key read strictly (after dropping `agent:<name>:`); None if it is not one."""
    bare = strip_agent_prefix(key)
    match = _SCOPE.match(bare)
    if match is None:
        return None
    platform, user, chat, sender = match.group("platform", "user", "chat", "sender")
    if user is not None:
        return Scope(bare, platform, ScopeKind.DIRECT, user)
    if sender is not None:
        return Scope(bare, platform, ScopeKind.MEMBER, chat, sender)
    return Scope(bare, platform, ScopeKind.SHARED, chat)


def _id_read(form: re.Pattern[str], text: str) -> bool:
    if form.fullmatch(text) is None:
        return False
    return form not in (_TELEGRAM_USER, _TELEGRAM_GROUP) or abs(int(text)) <= TELEGRAM_MAX_ID


def read_scope(key: str, *, agent_prefix: bool = False) -> Scope | None:
    """The scope key exactly as the bot itself writes it, or None: a platform the bot serves,
    ids of the form that platform gives, nothing around them (with agent_prefix, a leading
    `agent:<name>:` is dropped first, as configs write it). Its key round-trips: the Scope's
    key is the key given (without that prefix)."""
    bare = _AGENT_PREFIX.sub("", key, count=1) if agent_prefix else key
    scope = parse_scope(bare)
    if scope is None or scope.key != bare:
        return None
    forms = _ID_FORMS.get(scope.platform)
    if forms is None:
        return None
    user, chat = forms
    if scope.kind is ScopeKind.DIRECT:
        return scope if _id_read(user, scope.owner) else None
    if not _id_read(chat, scope.owner):
        return None
    if scope.sender is not None and not _id_read(user, scope.sender):
        return None
    return scope


def is_shared_scope(key: str) -> bool:
    """Whether key is a group's shared scope (whose changes are audited)."""
    scope = parse_scope(key)
    return scope is not None and scope.kind is ScopeKind.SHARED


def is_group_scope(key: str) -> bool:
    """Whether key is a scope inside a group: shared, or a member's (visible to the group)."""
    scope = parse_scope(key)
    return scope is not None and scope.kind is not ScopeKind.DIRECT


def platform_of(key: str) -> str:
    """The platform a session or scope key belongs to."""
    return strip_agent_prefix(key).partition(":")[0]


def after_platform(platform: str) -> str:
    """The smallest key that sorts after every key of platform (bytewise: ';' follows ':')."""
    return f"{platform};"


def group_prefix(platform: str) -> str:
    """The prefix of every group scope (shared and members') of a platform."""
    return f"{platform}:{GROUP}:"


def direct_prefix(platform: str) -> str:
    """The prefix of every DM scope of a platform."""
    return f"{platform}:{DIRECT}:"


def members_prefix(group: str) -> str:
    """The prefix of the personal scopes of a group's members."""
    return f"{group}{MEMBER_MARK}"


def delivery_chat(platform: str, chat: str) -> str:
    """The key a platform's chat has in the inbox, where its updates wait in order."""
    return f"{platform}:{chat}"


def group_children(group: str) -> tuple[str, str]:
    """The key prefixes under a group: of its members' scopes, and of its sub-sessions (topics
    and per-sender histories)."""
    return members_prefix(group), f"{group}:"


class ChatKind(StrEnum):
    """The kinds of chat a platform event can come from."""

    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Conversation:
    """The conversation a message belongs to and who sent it.

    `sender_aliases` holds further ids of the same sender (Feishu's user_id and union_id) that
    allowlist entries may name; scopes are keyed by `sender_id` alone.
    """

    platform: str
    kind: ChatKind
    chat_id: str | None
    sender_id: str | None
    topic_id: str | None = None
    sender_aliases: tuple[str, ...] = field(default=())
    sender_id_kinds: tuple[str, ...] = ()  # names of sender_ids, e.g. ("open_id", "user_id")

    @property
    def session_key(self) -> str:
        """The conversation's address, in OpenClaw's form."""
        if self.kind is ChatKind.DIRECT:
            return direct_key(self.platform, self.sender_id or self.chat_id or "")
        base = chat_key(self.platform, self.kind.value, self.chat_id)
        return topic_key(base, self.topic_id) if self.topic_id else base

    @property
    def group_session_key(self) -> str | None:
        """`<platform>:group:<chat>` for a group with an id, else None."""
        if self.kind is ChatKind.GROUP and self.chat_id:
            return group_key(self.platform, self.chat_id)
        return None

    @property
    def sender_ids(self) -> tuple[str, ...]:
        """Every id this sender is known by, the scope id first."""
        if not self.sender_id:
            return ()
        return (self.sender_id, *(alias for alias in self.sender_aliases if alias))

    @property
    def personal_scope(self) -> str | None:
        """The sender's own scope here: their DM scope, or their personal scope in this group."""
        if not self.sender_id:
            return None
        if self.kind is ChatKind.DIRECT:
            return direct_key(self.platform, self.sender_id)
        group = self.group_session_key
        return member_scope(group, self.sender_id) if group else None

    @property
    def shared_scope(self) -> str | None:
        """The group's shared scope, or None outside groups."""
        return self.group_session_key
