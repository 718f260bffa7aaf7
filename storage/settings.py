"""A group's own settings (and a forum topic's), set from the chat: each name's value per place
(a group's key or a topic's), written with a version of what it was (for undo) and an entry in
the group's audit trail, in one transaction, only if every value is still as the change saw it.
Read on every message of the group, so a value set through one worker applies at another's
next update."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from storage import rows
from storage.dialect import Database, Executor, Step
from storage.errors import Conflict
from storage.models import Author, ChangeKind
from storage.rows import dt, prefix_range, ts

_VERSION_COLUMNS = "op, place, name, before, after, actor, channel, at"
_VERSIONS = f"SELECT id, {_VERSION_COLUMNS}, undone_by FROM group_setting_versions"
_VERSION_INSERT = (
    f"INSERT INTO group_setting_versions ({_VERSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class SettingChange:
    """Values a place's settings should take (None: back to what the config says), who makes
    the change, and each name's value as the change was decided against (None: unset): the
    store refuses the change when any of them differs now. group is the group's key: its
    audit trail records the change, a topic's too."""

    place: str
    group: str
    values: Mapping[str, str | None]
    by: Author
    seen: Mapping[str, str | None]
    op: str


@dataclass(frozen=True, slots=True)
class SettingVersion:
    """One name's change at a place: its value before and after (None: unset), who, when;
    undone_by names the undo that reverted it."""

    id: int
    op: str
    place: str
    name: str
    before: str | None
    after: str | None
    actor: str
    channel: str
    at: datetime
    undone_by: str | None = None


def group_settings_forgotten(group: str, topics_prefix: str) -> list[tuple[str | None, Step]]:
    """The statements forgetting a group's settings and its topics' (their keys start with
    topics_prefix), with their versions (counted as "settings")."""
    places = "(place = ? OR substr(place, 1, length(?)) = ?)"
    args = (group, topics_prefix, topics_prefix)
    return [
        ("settings", Step(f"DELETE FROM group_settings WHERE {places}", args)),
        (None, Step(f"DELETE FROM group_setting_versions WHERE {places}", args)),
    ]


class SettingsStore(Protocol):
    """The settings groups and topics give themselves."""

    _db: Database

    async def settings_of(self, places: Sequence[str]) -> dict[str, dict[str, str]]:
        """Each place's set values by name (places with none are absent)."""
        if not places:
            return {}
        found: dict[str, dict[str, str]] = {}
        for place, name, value in await self._db.fetch(
            "SELECT place, name, value FROM group_settings WHERE place IN (?*)", list(places)
        ):
            found.setdefault(place, {})[name] = value
        return found

    async def settings_under(self, group: str, topics_prefix: str) -> dict[str, dict[str, str]]:
        """A group's set values and its topics' (their keys start with topics_prefix), by
        place (places with none are absent): what the web page shows of a group."""
        low, high = prefix_range(topics_prefix)
        found: dict[str, dict[str, str]] = {}
        for place, name, value in await self._db.fetch(
            "SELECT place, name, value FROM group_settings WHERE place = ? OR "
            "(place >= ? AND place < ?) ORDER BY place, name",
            *(group, low, high),
        ):
            if place == group or place.startswith(topics_prefix):
                found.setdefault(place, {})[name] = value
        return found

    async def apply_settings(self, change: SettingChange, *, now: datetime) -> list[str]:
        """Write change (the names whose value it changes, with their versions and audit
        entries) in one transaction; Conflict when a value is no longer as seen. Returns the
        names changed (none: every value already as asked)."""
        return await self._apply_settings(change, now, None)

    async def setting_versions(self, place: str, limit: int = 50) -> list[SettingVersion]:
        """A place's setting changes, newest first."""
        found = await self._db.fetch(
            f"{_VERSIONS} WHERE place = ? ORDER BY id DESC LIMIT ?",
            place,
            limit,
        )
        return [_version(row) for row in found]

    async def last_setting_operation(self, place: str) -> list[SettingVersion]:
        """The versions of the place's newest operation an undo may revert (not an undo
        itself, not undone already; none when there is none)."""
        op = await self._db.fetchval(
            "SELECT op FROM group_setting_versions WHERE place = ? AND channel != 'undo' "
            "AND undone_by IS NULL ORDER BY id DESC LIMIT 1",
            place,
        )
        if op is None:
            return []
        found = await self._db.fetch(
            f"{_VERSIONS} WHERE place = ? AND op = ? ORDER BY id",
            place,
            op,
        )
        return [_version(row) for row in found]

    async def undo_settings(
        self, change: SettingChange, undone: str, *, now: datetime
    ) -> list[str]:
        """apply_settings for an undo of operation undone, which it marks undone in the same
        transaction (a second undo then reverts the operation before)."""
        return await self._apply_settings(change, now, undone)

    async def _apply_settings(
        self, change: SettingChange, now: datetime, undone: str | None
    ) -> list[str]:
        async with self._db.transaction(f"settings:{change.place}") as tx:
            current = await _values(tx, change.place)
            if any(current.get(name) != seen for name, seen in change.seen.items()):
                raise Conflict(f"the settings of {change.place} changed since they were read")
            changed = [n for n, v in change.values.items() if current.get(n) != v]
            await _write(tx, change, current, changed, now)
            if undone is not None:
                await tx.execute(
                    "UPDATE group_setting_versions SET undone_by = ? WHERE place = ? AND op = ?",
                    change.op,
                    change.place,
                    undone,
                )
            return changed


async def _values(tx: Executor, place: str) -> dict[str, str]:
    found = await tx.fetch("SELECT name, value FROM group_settings WHERE place = ?", place)
    return {name: value for name, value in found}


async def _write(
    tx: Executor,
    change: SettingChange,
    current: Mapping[str, str],
    changed: Sequence[str],
    now: datetime,
) -> None:
    """The statements of a change's names that differ: the value, its version, its audit
    entry (kind `setting`, the name as the label, the values as the contents)."""
    by = change.by
    for name in changed:
        value, before = change.values[name], current.get(name)
        if value is None:
            await tx.execute(
                "DELETE FROM group_settings WHERE place = ? AND name = ?", change.place, name
            )
        else:
            await tx.execute(
                "INSERT INTO group_settings (place, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (place, name) DO UPDATE SET value = excluded.value",
                change.place,
                name,
                value,
            )
        await tx.execute(
            _VERSION_INSERT,
            *(change.op, change.place, name, before, value, by.actor, by.channel.value, ts(now)),
        )
    entries: list[tuple[Any, ...]] = [
        (ChangeKind.SETTING, _label(change, name), current.get(name), change.values[name], "")
        for name in changed
    ]
    if entries:
        await tx.executemany(rows.AUDIT_INSERT, rows.audit_rows(change.group, by, now, entries))


def _label(change: SettingChange, name: str) -> str:
    """A setting as the group's audit trail names it: a topic's with the topic."""
    topic = change.place[len(change.group) :]
    return f"{name}{topic}" if topic else name


def _version(row: Sequence[Any]) -> SettingVersion:
    op, place, name, before, after, actor, channel = row[1:8]
    return SettingVersion(
        int(row[0]), op, place, name, before, after, actor, channel, dt(row[8]), row[9]
    )
