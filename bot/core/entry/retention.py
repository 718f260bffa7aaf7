"""Retention: how long each kind of data is kept (the config's `retention:` section), enforced by
one daily job among the periodic jobs (on the one worker holding them, at the time of the
injected clock); and the groups the bot was removed from, whose data goes after a grace period
unless the bot is back.

Each kind goes by its own time: conversation history by when a turn (or summary) was written,
block versions by when their change was made (the newest version of a removed sensitive label
outlives it, its content withheld: see storage.changes), usage by its UTC day (never a day this
month's budgets read), audit entries by when their change was made, processed updates by when
they were processed.

A group the bot was removed from (`BotRemoved`) keeps everything for `removed_group_days`: the
bot added back meanwhile finds it as it was. The bot counts as back once an update of the group's
chat is recorded after the removal (on Telegram the update that adds the bot again is one; on
Feishu the first message the bot is sent there). Past the grace period the group's blocks, its
shared ones and its members' personal ones, are removed as block changes (the clean-up's, through
BlockOps with the system's rights, like the idle clean-up's), and then, in one transaction, the
rest: every version of those scopes (the removal's own too), their counts and notes, the audit
trail, proposals, conversation history, updates in the inbox, and the group's usage folded into
no group's (each sender's and each day's totals stay right).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from bot.config import Retention as Days
from bot.core.blocks import BlockOps, remove_blocks
from bot.core.people import Conversation, delivery_chat, group_children, parse_scope
from storage import Store

log = logging.getLogger(__name__)
RETENTION_INTERVAL = timedelta(days=1)
# The kinds a run counts, in the order its log line names them, and their words there.
KINDS = {
    "groups": "removed groups",
    "blocks": "blocks",
    "versions": "versions",
    "audit": "audit entries",
    "proposals": "proposals",
    "turns": "history entries",
    "updates": "updates",
    "usage": "usage rows",
}


def first_usage_day(now: datetime, days: int) -> str:
    """The first UTC day whose usage is kept at now: days back, and never after the first day
    of this month, which the monthly budgets read."""
    today = now.astimezone(UTC).date()
    return min(today - timedelta(days=days), today.replace(day=1)).isoformat()


class Retention:
    """The retention of each kind of data (days), and the groups the bot was removed from."""

    def __init__(self, store: Store, ops: BlockOps, days: Days) -> None:
        self._store = store
        self._ops = ops
        self.days = days

    async def bot_removed(self, conversation: Conversation, now: datetime) -> None:
        """Note that the bot was removed from conversation's group at now: its data goes after
        the grace period unless the bot is back by then."""
        group, chat = conversation.group_session_key, conversation.chat_id
        if group is None or chat is None:
            return
        await self._store.group_removed(
            group, chat=delivery_chat(conversation.platform, chat), now=now
        )

    async def run(self, now: datetime) -> dict[str, int]:
        """Remove what is older than its retention at now, kind by kind; how many of each
        kind went (groups: groups whose data went, blocks: their blocks; usage: usage rows, a
        removed group's folded into no group's)."""
        days = self.days
        gone = dict.fromkeys(KINDS, 0)
        # First the groups the bot is back in (read from the inbox, before its retention runs).
        for group in await self._store.groups_back():
            log.info("retention: the bot is back in %s: its data stays", group)
        grace = now - timedelta(days=days.removed_group)
        for group, removed_at in await self._store.removed_groups(grace):
            counts = await self._forget_group(group, grace)
            if counts is None:
                continue
            log.info(
                "retention: removed the data of %s (the bot was removed from it on %s): %s",
                *(group, removed_at.date().isoformat(), _described(counts)),
            )
            gone["groups"] += 1
            for kind, count in counts.items():
                gone[kind] = gone.get(kind, 0) + count
        store = self._store
        gone["turns"] += await store.forget_history_before(now - timedelta(days=days.conversation))
        gone["versions"] += await store.forget_versions_before(now - timedelta(days=days.versions))
        gone["usage"] += await store.forget_usage_before(first_usage_day(now, days.usage))
        gone["audit"] += await store.forget_audit_before(now - timedelta(days=days.audit))
        gone["updates"] += await store.forget_updates_before(now - timedelta(days=days.inbox))
        if any(gone.values()):
            log.info("retention: %s", _described(gone))
        return gone

    async def _forget_group(self, group: str, grace: datetime) -> dict[str, int] | None:
        """Remove a removed group's data (removed before grace): its blocks as block changes,
        then the rest; None when nothing went (a block changed meanwhile, or the bot is back:
        the next run looks again)."""
        scope = parse_scope(group)
        if scope is None:  # not a key the bot writes: nothing of it can be read either
            return None
        members, sessions = group_children(group)
        blocks = await self._store.blocks([group]) + await self._store.blocks_with_prefix(members)
        if blocks and not await remove_blocks(self._ops, blocks):
            log.warning("retention: a block of %s changed while it was removed; next run", group)
            return None
        counts = await self._store.forget_group(
            group,
            members_prefix=members,
            sessions_prefix=sessions,
            chat=delivery_chat(scope.platform, scope.owner),
            removed_before=grace,
        )
        if counts is None:
            log.warning("retention: the bot is back in %s; its blocks went already", group)
            return None
        return {"blocks": len(blocks), **counts}


def _described(counts: dict[str, int]) -> str:
    """counts in words, in the order of KINDS, the kinds with none left out."""
    said = [f"{counts[kind]} {words}" for kind, words in KINDS.items() if counts.get(kind)]
    return ", ".join(said) or "nothing"
