"""A person's data is theirs: everything the bot holds about one person of one platform, handed
to them as one JSON file (`/export me`, `pinbot export --user`) or removed for good (`/forget me`,
`pinbot forget --user`): their blocks through the one road, the rest in one transaction, then
made unreadable on the disk as far as the database can."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import Clock, utc_now
from bot.core.blocks import BlockOps, Refused
from bot.core.commands.setting_words import FORMER, PEOPLE_SETTINGS, stored_value
from bot.core.people import (
    ScopeKind,
    delivery_chat,
    direct_key,
    group_key_of,
    member_scope,
    parse_scope,
    sender_session,
    topic_of,
)
from bot.core.replies import Button, Document, Reply
from bot.secrets import redact
from storage import Store
from storage.errors import Conflict
from storage.models import (
    Author,
    Block,
    BlockChange,
    Channel,
    Person,
    Seen,
    Version,
    Wanted,
    label_key,
)
from storage.settings import SettingChange

EXPORT_FORMAT = "pinbot-person-export"
EXPORT_VERSION = 1
FORGET = Author("forget", Channel.FORGET)
# The rate limiters' buckets (bot.core.entry.pinbot): per sender, and per DM for unreadable ones.
BUCKETS = ("pin:{platform}:{user}", "turn:{platform}:{user}", "unreadable:{direct}")
COUNTED = (
    "blocks",
    "versions",
    "turns",
    "usage",
    "proposals",
    "suggestions",
    "audit",
    "settings",
)
_ATTEMPTS = 5  # reads of the settings naming a person, while others change them at once


@dataclass(frozen=True)
class Forgotten:
    """What a forget removed, by kind; refused: why it removed nothing (a block the review kept)."""

    removed: dict[str, int]
    refused: str | None = None


def sent_by(user: str) -> Callable[[str], bool]:
    """Whether a recorded update's payload (as an adapter recorded it) was sent by user: a
    Telegram update whose `from` (of its message, or of a tap) is them, a Feishu event whose
    sender's open_id is them."""

    def sent(payload: str) -> bool:
        try:
            data = json.loads(payload)
        except ValueError:
            return False
        return _from_user(data, user)

    return sent


def _from_user(data: Any, user: str) -> bool:
    if isinstance(data, list):
        return any(_from_user(item, user) for item in data)
    if not isinstance(data, dict):
        return False
    sender = data.get("from")
    if isinstance(sender, dict) and str(sender.get("id")) == user:
        return True
    if data.get("open_id") == user:
        return True
    return any(_from_user(value, user) for value in data.values() if isinstance(value, dict))


