"""What retention needs beside each table's own forgetting (which is the owning module's: history,
usage, the audit trail, the inbox, and the versions in storage.changes): the groups the bot was
removed from, and the data of such a group forgotten once its grace period is over.

A group counts as removed from the bot's removal until the bot is back in it: an update of its
chat recorded in the inbox after the removal (every platform update is recorded there on
arrival, the one that adds the bot again on Telegram too). An update that was already waiting
when the removal arrived does not count. Its data goes in one transaction, each table's rows by
the statements of the module that owns the table; its blocks go before, as block changes (the
core's, reviewed like any other)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from storage.blocks import group_records_forgotten
from storage.changes import group_versions_forgotten
from storage.decisions import group_decisions_forgotten
from storage.delivery import chat_updates_forgotten
from storage.dialect import Database, Step
from storage.history import group_history_forgotten
from storage.rows import dt, ts
from storage.settings import group_settings_forgotten
from storage.usage import group_usage_folded

# Whether the bot is back in a removed group: an update of its chat recorded after the removal.
_BACK = (
    "EXISTS (SELECT 1 FROM inbox i WHERE i.chat = removed_groups.chat "
    "AND i.received_at > removed_groups.removed_at)"
)


class RetentionStore(Protocol):
    """The groups the bot was removed from, and their data forgotten past the grace period."""

    _db: Database

    async def group_removed(self, group: str, *, chat: str, now: datetime) -> None:
        """Note that the bot was removed from group (chat: the group's key in the inbox) at
        now; noted again, the removal counts from the later time."""
        await self._db.execute(
            "INSERT INTO removed_groups (group_key, chat, removed_at) VALUES (?, ?, ?) "
            "ON CONFLICT (group_key) DO UPDATE SET chat = excluded.chat, "
            "removed_at = excluded.removed_at",
            *(group, chat, ts(now)),
        )

    async def groups_back(self) -> list[str]:
        """Forget the removal of every group the bot is back in, and return those groups."""
        found = await self._db.returning(
            f"DELETE FROM removed_groups WHERE {_BACK} RETURNING group_key"
        )
        return sorted(row[0] for row in found)

    async def removed_groups(self, before: datetime) -> list[tuple[str, datetime]]:
        """The groups the bot was removed from before `before` and is not back in, with when:
        the oldest removal first."""
        found = await self._db.fetch(
            "SELECT group_key, removed_at FROM removed_groups "
            f"WHERE removed_at < ? AND NOT {_BACK} ORDER BY removed_at, group_key",
            ts(before),
        )
        return [(row[0], dt(row[1])) for row in found]

    async def forget_group(
        self,
        group: str,
        *,
        members_prefix: str,
        sessions_prefix: str,
        chat: str,
        removed_before: datetime,
    ) -> dict[str, int] | None:
        """Forget what is left of a group the bot was removed from before removed_before and is
        not back in, its blocks having gone as block changes: every version of its scopes (the
        shared one, and its members' whose keys start with members_prefix), their counts and
        notes, its audit trail, its proposals, its conversations (sessions_prefix: of its
        topics and per-sender histories), its updates in the inbox (chat), its own settings and
        its topics' (storage.settings), and its usage folded into no group's (storage.usage);
        the removal's note too. One transaction; how many
        rows of each kind went, or None (nothing changed) when the bot is back, or was removed
        again since."""
        steps: list[tuple[str | None, Step]] = [
            ("versions", group_versions_forgotten(group, members_prefix)),
            *group_records_forgotten(group, members_prefix),
            *group_decisions_forgotten(group, members_prefix),
            ("turns", group_history_forgotten(group, sessions_prefix)),
            *chat_updates_forgotten(chat),
            *group_usage_folded(group),
            *group_settings_forgotten(group, sessions_prefix),
        ]
        async with self._db.transaction(group) as tx:
            noted = await tx.execute(
                "DELETE FROM removed_groups WHERE group_key = ? AND removed_at < ? "
                f"AND NOT {_BACK}",
                *(group, ts(removed_before)),
            )
            if not noted:
                return None
            await self._db.hold_writers(tx, "usage")
            counts: dict[str, int] = {}
            for kind, step in steps:
                changed = await tx.execute(step.sql, *step.args)
                if kind is not None:
                    counts[kind] = counts.get(kind, 0) + changed
        return counts
