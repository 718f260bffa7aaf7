"""A person's data in every table: what the store holds about one person of one platform, for
them to take (export) or to have removed (forget), and the removal made good on the disk."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from storage import usage_sums
from storage.changes import versions_forgotten, versions_without
from storage.dialect import Database, Executor, Step
from storage.models import Person
from storage.rows import prefix_range

# The tables of usage, and the columns a person's rows are folded into the anonymous total by.
_USAGE_KEYS = {
    "usage": ("day", "group_key", "model"),
    "usage_compaction": ("day", "group_key"),
}
_USAGE_COUNTS = (
    "calls, prompt_tokens, cached_tokens, completion_tokens, estimated_calls, cost, priced_calls"
)
ANONYMOUS = ""  # the sender of usage no person is named for (a group's own calls, the forgotten)


def _row(names: str, row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip((name.strip() for name in names.split(",")), row, strict=True))


class PeopleStore(Protocol):
    """Everything held about a person, read and removed."""

    _db: Database

    async def keys_ending(self, platform: str, suffixes: Sequence[str]) -> list[str]:
        """The scopes and history sessions of platform whose keys end with one of suffixes
        (where blocks, versions, counts, notes or turns are kept under them)."""
        low, high = prefix_range(f"{platform}:")
        found: set[str] = set()
        for table, column in (
            ("blocks", "scope"),
            ("block_versions", "scope"),
            ("scope_calls", "scope"),
            ("scope_notes", "scope"),
            ("scope_versions", "scope"),
            ("suggestions", "scope"),
            ("history", "session"),
        ):
            for suffix in suffixes:
                rows = await self._db.fetch(
                    f"SELECT DISTINCT {column} FROM {table} WHERE {column} >= ? AND {column} < ? "
                    f"AND substr({column}, length({column}) - length(?) + 1) = ?",
                    *(low, high, suffix, suffix),
                )
                found.update(row[0] for row in rows)
        return sorted(found)

    async def spoken_in(self, platform: str, user: str) -> list[str]:
        """The history sessions of platform holding turns user said, and the groups they were
        counted in (usage's group keys)."""
        low, high = prefix_range(f"{platform}:")
        sessions = await self._db.fetch(
            "SELECT DISTINCT session FROM history WHERE session >= ? AND session < ? "
            "AND sender = ?",
            *(low, high, user),
        )
        groups = await self._db.fetch(
            "SELECT DISTINCT group_key FROM usage WHERE platform = ? AND sender = ? "
            "AND group_key != ''",
            *(platform, user),
        )
        return sorted({row[0] for row in sessions} | {row[0] for row in groups})

    async def settings_naming(
        self, platform: str, user: str, names: Sequence[str]
    ) -> list[tuple[str, str, str]]:
        """The settings of platform's groups and topics that name user: (place, name, value
        as stored) of each of names (the settings whose value is a list of sender ids)."""
        if not names:
            return []
        low, high = prefix_range(f"{platform}:")
        found = await self._db.fetch(
            "SELECT place, name, value FROM group_settings WHERE name IN (?*) AND place >= ? "
            "AND place < ? ORDER BY place, name",
            *(list(names), low, high),
        )
        return [(place, name, value) for place, name, value in found if user in _people(value)]

    async def person_records(self, person: Person) -> dict[str, list[dict[str, Any]]]:
        """What the store holds about person besides blocks and their versions: their turns
        (every turn of their own sessions, the bot's answers included), usage, proposals and
        suggestions made or decided, and the audit entries where they acted."""
        low, high = prefix_range(f"{person.platform}:")
        who = (person.platform, person.user)
        turns = "session, role, content, created_at"
        own = list(person.sessions) or [""]
        history = await self._db.fetch(
            f"SELECT {turns} FROM history WHERE session IN (?*) OR (session >= ? AND "
            "session < ? AND sender = ?) ORDER BY id",
            *(own, low, high, person.user),
        )
        usage = "day, group_key, model, " + _USAGE_COUNTS
        used = await self._db.fetch(
            f"SELECT {usage} FROM usage WHERE platform = ? AND sender = ? ORDER BY day, group_key",
            *who,
        )
        proposal = (
            "id, group_scope, number, label, content, level, priority, reason, proposer, status, "
            "outcome, created_at, expires_at, decided_by, decided_at"
        )
        proposals = await self._db.fetch(
            f"SELECT {proposal} FROM proposals WHERE group_scope >= ? AND group_scope < ? AND "
            "(proposer = ? OR decided_by = ?) ORDER BY id",
            *(low, high, person.user, person.user),
        )
        suggestion = "scope, number, label, content, reason, status, created_at, decided_at"
        suggestions = await self._db.fetch(
            f"SELECT {suggestion} FROM suggestions WHERE scope IN (?*) ORDER BY id",
            list(person.scopes) or [""],
        )
        entry = "group_scope, at, channel, kind, detail, label, old_content, new_content"
        audit = await self._db.fetch(
            f"SELECT {entry} FROM shared_audit WHERE group_scope >= ? AND group_scope < ? "
            "AND actor = ? ORDER BY id",
            *(low, high, person.user),
        )
        return {
            "turns": [_row(turns, row) for row in history],
            "usage": [_row(usage, row) for row in used],
            "proposals": [_row(proposal, row) for row in proposals],
            "suggestions": [_row(suggestion, row) for row in suggestions],
            "audit": [_row(entry, row) for row in audit],
        }

    async def forget_person(
        self,
        person: Person,
        *,
        former: str,
        sent_by: Callable[[str], bool],
        people_settings: Sequence[str] = (),
    ) -> dict[str, int]:
        """Remove what the store holds about person, in one transaction, except their blocks
        (removed before, as block changes): every version of their scopes; their turns (their
        own sessions whole) and the summaries of the conversations of their groups, which may
        hold what they said; their usage, folded into each day's and group's anonymous total
        (budgets stay right); their proposals and suggestions; their rate buckets, budget holds,
        counts and notes; the updates they sent (sent_by tells a payload of theirs). Where they
        stay part of a group's record (versions of shared blocks, audit entries, decisions,
        changes to a group's settings) they are named former; their id is taken out of the
        values of people_settings (lists of sender ids: the settings themselves went before,
        as setting changes) in those settings' versions and audit entries, so no undo brings
        it back. Returns how many rows of each kind went."""
        low, high = prefix_range(f"{person.platform}:")
        scopes = list(person.scopes) or [""]
        counts: dict[str, int] = {}
        async with self._db.transaction() as tx:
            inbox = await tx.fetch(
                "SELECT seq, payload FROM inbox WHERE platform = ?", person.platform
            )
            theirs = [seq for seq, payload in inbox if payload and sent_by(payload)]
            counts["updates"] = await _delete(tx, "DELETE FROM inbox WHERE seq IN (?*)", theirs)
            counts["versions"] = await tx.execute(*_sql(versions_forgotten(scopes)))
            for step in versions_without(person.platform, person.user, former):
                await tx.execute(*_sql(step))
            counts["turns"] = await tx.execute(
                "DELETE FROM history WHERE session IN (?*) OR (session >= ? AND session < ? "
                "AND sender = ?)",
                *(list(person.sessions) or [""], low, high, person.user),
            )
            for group in person.groups:
                group_low, group_high = prefix_range(group)
                counts["turns"] += await tx.execute(
                    "DELETE FROM history WHERE role = 'summary' AND session >= ? AND session < ?",
                    *(group_low, group_high),
                )
            counts["usage"] = await _fold_usage(tx, person)
            counts["proposals"] = await tx.execute(
                "DELETE FROM proposals WHERE group_scope >= ? AND group_scope < ? AND proposer = ?",
                *(low, high, person.user),
            )
            await tx.execute(
                "UPDATE proposals SET decided_by = ? WHERE group_scope >= ? AND "
                "group_scope < ? AND decided_by = ?",
                *(former, low, high, person.user),
            )
            counts["suggestions"] = await tx.execute(
                "DELETE FROM suggestions WHERE scope IN (?*)", scopes
            )
            counts["audit"] = await tx.execute(
                "UPDATE shared_audit SET actor = ? WHERE group_scope >= ? AND group_scope < ? "
                "AND actor = ?",
                *(former, low, high, person.user),
            )
            suffix = f":{person.user}"
            await tx.execute(
                "UPDATE shared_audit SET origin = substr(origin, 1, length(origin) - "
                "length(?)) || ':' WHERE origin LIKE 'message:%' AND substr(origin, "
                "length(origin) - length(?) + 1) = ? AND group_scope >= ? AND group_scope < ?",
                *(suffix, suffix, suffix, low, high),
            )
            await tx.execute(
                "UPDATE group_setting_versions SET actor = ? WHERE place >= ? AND place < ? "
                "AND actor = ?",
                *(former, low, high, person.user),
            )
            await _settings_without(tx, person, people_settings)
            await tx.execute(
                "DELETE FROM budget_holds WHERE platform = ? AND sender = ?",
                *(person.platform, person.user),
            )
            await _delete(tx, "DELETE FROM rate_buckets WHERE key IN (?*)", person.buckets)
            await _delete(tx, "DELETE FROM chat_leases WHERE chat IN (?*)", person.chats)
            for table in ("scope_calls", "scope_notes", "scope_versions"):
                await tx.execute(f"DELETE FROM {table} WHERE scope IN (?*)", scopes)
        return counts

    async def catch_up_search(self) -> int: ...

    async def reclaim(self) -> None:
        """Make what was deleted unreadable on the disk too, as far as the database can (the
        dialect's reclaim says how far), the search index brought up to date first."""
        await self.catch_up_search()
        await self._db.reclaim()


def _people(stored: str | None) -> list[str]:
    """The sender ids a stored list setting holds (none when it holds no list)."""
    try:
        value = json.loads(stored) if stored is not None else None
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _without(stored: str | None, user: str) -> str | None:
    """A stored list setting without user, stored as storage.settings' values are (None: the
    list left empty, unset); any other value as it is."""
    people = _people(stored)
    if user not in people:
        return stored
    rest = sorted(p for p in people if p != user)
    return json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else None


async def _settings_without(tx: Executor, person: Person, names: Sequence[str]) -> None:
    """Take person's id out of the values of the list settings names in their platform's
    settings' versions and audit entries (the setting's name begins its entry's label)."""
    if not names:
        return
    low, high = prefix_range(f"{person.platform}:")
    versions = await tx.fetch(
        "SELECT id, before, after FROM group_setting_versions WHERE name IN (?*) AND "
        "place >= ? AND place < ?",
        *(list(names), low, high),
    )
    for row_id, before, after in versions:
        new = (_without(before, person.user), _without(after, person.user))
        if new != (before, after):
            await tx.execute(
                "UPDATE group_setting_versions SET before = ?, after = ? WHERE id = ?",
                *(*new, row_id),
            )
    entries = await tx.fetch(
        "SELECT id, label, old_content, new_content FROM shared_audit WHERE kind = 'setting' "
        "AND group_scope >= ? AND group_scope < ?",
        *(low, high),
    )
    for row_id, label, old, new_content in entries:
        if label.split(":", 1)[0] not in names:
            continue
        new = (_without(old, person.user), _without(new_content, person.user))
        if new != (old, new_content):
            await tx.execute(
                "UPDATE shared_audit SET old_content = ?, new_content = ? WHERE id = ?",
                *(*new, row_id),
            )


async def _delete(tx: Executor, sql: str, keys: Sequence[Any]) -> int:
    return await tx.execute(sql, list(keys)) if keys else 0


def _sql(step: Step) -> tuple[Any, ...]:
    return (step.sql, *step.args)


async def _fold_usage(tx: Executor, person: Person) -> int:
    """Move a person's usage rows into the anonymous sender's of the same day and group (and
    model), then sum the usage again: every total stays what it was, none names them."""
    moved = 0
    adds = ", ".join(
        f"{name} = {{table}}.{name} + excluded.{name}" for name in _USAGE_COUNTS.split(", ")
    )
    for table, keys in _USAGE_KEYS.items():
        key_list = ", ".join(keys)
        await tx.execute(
            f"INSERT INTO {table} (platform, sender, {key_list}, {_USAGE_COUNTS}) "
            f"SELECT platform, ?, {key_list}, {_USAGE_COUNTS} FROM {table} "
            f"WHERE platform = ? AND sender = ? "
            f"ON CONFLICT (platform, sender, {key_list}) DO UPDATE SET " + adds.format(table=table),
            *(ANONYMOUS, person.platform, person.user),
        )
        moved += await tx.execute(
            f"DELETE FROM {table} WHERE platform = ? AND sender = ?",
            *(person.platform, person.user),
        )
    await usage_sums.rebuild(tx)
    return moved
