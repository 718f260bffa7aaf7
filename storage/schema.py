"""The schema: numbered steps, one list for both backends, applied in order on open; the database
records the last one applied. Every table, index and trigger of the store is defined here.
Column types are named ({time}, {count}, {serial}, {sequence}, {without_rowid}) and each dialect
fills them in; where the statements themselves differ, a step writes each dialect's side by side
and the dialect picks its own (db.pick).

Steps 1–8 are the schema of the releases before one store served both backends (PostgreSQL
databases of those releases are recognised by their own numbering and continue at step 9).
Step 10 changes what the audit trail stores: every worker must be stopped before it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from storage import usage_sums
from storage.dialect import Database, Executor
from storage.errors import SchemaTooNew
from storage.models import ChangeKind, Channel, label_key

log = logging.getLogger(__name__)
Step = list[str] | Callable[[Executor, Database], Awaitable[None]]

_DELIVERY = [
    # position orders one chat's updates (Telegram's update_id; 0 elsewhere), seq breaks ties
    # in arrival order. A processed update stays a while to recognise a repeated delivery.
    """CREATE TABLE inbox (
        seq {sequence},
        platform TEXT NOT NULL,
        event_id TEXT NOT NULL,
        chat TEXT NOT NULL,
        position {count} NOT NULL,
        payload TEXT NOT NULL,
        received_at {time} NOT NULL,
        done_at {time},
        UNIQUE (platform, event_id)
    )""",
    "CREATE INDEX inbox_pending ON inbox (chat, position, seq) WHERE done_at IS NULL",
    "CREATE INDEX inbox_done ON inbox (done_at) WHERE done_at IS NOT NULL",
    "CREATE TABLE chat_leases (chat TEXT PRIMARY KEY, owner {count} NOT NULL, "
    "since {time} NOT NULL)",
    """CREATE TABLE workers (
        id {sequence},
        started_at {time} NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL
    )""",
    "INSERT INTO inbox (platform, event_id, chat, position, payload, received_at, done_at) "
    "SELECT platform, event_id, '', 0, '', seen_at, seen_at FROM seen_events",
    "DROP TABLE seen_events",
]


async def _normalised_label_keys(tx: Executor, db: Database) -> None:
    """Labels are compared after NFKC normalisation and case folding. Where two labels of a scope
    collide, the older keeps its label and the newer is renamed `<label>~2` (or ~3…)."""
    rows = await tx.fetch("SELECT id, scope, label FROM blocks ORDER BY scope, created_at, id")
    # Free every key first, so the unique index never sees a half-renamed scope.
    await tx.execute("UPDATE blocks SET label_key = '#' || CAST(id AS TEXT)")
    taken: set[tuple[str, str]] = set()
    for block_id, scope, label in rows:
        new_label, suffix = label, 1
        while (scope, label_key(new_label)) in taken:
            suffix += 1
            new_label = f"{label}~{suffix}"
        taken.add((scope, label_key(new_label)))
        if new_label != label:
            renamed = (label, new_label, scope)
            log.warning("labels match ignoring width and case: renamed %r to %r in %s", *renamed)
        await tx.execute(
            "UPDATE blocks SET label = ?, label_key = ? WHERE id = ?",
            *(new_label, label_key(new_label), block_id),
        )


async def _usage_by_day_covering(tx: Executor, db: Database) -> None:
    """The web page sums a window of days for everyone: read from the index alone."""
    sums = "calls, prompt_tokens, cached_tokens, completion_tokens, estimated_calls"
    await tx.execute("DROP INDEX usage_by_day")
    await tx.execute(
        db.pick(
            # SQLite has no INCLUDE; an index of a WITHOUT ROWID table carries its key anyway
            sqlite=f"CREATE INDEX usage_by_day ON usage (day, {sums})",
            postgres="CREATE INDEX usage_by_day ON usage (day) "
            f"INCLUDE (platform, sender, group_key, {sums})",
        )
    )


def _kind_of(action: str) -> tuple[str, str]:
    """An audit action as earlier releases wrote it ("add strong pinned", "edit, level strong")
    as its kind and the rest of its words."""
    word, _, rest = action.partition(" ")
    if word.rstrip(",") not in set(ChangeKind):
        return ChangeKind.EDIT.value, action
    return word.rstrip(","), rest.lstrip(", ")


_AUDIT_IDS_GO_ON = (
    "SELECT setval(pg_get_serial_sequence('shared_audit', 'id'), "
    "COALESCE((SELECT MAX(id) FROM shared_audit), 0) + 1, false)"
)


async def _audit_kinds(tx: Executor, db: Database) -> None:
    """The audit trail stores the kind of each change (filtered by equality), the channel it
    came through and its origin, instead of one composed action text."""
    await tx.execute(
        """CREATE TABLE audit_new (
            id {serial},
            group_scope TEXT NOT NULL,
            at {time} NOT NULL,
            actor TEXT NOT NULL,
            channel TEXT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            label TEXT NOT NULL,
            old_content TEXT,
            new_content TEXT,
            origin TEXT
        )""".format(**db.types)
    )
    rows = await tx.fetch(
        "SELECT id, group_scope, at, actor, action, label, old_content, new_content "
        "FROM shared_audit ORDER BY id"
    )
    converted = []
    for id_, group, at, actor, action, label, old, new in rows:
        kind, detail = _kind_of(action)
        channel = Channel.COMMAND
        if actor in ("import", "web") or actor.startswith("web:"):
            channel = Channel(actor.partition(":")[0])
        converted.append((id_, group, at, actor, channel.value, kind, detail, label, old, new))
    await tx.executemany(
        "INSERT INTO audit_new (id, group_scope, at, actor, channel, kind, detail, label, "
        "old_content, new_content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        converted,
    )
    await tx.execute("DROP TABLE shared_audit")
    await tx.execute("ALTER TABLE audit_new RENAME TO shared_audit")
    await tx.execute("CREATE INDEX shared_audit_by_group ON shared_audit (group_scope, at)")
    # The ids go on after the copied ones (SQLite's INTEGER PRIMARY KEY does that itself).
    for statement in db.pick(sqlite=[], postgres=[_AUDIT_IDS_GO_ON]):
        await tx.execute(statement)


_USAGE_COUNTS = (
    "calls, prompt_tokens, cached_tokens, completion_tokens, estimated_calls, cost, priced_calls"
)


async def _usage_by_model_with_cost(tx: Executor, db: Database) -> None:
    """Usage rows record the model of the calls and what they cost when they were made (rows of
    earlier releases: model '' and no cost); calls in flight hold their tokens and cost against
    the budgets."""
    await tx.execute(
        """CREATE TABLE usage_new (
            platform TEXT NOT NULL,
            sender TEXT NOT NULL,
            day TEXT NOT NULL,
            group_key TEXT NOT NULL,
            model TEXT NOT NULL,
            calls {count} NOT NULL,
            prompt_tokens {count} NOT NULL,
            cached_tokens {count} NOT NULL,
            completion_tokens {count} NOT NULL,
            estimated_calls {count} NOT NULL,
            cost {time} NOT NULL,
            priced_calls {count} NOT NULL,
            PRIMARY KEY (platform, sender, day, group_key, model)
        ){without_rowid}""".format(**db.types)
    )
    await tx.execute(
        f"INSERT INTO usage_new (platform, sender, day, group_key, model, {_USAGE_COUNTS}) "
        "SELECT platform, sender, day, group_key, '', calls, prompt_tokens, cached_tokens, "
        "completion_tokens, estimated_calls, 0, 0 FROM usage"
    )
    await tx.execute("DROP TABLE usage")
    await tx.execute("ALTER TABLE usage_new RENAME TO usage")
    await tx.execute("CREATE INDEX usage_by_group ON usage (group_key, day)")
    await tx.execute(
        db.pick(
            # SQLite has no INCLUDE; an index of a WITHOUT ROWID table carries its key anyway
            sqlite=f"CREATE INDEX usage_by_day ON usage (day, {_USAGE_COUNTS})",
            postgres="CREATE INDEX usage_by_day ON usage (day) "
            f"INCLUDE (platform, sender, group_key, model, {_USAGE_COUNTS})",
        )
    )
    await tx.execute(
        """CREATE TABLE budget_holds (
            id {sequence},
            platform TEXT NOT NULL,
            sender TEXT,
            group_key TEXT NOT NULL,
            tokens {count} NOT NULL,
            cost {time} NOT NULL,
            created_at {time} NOT NULL
        )""".format(**db.types)
    )
    await tx.execute("CREATE INDEX budget_holds_by_sender ON budget_holds (platform, sender)")
    await tx.execute("CREATE INDEX budget_holds_by_group ON budget_holds (group_key)")


# The sums of usage the web page reads (storage.usage_sums): everyone's per UTC day, and per
# sender and per group over the kept windows (span days from first_day).
_USAGE_SUMS = [
    """CREATE TABLE usage_day_sums (
        day TEXT PRIMARY KEY,
        calls {count} NOT NULL,
        prompt_tokens {count} NOT NULL,
        cached_tokens {count} NOT NULL,
        completion_tokens {count} NOT NULL,
        estimated_calls {count} NOT NULL,
        cost {time} NOT NULL,
        priced_calls {count} NOT NULL
    ){without_rowid}""",
    "CREATE TABLE usage_windows (span INTEGER PRIMARY KEY, first_day TEXT NOT NULL)",
    """CREATE TABLE usage_window_sums (
        span INTEGER NOT NULL,
        kind TEXT NOT NULL,
        platform TEXT NOT NULL,
        key TEXT NOT NULL,
        calls {count} NOT NULL,
        prompt_tokens {count} NOT NULL,
        cached_tokens {count} NOT NULL,
        completion_tokens {count} NOT NULL,
        estimated_calls {count} NOT NULL,
        cost {time} NOT NULL,
        priced_calls {count} NOT NULL,
        tokens {count} NOT NULL,
        PRIMARY KEY (span, kind, platform, key)
    ){without_rowid}""",
    "CREATE INDEX usage_window_ranking ON usage_window_sums (span, kind, tokens DESC)",
]


# The search index of blocks (storage.search), each dialect's: its first statement needs what a
# server may lack (FTS5's trigram tokenizer; the right to create pg_trgm), so it is tried, and
# without it searches scan. SQLite's FTS5 table is not written in the transaction of every change
# (a segment per transaction would cost more than the change): triggers note each changed block
# with the text the index holds for it (indexed 0: none yet; the first note stays until the block
# is indexed), and the dialect's catch_up indexes the noted blocks.
_NOTE_OLD = (
    "INSERT INTO blocks_search_noted (id, indexed, label, content) SELECT old.id, 1, old.label, "
    "old.content WHERE NOT EXISTS (SELECT 1 FROM blocks_search_noted WHERE id = old.id)"
)
SQLITE_SEARCH_INDEX = [
    "CREATE VIRTUAL TABLE blocks_search USING fts5(label, content, content='blocks', "
    # detail=none: no positions, a third of the size and of the cost to write; a term's
    # trigrams are then looked up as a set, and the text condition settles the rest.
    "content_rowid='id', tokenize='trigram', detail=none)",
    "CREATE TABLE blocks_search_noted (id INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, "
    "label TEXT, content TEXT)",
    "CREATE TRIGGER blocks_search_added AFTER INSERT ON blocks BEGIN "
    "INSERT INTO blocks_search_noted (id, indexed) SELECT new.id, 0 "
    "WHERE NOT EXISTS (SELECT 1 FROM blocks_search_noted WHERE id = new.id); END",
    "CREATE TRIGGER blocks_search_changed AFTER UPDATE OF label, content ON blocks "
    f"WHEN old.label IS NOT new.label OR old.content IS NOT new.content BEGIN {_NOTE_OLD}; END",
    f"CREATE TRIGGER blocks_search_removed AFTER DELETE ON blocks BEGIN {_NOTE_OLD}; END",
    "INSERT INTO blocks_search (blocks_search) VALUES ('rebuild')",
]
PG_SEARCH_INDEX = (
    "CREATE INDEX blocks_search ON blocks USING gin (label gin_trgm_ops, content gin_trgm_ops)"
)
POSTGRES_SEARCH_INDEX = ["CREATE EXTENSION IF NOT EXISTS pg_trgm", PG_SEARCH_INDEX]


async def _pages_that_stay_fast(tx: Executor, db: Database) -> None:
    """The web page's search index of blocks, and the sums of usage its usage page reads."""
    for statement in _USAGE_SUMS:
        await tx.execute(statement.format(**db.types))
    await usage_sums.rebuild(tx)
    first, *then = db.pick(sqlite=SQLITE_SEARCH_INDEX, postgres=POSTGRES_SEARCH_INDEX)
    reason = await tx.attempt(first)
    if reason is not None:
        log.warning("search scans every block: %s", db.text_index.missing(reason, then))
        return
    for statement in then:
        await tx.execute(statement)