class PersonData:
    """Finds, hands over and removes everything held about one person."""

    def __init__(self, store: Store, ops: BlockOps, clock: Clock = utc_now) -> None:
        self._store = store
        self._ops = ops
        self._clock = clock

    def today(self) -> str:
        """Today's date by the clock, as a file name carries it."""
        return self._clock().date().isoformat()

    async def person(self, platform: str, user: str) -> Person:
        """Where user's data is: their scopes, their own sessions, their groups, buckets."""
        direct = direct_key(platform, user)
        # Their keys end so: a member's scope and a sender's session, under any group.
        member, own = member_scope("", user), sender_session("", user)
        found = await self._store.keys_ending(platform, (direct, member, own))
        scopes = [direct] + [
            key
            for key in found
            if (scope := parse_scope(key)) is not None
            and scope.kind is ScopeKind.MEMBER
            and scope.sender == user
        ]
        sessions = [direct] + [key for key in found if key.endswith(own)]
        spoken = await self._store.spoken_in(platform, user)
        groups = {g for key in (*scopes, *sessions, *spoken) if (g := group_key_of(key))}
        buckets = tuple(b.format(platform=platform, user=user, direct=direct) for b in BUCKETS)
        chats = (delivery_chat(platform, user),)
        return Person(
            platform, user, tuple(scopes), tuple(sessions), tuple(sorted(groups)), buckets, chats
        )

    async def export(self, platform: str, user: str) -> dict[str, Any]:
        """Everything held about user, as the export file holds it (see docs/user-guide.md):
        their blocks in every scope, whole (sensitive ones too: they are theirs), with their
        versions, their turns, usage, proposals, suggestions and audit entries."""
        person = await self.person(platform, user)
        blocks = await self._store.blocks(person.scopes)
        versions = {
            scope: [
                _version(v)
                for label in await self._store.labels_with_versions(scope)
                for v in await self._store.versions(scope, label)
            ]
            for scope in person.scopes
        }
        records = await self._store.person_records(person)
        named = await self._store.settings_naming(platform, user, PEOPLE_SETTINGS)
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": self._clock().isoformat(),
            "platform": platform,
            "user": user,
            "blocks": [_block(b) for b in blocks],
            "versions": {scope: found for scope, found in versions.items() if found},
            **records,
            # The groups (and topics) whose own settings name them a shared admin or a
            # strong user.
            "settings": [
                {"group": group_key_of(place), "topic": topic_of(place), "setting": name}
                for place, name, _ in named
            ],
        }

    async def counts(self, platform: str, user: str) -> dict[str, int]:
        """How much is held about user, by kind (what a forget would remove)."""
        document = await self.export(platform, user)
        counts = {kind: len(document[kind]) for kind in COUNTED if kind != "versions"}
        counts["versions"] = sum(len(found) for found in document["versions"].values())
        return {kind: counts[kind] for kind in COUNTED}

    async def forget(self, platform: str, user: str) -> Forgotten:
        """Remove everything held about user: their blocks as block changes on the one road
        (reviewed with the system's rights), their id out of every group's and topic's admins
        and strong users as setting changes (a version and an audit entry each, by `forget`),
        then in one transaction the rest (see storage.people), then the deleted bytes made
        unreadable as far as the database can. In what stays a group's (shared blocks they
        changed, audit entries, decisions, setting changes) they are named "a former member";
        shared blocks keep their content. Cannot be undone."""
        person = await self.person(platform, user)
        blocks = await self._store.blocks(person.scopes)
        changes = _removals(blocks)
        if changes:
            done = await self._ops.commit_all(changes)
            if isinstance(done, dict):
                refusal: Refused = next(iter(done.values()))
                return Forgotten({}, refusal.reason)
        named = await self._out_of_settings(platform, user)
        removed = await self._store.forget_person(
            person, former=FORMER, sent_by=sent_by(user), people_settings=PEOPLE_SETTINGS
        )
        removed["settings"] = named
        await self._store.reclaim()
        # The removals' own versions went too; the person is told of those they had.
        removed["versions"] = max(0, removed["versions"] - len(blocks))
        return Forgotten({"blocks": len(blocks), **removed})

    async def _out_of_settings(self, platform: str, user: str) -> int:
        """Take user's id out of every group's and topic's list settings (admins, strong),
        each as a setting change by `forget`, read again when one changed meanwhile; how many
        lists named them."""
        taken = 0
        for _ in range(_ATTEMPTS):
            found = await self._store.settings_naming(platform, user, PEOPLE_SETTINGS)
            if not found:
                break
            for place, name, value in found:
                listed = stored_value(value)
                rest = sorted(str(p) for p in listed if str(p) != user)
                after = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else None
                group = group_key_of(place) or place
                change = SettingChange(
                    place, group, {name: after}, FORGET, {name: value}, uuid.uuid4().hex
                )
                try:
                    await self._store.apply_settings(change, now=self._clock())
                except Conflict:
                    continue  # changed meanwhile: read again
                taken += 1
        return taken


def _removals(blocks: Sequence[Block]) -> list[BlockChange]:
    """Every block's removal, one change per scope, each only if still as read."""
    by_scope: dict[str, list[Block]] = {}
    for block in blocks:
        by_scope.setdefault(block.scope, []).append(block)
    return [
        BlockChange(
            scope,
            tuple(Wanted(b.label, None) for b in found),
            FORGET,
            {label_key(b.label): Seen(b, None) for b in found},
            False,
            mask=redact,
        )
        for scope, found in by_scope.items()
    ]


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _block(block: Block) -> dict[str, Any]:
    return {
        "scope": block.scope,
        "label": block.label,
        "content": block.content,
        "level": block.level.value,
        "state": block.state.value,
        "priority": block.priority,
        "sensitive": block.sensitive,
        "triggers": list(block.triggers),
        "ends_at": _time(block.ends_at),
        "created_at": _time(block.created_at),
        "updated_at": _time(block.updated_at),
    }


