"""A person's data in every table: what the store holds about one person of one platform, for
them to take (export) or to have removed (forget), and the removal made good on the disk."""

from __future__ import annotations

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
        self, person: Person, *, former: str, sent_by: Callable[[str], bool]
    ) -> dict[str, int]:
        """Remove what the store holds about person, in one transaction, except their blocks
        (removed before, as block changes): every version of their scopes; their turns (their
        own sessions whole) and the summaries of the conversations of their groups, which may
        hold what they said; their usage, folded into each day's and group's anonymous total
        (budgets stay right); their proposals and suggestions; their rate buckets, budget holds,
        counts and notes; the updates they sent (sent_by tells a payload of theirs). Where they
        stay part of a group's record (versions of shared blocks, audit entries, decisions) they
        are named former. Returns how many rows of each kind went."""
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