# Every change to a scope's blocks (by any statement: a change, a move, retention, a forgotten
# person, a copy) gives its scope a new version, so a reader may keep what it read of a scope
# while the version stays (storage.blocks keeps the blocks that wait for keywords). Versions
# come from one counter, never reused: a scope forgotten and made again starts at a new one.
_BUMP = (
    "INSERT INTO scope_versions (scope, version) VALUES ({scope}, {next}) "
    "ON CONFLICT (scope) DO UPDATE SET version = excluded.version"
)
_SQLITE_NEXT = "UPDATE scope_version_counter SET n = n + 1"
_SQLITE_BUMP = _BUMP.format(scope="{scope}", next="(SELECT n FROM scope_version_counter)")
SQLITE_SCOPE_VERSIONS = [
    "CREATE TABLE scope_version_counter (n INTEGER NOT NULL)",
    "INSERT INTO scope_version_counter (n) VALUES (1)",
    "CREATE TRIGGER blocks_version_added AFTER INSERT ON blocks BEGIN "
    f"{_SQLITE_NEXT}; {_SQLITE_BUMP.format(scope='new.scope')}; END",
    "CREATE TRIGGER blocks_version_changed AFTER UPDATE ON blocks BEGIN "
    f"{_SQLITE_NEXT}; {_SQLITE_BUMP.format(scope='old.scope')}; "
    f"{_SQLITE_BUMP.format(scope='new.scope')}; END",
    "CREATE TRIGGER blocks_version_removed AFTER DELETE ON blocks BEGIN "
    f"{_SQLITE_NEXT}; {_SQLITE_BUMP.format(scope='old.scope')}; END",
]
_PG_BUMP = _BUMP.format(scope="{scope}", next="nextval('pinbot_scope_version')")
POSTGRES_SCOPE_VERSIONS = [
    "CREATE SEQUENCE pinbot_scope_version START 2",
    "CREATE FUNCTION pinbot_scope_version() RETURNS trigger LANGUAGE plpgsql AS $body$ BEGIN "
    f"IF TG_OP <> 'INSERT' THEN {_PG_BUMP.format(scope='OLD.scope')}; END IF; "
    f"IF TG_OP <> 'DELETE' THEN {_PG_BUMP.format(scope='NEW.scope')}; END IF; "
    "RETURN NULL; END $body$",
    "CREATE TRIGGER blocks_scope_version AFTER INSERT OR UPDATE OR DELETE ON blocks "
    "FOR EACH ROW EXECUTE FUNCTION pinbot_scope_version()",
]