def _version(version: Version) -> dict[str, Any]:
    before = version.before
    return {
        "label": version.label,
        "kind": version.kind.value,
        "detail": version.detail,
        "at": _time(version.at),
        "channel": version.channel.value,
        "content_before": None if before is None else before.content,
    }


FORGET_TAP = "pinbot:forget:me"  # the data of the button confirming a /forget me
PERSON_USAGE = (
    "Send /export me for everything I hold about you as a file, or /forget me to have it "
    "removed (in a direct chat with me)."
)
IN_DIRECT = "Your data goes only to you: send /{command} me in a direct chat with me."
KINDS = {
    "blocks": ("pinned block", "pinned blocks"),
    "versions": ("earlier version", "earlier versions"),
    "turns": ("message of our conversations", "messages of our conversations"),
    "usage": ("day of usage", "days of usage"),
    "proposals": ("proposal", "proposals"),
    "suggestions": ("pin suggestion", "pin suggestions"),
    "audit": ("audit entry", "audit entries"),
    "settings": ("group setting naming you", "group settings naming you"),
}


def counted(counts: dict[str, int]) -> str:
    """Counts by kind as a person reads them: "2 pinned blocks, 1 proposal" (or "nothing")."""
    parts = [f"{n:,} {KINDS[kind][n != 1]}" for kind, n in counts.items() if n and kind in KINDS]
    return ", ".join(parts) or "nothing"


class PersonCommands:
    """`/export me` and `/forget me` (confirmed by `/forget me confirm` or its button): only in
    a direct chat, only about the one who asks."""

    def __init__(self, data: PersonData) -> None:
        self._data = data

    async def export_me(self, platform: str, user: str | None, direct: bool, rest: str) -> Reply:
        """The sender's data as one JSON file, or why not."""
        if rest.strip().casefold() != "me":
            return Reply.refused(PERSON_USAGE)
        if not direct or user is None:
            return Reply.refused(IN_DIRECT.format(command="export"))
        document = await self._data.export(platform, user)
        data = json.dumps(document, ensure_ascii=False, indent=2).encode()
        day = self._data.today()
        name = f"pinbot-{platform}-{_file_part(user)}-{day}.json"
        counts = {kind: len(document[kind]) for kind in COUNTED if kind != "versions"}
        return Reply(
            f"Everything I hold about you ({counted(counts)}) is in {name}. It is yours: "
            "sensitive blocks are in it whole.",
            document=Document(name, data),
        )

    async def forget_me(self, platform: str, user: str | None, direct: bool, rest: str) -> Reply:
        """What /forget me would remove, with its confirmation; or, confirmed, the removal."""
        words = rest.casefold().split()
        if words not in (["me"], ["me", "confirm"]):
            return Reply.refused(PERSON_USAGE)
        if not direct or user is None:
            return Reply.refused(IN_DIRECT.format(command="forget"))
        if words == ["me"]:
            counts = await self._data.counts(platform, user)
            return Reply(
                f"This removes everything I hold about you: {counted(counts)}. Shared blocks "
                "you changed keep their content, and their history names you "
                f'"{FORMER}". It cannot be undone. To go ahead, tap the button or send '
                "/forget me confirm.",
                buttons=(Button("Forget everything about me", FORGET_TAP),),
            )
        return await self.forget(platform, user)

    async def forget(self, platform: str, user: str) -> Reply:
        """Remove everything held about user; the reply says what went."""
        forgotten = await self._data.forget(platform, user)
        if forgotten.refused is not None:
            return Reply.refused(f"Nothing was removed: {forgotten.refused}")
        return Reply(
            f"Done: I removed everything I held about you ({counted(forgotten.removed)}). "
            "If you write to me again, I start from nothing."
        )


def _file_part(text: str) -> str:
    """text as it may stand in a file name (letters, digits, '-', '_')."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:64]