async def _scope_versions(tx: Executor, db: Database) -> None:
    """The version of each scope's blocks, given anew by the database itself on every change."""
    await tx.execute(
        "CREATE TABLE scope_versions (scope TEXT PRIMARY KEY, version {count} NOT NULL)"
        "{without_rowid}".format(**db.types)
    )
    await tx.execute(
        "INSERT INTO scope_versions (scope, version) SELECT DISTINCT scope, 1 FROM blocks"
    )
    for statement in db.pick(sqlite=SQLITE_SCOPE_VERSIONS, postgres=POSTGRES_SCOPE_VERSIONS):
        await tx.execute(statement)


STEPS: dict[int, Step] = {
    1: [
        """CREATE TABLE blocks (
            id {serial},
            scope TEXT NOT NULL,
            label TEXT NOT NULL,
            label_key TEXT NOT NULL,
            content TEXT NOT NULL,
            level TEXT NOT NULL CHECK (level IN ('strong', 'context')),
            state TEXT NOT NULL CHECK (state IN ('active', 'idle', 'pinned')),
            priority INTEGER NOT NULL DEFAULT 0,
            created_at {time} NOT NULL,
            updated_at {time} NOT NULL,
            idle_since {time},
            idle_calls {count},
            rev INTEGER NOT NULL DEFAULT 0,
            UNIQUE (scope, label_key)
        )""",
        "CREATE TABLE scope_calls (scope TEXT PRIMARY KEY, calls {count} NOT NULL){without_rowid}",
    ],
    2: [
        """CREATE TABLE history (
            id {serial},
            session TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'summary')),
            content TEXT NOT NULL,
            created_at {time} NOT NULL
        )""",
        "CREATE INDEX history_by_session ON history (session, id)",
    ],
    3: [
        """CREATE TABLE seen_events (
            platform TEXT NOT NULL,
            event_id TEXT NOT NULL,
            seen_at {time} NOT NULL,
            PRIMARY KEY (platform, event_id)
        ){without_rowid}""",
        "CREATE INDEX seen_events_by_time ON seen_events (seen_at)",
    ],
    4: [
        """CREATE TABLE shared_audit (
            id {serial},
            group_scope TEXT NOT NULL,
            at {time} NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            label TEXT NOT NULL,
            old_content TEXT,
            new_content TEXT
        )""",
        "CREATE INDEX shared_audit_by_group ON shared_audit (group_scope, at)",
    ],
    5: _normalised_label_keys,
    6: [
        # One row per sender, UTC day and chat: group_key is the group's session key, '' in DMs.
        """CREATE TABLE usage (
            platform TEXT NOT NULL,
            sender TEXT NOT NULL,
            day TEXT NOT NULL,
            group_key TEXT NOT NULL,
            calls {count} NOT NULL,
            prompt_tokens {count} NOT NULL,
            cached_tokens {count} NOT NULL,
            completion_tokens {count} NOT NULL,
            estimated_calls {count} NOT NULL,
            PRIMARY KEY (platform, sender, day, group_key)
        ){without_rowid}""",
        "CREATE INDEX usage_by_group ON usage (group_key, day)",
        "CREATE INDEX usage_by_day ON usage (day)",
    ],
    7: _DELIVERY,
    8: _usage_by_day_covering,
    # A token bucket per limiter and key; full_at says when it is full again (and may go). Only
    # PostgreSQL uses them: one process serves SQLite, which keeps its buckets in memory.
    9: [
        """CREATE TABLE IF NOT EXISTS rate_buckets (
            key TEXT PRIMARY KEY,
            tokens {time} NOT NULL,
            at {time} NOT NULL,
            full_at {time} NOT NULL,
            granted BOOLEAN NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS rate_buckets_full ON rate_buckets (full_at)",
    ],
    10: _audit_kinds,
    11: _usage_by_model_with_cost,
    # Every change to a block keeps the block's state before it (existed 0: it did not exist),
    # with the change; op groups one operation's versions, undone_by the undo that reverted it.
    12: [
        """CREATE TABLE block_versions (
            id {sequence},
            op TEXT NOT NULL,
            scope TEXT NOT NULL,
            label_key TEXT NOT NULL,
            label TEXT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            actor TEXT NOT NULL,
            channel TEXT NOT NULL,
            origin TEXT,
            at {time} NOT NULL,
            existed INTEGER NOT NULL,
            content TEXT,
            level TEXT,
            state TEXT,
            priority INTEGER,
            created_at {time},
            undone_by TEXT
        )""",
        "CREATE INDEX block_versions_by_label ON block_versions (scope, label_key, id)",
        "CREATE INDEX block_versions_by_scope ON block_versions (scope, id)",
        "CREATE INDEX block_versions_by_op ON block_versions (op)",
        "CREATE INDEX block_versions_by_time ON block_versions (at)",
    ],
    # What a scope's status says beside its blocks (e.g. why a group's pinned chat message
    # could not become its shared block).
    13: [
        """CREATE TABLE scope_notes (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            text TEXT NOT NULL,
            at {time} NOT NULL,
            PRIMARY KEY (scope, name)
        ){without_rowid}""",
    ],
    # The model's proposals to change a group's shared blocks, numbered within the group and
    # decided once by a shared admin (base_rev: the revision of the block to replace).
    14: [
        """CREATE TABLE proposals (
            id {serial},
            group_scope TEXT NOT NULL,
            number INTEGER NOT NULL,
            label TEXT NOT NULL,
            content TEXT NOT NULL,
            level TEXT,
            priority INTEGER,
            reason TEXT NOT NULL,
            proposer TEXT NOT NULL,
            base_rev INTEGER,
            base_content TEXT,
            status TEXT NOT NULL,
            outcome TEXT NOT NULL,
            created_at {time} NOT NULL,
            expires_at {time} NOT NULL,
            decided_by TEXT,
            decided_at {time},
            chat TEXT,
            message_id TEXT,
            UNIQUE (group_scope, number)
        )""",
        "CREATE INDEX proposals_pending ON proposals (group_scope) WHERE status = 'pending'",
    ],
    # A step that rebuilds the blocks table must make the search index again (its SQLite
    # triggers go with the table); one that writes usage rows, usage_sums.rebuild.
    15: _pages_that_stay_fast,
    # A proposal is decided against its block's newest version (base_version: that version's
    # operation, '' when none was kept), not its revision, which a block removed and added
    # again can repeat. A pending proposal whose block is still at base_rev with base_content
    # gets that block's mark; any other stays without one, and its approval is refused as made
    # on an older block.
    16: [
        "ALTER TABLE proposals ADD COLUMN base_version TEXT",
        """UPDATE proposals SET base_version = COALESCE((SELECT v.op FROM block_versions v
            WHERE v.scope = proposals.group_scope AND v.label_key = (SELECT b.label_key
            FROM blocks b WHERE b.scope = proposals.group_scope AND b.label = proposals.label)
            ORDER BY v.id DESC LIMIT 1), '')
        WHERE status = 'pending' AND base_rev IS NOT NULL AND EXISTS (SELECT 1 FROM blocks b
            WHERE b.scope = proposals.group_scope AND b.label = proposals.label
            AND b.rev = proposals.base_rev AND b.content = proposals.base_content)""",
    ],
    # A block may be sensitive: kept whole, but what the model and readers see of it redacted
    # (bot.core.blocks.sensitive). A version records the flag of the state it keeps, so undo and
    # restore bring it back; every block and version of earlier releases is not sensitive.
    17: [
        "ALTER TABLE blocks ADD COLUMN sensitive INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE block_versions ADD COLUMN sensitive INTEGER NOT NULL DEFAULT 0",
    ],
    # Pin suggestions made at a compaction (numbered within the DM user's scope, decided once;
    # dismissed ones kept, their content_key not suggested again), and the part of usage that
    # compaction takes (summaries and suggestions), shown apart by /usage.
    18: [
        """CREATE TABLE suggestions (
            id {serial},
            scope TEXT NOT NULL,
            number INTEGER NOT NULL,
            label TEXT NOT NULL,
            content TEXT NOT NULL,
            reason TEXT NOT NULL,
            content_key TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at {time} NOT NULL,
            expires_at {time} NOT NULL,
            decided_at {time},
            chat TEXT,
            message_id TEXT,
            UNIQUE (scope, number)
        )""",
        "CREATE INDEX suggestions_open ON suggestions (scope) "
        "WHERE status IN ('pending', 'dismissed')",
        """CREATE TABLE usage_compaction (
            platform TEXT NOT NULL,
            sender TEXT NOT NULL,
            day TEXT NOT NULL,
            group_key TEXT NOT NULL,
            calls {count} NOT NULL,
            prompt_tokens {count} NOT NULL,
            cached_tokens {count} NOT NULL,
            completion_tokens {count} NOT NULL,
            estimated_calls {count} NOT NULL,
            cost {time} NOT NULL,
            priced_calls {count} NOT NULL,
            PRIMARY KEY (platform, sender, day, group_key)
        ){without_rowid}""",
        "CREATE INDEX usage_compaction_by_group ON usage_compaction (group_key, day)",
    ],
    # An update's answer, kept from its processing until it has gone out, where the platform
    # takes a repeated send once (Feishu's uuid): a worker killed in between sends it after its
    # restart instead of losing it. Updates of earlier releases have none.
    19: ["ALTER TABLE inbox ADD COLUMN replies TEXT"],
    # Who said each turn (the sender's id; NULL for the turns of earlier releases and a
    # group's own summaries), so that a person's turns can be handed to them and forgotten.
    20: ["ALTER TABLE history ADD COLUMN sender TEXT"],
    # The groups the bot was removed from (chat: the group's key in the inbox), kept until the
    # bot is back (an update of the chat recorded after removed_at) or, past the grace period
    # (retention.removed_group_days), their data is removed (storage.retention).
    21: [
        """CREATE TABLE removed_groups (
            group_key TEXT PRIMARY KEY,
            chat TEXT NOT NULL,
            removed_at {time} NOT NULL
        ){without_rowid}""",
    ],
    # A block may wait for keywords (triggers: a JSON list of them as written; NULL: it goes
    # with every request) and may end (ends_at: after it the block is not sent, then ages as
    # an idle one). A version records both of the state it keeps; every block and version of
    # earlier releases is sent always and never ends. A user's turn records which blocks went
    # with its request and why (sent: JSON, for /pin why; NULL for earlier releases' turns).
    22: [
        "ALTER TABLE blocks ADD COLUMN triggers TEXT",
        "ALTER TABLE blocks ADD COLUMN ends_at {time}",
        "ALTER TABLE block_versions ADD COLUMN triggers TEXT",
        "ALTER TABLE block_versions ADD COLUMN ends_at {time}",
        "ALTER TABLE history ADD COLUMN sent TEXT",
    ],
    # Each scope's version, counted up by triggers on every change to its blocks: a turn reads
    # a scope's blocks that wait for keywords again only when it changed.
    23: _scope_versions,
    # The settings a group (place: its key) or a forum topic (its key) gives itself from the
    # chat, a JSON value per name, and every change to them (before and after; undone_by
    # names the undo that reverted it). Groups of earlier releases have none: the config's.
    24: [
        """CREATE TABLE group_settings (
            place TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (place, name)
        ){without_rowid}""",
        """CREATE TABLE group_setting_versions (
            id {serial},
            op TEXT NOT NULL,
            place TEXT NOT NULL,
            name TEXT NOT NULL,
            before TEXT,
            after TEXT,
            actor TEXT NOT NULL,
            channel TEXT NOT NULL,
            at {time} NOT NULL,
            undone_by TEXT
        )""",
        "CREATE INDEX group_setting_versions_by_place ON group_setting_versions (place, id)",
    ],
}
LATEST = max(STEPS)
# Where PostgreSQL records the steps applied, made before the version is read (SQLite keeps the
# last one's number in PRAGMA user_version).
_BOOKKEEPING = "CREATE TABLE IF NOT EXISTS pinbot_migrations (version INTEGER NOT NULL)"


async def migrate(db: Database, target: int = LATEST) -> int:
    """Apply every step after the database's version up to target, each in its own transaction;
    returns the version reached. SchemaTooNew for a database of a newer pinbot."""
    async with db.migrating():
        for statement in db.pick(sqlite=[], postgres=[_BOOKKEEPING]):
            await db.execute(statement)
        current = await db.schema_version()
        if current > LATEST:
            raise SchemaTooNew(
                f"the database's schema version {current} is newer than this pinbot's "
                f"({LATEST}); upgrade pinbot"
            )
        for number in range(current + 1, target + 1):
            async with db.transaction() as tx:
                if await db.schema_version(tx) >= number:  # another process got there first
                    continue
                step = STEPS[number]
                if callable(step):
                    await step(tx, db)
                else:
                    for statement in step:
                        await tx.execute(statement.format(**db.types))
                await db.set_schema_version(tx, number)
        return await db.schema_version()
