"""One store contract, two backends: every test here runs on SQLite and on a real PostgreSQL
server, including the concurrency guarantees (several store instances stand for several
processes)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from storage import Store
from storage.decisions import PROPOSALS, SUGGESTIONS, Kind
from storage.errors import (
    AlreadyDecided,
    Conflict,
    LabelTaken,
    LimitReached,
    OverBudget,
    Stale,
    WorkerConflict,
)
from storage.models import (
    Author,
    BlockChange,
    BlockState,
    ChangeKind,
    Channel,
    Level,
    Limits,
    NewBlock,
    NewProposal,
    NewSuggestion,
    Origin,
    ProposalStatus,
    Seen,
    State,
    UsageTotals,
    Wanted,
)
from storage.rows import TABLES
from storage.settings import SettingChange
from tests.pg import fresh_database
from tests.storage import writes

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Opener = Callable[[], Awaitable[Store]]
BY_7 = Author("7", Channel.COMMAND)
TWENTY = Limits(20)


@pytest.fixture(params=["sqlite", "postgres"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens store instances on one database of the parametrized backend."""
    opened: list[Store] = []
    url = None
    if request.param == "postgres":
        url = await fresh_database(request.getfixturevalue("pg_cluster"))

    async def open_one() -> Store:
        store = await Store.open(tmp_path / "c.sqlite3", url=url)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


def new(label: str, scope: str = "s", content: str = "text") -> NewBlock:
    return NewBlock(scope=scope, label=label, content=content, level=Level.CONTEXT)


async def add(
    store: Store,
    label: str,
    scope: str = "s",
    content: str = "text",
    *,
    limits: Limits = TWENTY,
    audited: bool = False,
    now: datetime = NOW,
) -> None:
    await writes.insert(
        store, new(label, scope, content), now=now, limits=limits, by=BY_7, audited=audited
    )


def outcomes(results: Sequence[object]) -> dict[str, int]:
    """How many calls succeeded (None) and how many raised each exception."""
    counts: dict[str, int] = {}
    for result in results:
        name = "ok" if result is None else type(result).__name__
        counts[name] = counts.get(name, 0) + 1
    return counts


async def test_fifty_concurrent_adds_from_several_processes_leave_exactly_the_limit(
    open_store: Opener,
) -> None:
    stores = [await open_store() for _ in range(3)]
    results = await asyncio.gather(
        *(add(stores[i % 3], f"b{i}") for i in range(50)), return_exceptions=True
    )
    assert outcomes(results) == {"ok": 20, "LimitReached": 30}
    assert len(await stores[0].blocks(["s"])) == 20


async def test_concurrent_adds_of_one_label_and_a_budget_stay_exact(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(3)]
    same = await asyncio.gather(*(add(s, "dup") for s in stores), return_exceptions=True)
    assert outcomes(same) == {"ok": 1, "LabelTaken": 2}
    assert all(e.label == "dup" for e in same if isinstance(e, LabelTaken))
    budget = await asyncio.gather(
        *(add(stores[i % 3], f"c{i}", "t", "x" * 10, limits=Limits(50, 55)) for i in range(20)),
        return_exceptions=True,
    )
    assert outcomes(budget) == {"ok": 5, "OverBudget": 15}
    assert {(e.total, e.budget) for e in budget if isinstance(e, OverBudget)} == {(60, 55)}


async def test_guarded_updates_and_the_budget_rule(open_store: Opener) -> None:
    store = await open_store()
    await add(store, "a", content="x" * 40)
    await add(store, "b", content="y" * 40)
    a, b = await store.blocks(["s"])
    budget, no_budget = Limits(5, 50), Limits(5)
    # The scope (80) is over a budget of 50: shrinking and state changes still work.
    await writes.update(store, a, now=NOW, limits=budget, by=BY_7, content="x" * 10)
    with pytest.raises(Conflict):  # a is stale now
        await writes.update(store, a, now=NOW, limits=budget, by=BY_7, state=State.IDLE)
    (a, b) = await store.blocks(["s"])
    await writes.update(store, b, now=NOW, limits=budget, by=BY_7, state=State.PINNED)
    (a, b) = await store.blocks(["s"])
    with pytest.raises(OverBudget) as over:
        await writes.update(store, a, now=NOW, limits=budget, by=BY_7, content="x" * 30)
    assert (over.value.total, over.value.budget) == (70, 50)
    await writes.update(
        store, a, now=NOW, limits=no_budget, by=BY_7, level=Level.STRONG, priority=9
    )
    (a, b) = await store.blocks(["s"])
    assert (a.level, a.priority, b.state) == (Level.STRONG, 9, State.PINNED)
    await writes.delete(store, a, now=NOW, by=BY_7)
    with pytest.raises(Stale):
        await writes.update(store, a, now=NOW, limits=no_budget, by=BY_7, priority=1)
    with pytest.raises(Stale):
        await writes.delete(store, a, now=NOW, by=BY_7)
    with pytest.raises(LimitReached):
        await add(store, "c", limits=Limits(1))


async def test_idle_marks_and_call_counts(open_store: Opener) -> None:
    store = await open_store()
    await add(store, "a")
    for _ in range(3):
        await store.start_model_call(["s"])
    (a,) = await store.blocks(["s"])
    await writes.update(store, a, now=NOW, limits=Limits(5), by=BY_7, state=State.IDLE)
    (a,) = await store.blocks(["s"])
    assert a.idle_calls == 3 and a.idle_since == NOW
    blocks, before = await store.start_model_call(["s", "empty"])
    assert before == {"s": 3} and [b.label for b in blocks] == ["a"]
    assert await store.model_calls("s") == 4 and await store.model_calls("empty") == 1
    await writes.delete(store, a, now=NOW, by=BY_7)
    assert await store.blocks(["s"]) == []


async def test_a_block_brought_back_idle_counts_its_idle_time_from_then(
    open_store: Opener,
) -> None:
    store = await open_store()
    await add(store, "a")
    for _ in range(3):
        await store.start_model_call(["s"])
    (a,) = await store.blocks(["s"])
    await writes.delete(store, a, now=NOW, by=BY_7)
    idle, later = BlockState("text", Level.CONTEXT, State.IDLE), NOW + timedelta(days=1)
    brought = [Wanted("a", idle, created_at=a.created_at)]
    await writes.bring(store, "s", brought, now=later, limits=TWENTY, by=BY_7)
    (a,) = await store.blocks(["s"])
    assert (a.state, a.created_at, a.idle_since, a.idle_calls) == (State.IDLE, NOW, later, 3)


async def test_history_compaction_and_reset(open_store: Opener) -> None:
    store = await open_store()
    await store.append_turn("k", "one", "reply 1", now=NOW)
    await store.append_turn("k", "two", "reply 2", now=NOW)
    first = await store.history("k")
    assert [(e.role, e.content) for e in first] == [
        ("user", "one"),
        ("assistant", "reply 1"),
        ("user", "two"),
        ("assistant", "reply 2"),
    ]
    await store.compact_history("k", [first[0].id, first[1].id], "they said one", now=NOW)
    assert [e.content for e in await store.history("k")] == ["they said one", "two", "reply 2"]
    assert await store.clear_history("k") == 3 and await store.history("k") == []


async def test_audit_trail_and_clear(open_store: Opener) -> None:
    store = await open_store()
    await add(store, "a", "g", audited=True)
    (a,) = await store.blocks(["g"])
    by_model = Author("model", Channel.TOOL, Origin("m1", "42"))
    await writes.update(
        store,
        a,
        now=NOW,
        limits=Limits(5),
        by=by_model,
        audited=True,
        content="new",
        priority=2,
    )
    await add(store, "b", "g")  # not audited
    cleared = await writes.clear(store, "g", now=NOW - timedelta(days=400), by=BY_7, audited=True)
    assert cleared == 2
    log = await store.audit_log("g", 10)
    # One entry per change of a label, naming every aspect it changed.
    assert [(e.kind, e.detail, e.label, e.actor, e.old_content, e.new_content) for e in log] == [
        (ChangeKind.EDIT, "content; priority 2", "a", "model", "text", "new"),
        (ChangeKind.ADD, "context", "a", "7", None, "text"),
        (ChangeKind.CLEAR, "", "b", "7", "text", None),
        (ChangeKind.CLEAR, "", "a", "7", "new", None),
    ]
    assert [e.channel for e in log] == [Channel.TOOL] + [Channel.COMMAND] * 3
    assert log[0].action == "edit content; priority 2"
    assert log[0].origin == Origin("m1", "42") and log[1].action == "add context"
    assert await store.prune_audit("g", NOW - timedelta(days=1)) == 2
    assert [e.kind for e in await store.audit_log("g", 10)] == [ChangeKind.EDIT, ChangeKind.ADD]


async def test_each_update_is_recorded_once_by_all_processes(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(3)]
    recorded = await asyncio.gather(
        *(
            s.record_update("feishu", "ev_1", chat="c", position=0, payload="{}", now=NOW)
            for s in stores
            for _ in range(3)
        )
    )
    assert sum(arrival.recorded for arrival in recorded) == 1
    pending = await stores[1].next_update("c")
    assert pending is not None and pending.platform == "feishu"
    assert await stores[2].finish_update(pending.seq, now=NOW) is None
    assert await stores[0].next_update("c") is None
    assert await stores[0].forget_updates_before(NOW + timedelta(seconds=1)) == 1
    # Forgotten long after processing: only then may the id come again as new.
    again = await stores[0].record_update(
        "feishu", "ev_1", chat="c", position=0, payload="", now=NOW
    )
    assert again.recorded


async def test_a_chats_updates_come_by_position_then_arrival(open_store: Opener) -> None:
    store = await open_store()
    for event, position in (("u7", 7), ("u5", 5), ("a", 0), ("b", 0)):
        await store.record_update("p", event, chat="c", position=position, payload=event, now=NOW)
    await store.record_update("p", "other", chat="d", position=1, payload="other", now=NOW)
    seen = []
    pending = await store.next_update("c")
    while pending is not None:  # marking one processed reads the next
        seen.append(pending.payload)
        pending = await store.finish_update(pending.seq, now=NOW)
    assert seen == ["a", "b", "u5", "u7"]
    assert await store.next_update("d") is not None


async def test_recording_an_update_takes_its_chat_and_reads_the_first_waiting(
    open_store: Opener,
) -> None:
    first, second = await open_store(), await open_store()
    await first.register_worker(now=NOW)
    early = await first.record_update("p", "5", chat="c", position=5, payload="five", now=NOW)
    assert early.recorded and early.first is not None and early.first.payload == "five"
    later = await first.record_update("p", "3", chat="c", position=3, payload="three", now=NOW)
    assert later.first is not None and later.first.payload == "three"  # by position
    repeated = await first.record_update("p", "3", chat="c", position=3, payload="", now=NOW)
    assert not repeated.recorded and repeated.first is None
    if first.kind == "SQLite":  # one process serves a SQLite database
        return
    await second.register_worker(now=NOW)
    taken = await second.record_update("p", "7", chat="c", position=7, payload="", now=NOW)
    assert taken.recorded and taken.first is None  # the first worker holds the chat
    assert not await first.release_chat("c")
    assert await second.abandoned_chats(10) == []


async def test_a_chat_is_held_by_one_live_worker(open_store: Opener) -> None:
    first, second = await open_store(), await open_store()
    await first.register_worker(now=NOW)
    await first.record_update("p", "1", chat="c", position=0, payload="", now=NOW)
    assert await first.claim_chat("c", now=NOW)
    assert await first.claim_chat("c", now=NOW)  # its own again
    if first.kind == "SQLite":  # one process serves a SQLite database
        with pytest.raises(WorkerConflict, match="another pinbot process"):
            await second.register_worker(now=NOW)
        return
    await second.register_worker(now=NOW)
    assert not await second.claim_chat("c", now=NOW)
    assert await second.abandoned_chats(10) == []
    assert not await first.release_chat("c")  # an update waits: the lease stays
    await first.close()  # the worker ends without releasing: its lease dies with it
    assert await second.abandoned_chats(10) == ["c"]
    assert await second.claim_chat("c", now=NOW)
    assert await second.abandoned_chats(10) == ["c"]  # its own: it checks it still works on it
    pending = await second.next_update("c")
    assert pending is not None
    assert await second.finish_update(pending.seq, now=NOW) is None
    assert await second.release_chat("c")
    assert await second.abandoned_chats(10) == []


async def test_finishing_the_last_waiting_update_gives_up_its_chat_in_the_same_transaction(
    open_store: Opener,
) -> None:
    store = await open_store()
    await store.register_worker(now=NOW)
    for event in ("1", "2"):
        await store.record_update("p", event, chat="c", position=0, payload=event, now=NOW)
    first = await store.next_update("c")
    assert first is not None
    # Another update waits: it is read, and the chat stays held.
    following, released = await store.finish_and_release(first.seq, "c", now=NOW)
    assert following is not None and following.payload == "2" and not released
    assert await store.claim_chat("c", now=NOW)
    # The last: done, and the chat given up (a worker recording the next one takes it).
    assert await store.finish_and_release(following.seq, "c", now=NOW) == (None, True)
    assert await store.next_update("c") is None
    assert await store.abandoned_chats(10) == []
    # Done before its answer is sent: given up at once only where no other worker could take
    # the chat and answer first (one process serves a SQLite file).
    await store.record_update("p", "4", chat="c", position=0, payload="4", now=NOW)
    assert await store.claim_chat("c", now=NOW)
    waiting = await store.next_update("c")
    assert waiting is not None
    alone = store.kind == "SQLite"
    assert await store.finish_before_reply(waiting.seq, "c", now=NOW) == (None, alone)
    assert alone or await store.release_chat("c")  # else after the answer went out
    if store.kind == "SQLite":
        return
    second = await open_store()
    await second.register_worker(now=NOW)
    taken = await second.record_update("p", "3", chat="c", position=0, payload="3", now=NOW)
    assert taken.first is not None and taken.first.payload == "3"  # the chat was free
    # A chat another worker holds now is not this one's: given up, whatever waits.
    assert await store.finish_and_release(taken.first.seq, "c", now=NOW) == (None, True)
    assert not await store.claim_chat("c", now=NOW)


async def test_a_sole_role_is_held_by_one_worker(open_store: Opener) -> None:
    first, second = await open_store(), await open_store()
    await first.register_worker(now=NOW, sole="telegram poller")
    with pytest.raises(WorkerConflict):
        await second.register_worker(now=NOW, sole="telegram poller")
    await first.close()
    assert await second.register_worker(now=NOW, sole="telegram poller") > 0


async def test_a_role_is_held_by_one_live_worker_at_a_time(open_store: Opener) -> None:
    first = await open_store()
    assert not await first.hold_role("jobs") or first.kind == "SQLite"  # not a worker yet
    await first.register_worker(now=NOW)
    assert await first.hold_role("jobs") and await first.hold_role("jobs")  # and stays held
    if first.kind == "SQLite":  # one process serves it: every role is its own
        return
    second = await open_store()
    await second.register_worker(now=NOW)
    assert not await second.hold_role("jobs") and await second.hold_role("other")
    await first.close()  # the holder ends: the role is free
    assert await second.hold_role("jobs")


async def test_rate_buckets_are_exact_across_workers(open_store: Opener) -> None:
    # Several PostgreSQL workers share buckets; a SQLite store is served by one process.
    first = await open_store()
    stores: list[Store] = [first, first, first]
    if first.kind == "PostgreSQL":
        stores[1:] = [await open_store(), await open_store()]
    per_s = 5 / 60
    waits = await asyncio.gather(
        *(s.take_token("k", capacity=5, per_s=per_s, now=NOW) for s in stores for _ in range(7))
    )
    assert waits.count(None) == 5
    assert all(w == pytest.approx(12.0) for w in waits if w is not None)
    later = NOW + timedelta(seconds=12)
    assert await stores[0].take_token("k", capacity=5, per_s=per_s, now=later) is None
    assert await stores[1].take_token("k", capacity=5, per_s=per_s, now=later) is not None
    assert await stores[0].forget_full_buckets(later + timedelta(minutes=1)) == 1


async def test_moving_a_group(open_store: Opener) -> None:
    store = await open_store()
    for scope in ("p:group:1", "p:group:1::u:5", "p:group:2"):
        await add(store, "a", scope)
    await store.append_turn("p:group:1:topic:3", "hi", "hello", now=NOW)
    moved = await store.move_group(
        "p:group:1", "p:group:2", members_prefix="p:group:1::u:", sessions_prefix="p:group:1:"
    )
    assert moved == 1  # the shared 'a' already exists at the destination and stays
    assert [b.scope for b in await store.blocks(["p:group:2::u:5"])] == ["p:group:2::u:5"]
    assert [e.content for e in await store.history("p:group:2:topic:3")] == ["hi", "hello"]


async def test_usage_sums(open_store: Opener) -> None:
    store = await open_store()
    for day, group in (("2026-01-01", ""), ("2026-01-01", "p:group:1"), ("2026-01-02", "")):
        await store.add_usage(
            platform="p", sender="5", day=day, group_key=group, usage=UsageTotals(1, 100, 60, 7, 0)
        )
    assert await store.sender_usage("p", "5", "2026-01-01", "2026-01-31") == UsageTotals(
        3, 300, 180, 21, 0
    )
    assert (await store.group_usage("p:group:1", "2026-01-01", "2026-01-01")).calls == 1
    users, groups = await store.usage_report("2026-01-02")
    assert [(u.key, u.totals.calls) for u in users] == [("5", 1)] and groups == []


async def test_usage_by_model(open_store: Opener) -> None:
    store = await open_store()
    for model, group, calls in (("m", "p:group:1", 1), ("fast", "p:group:1", 2), ("m", "", 2)):
        await store.add_usage(
            platform="p",
            sender="5",
            day="2026-01-01",
            group_key=group,
            model=model,
            usage=UsageTotals(calls, 100 * calls, 0, 10 * calls, 0, 0.5 * calls, calls),
        )
    mine = await store.usage_by_model("2026-01-01", "2026-01-31", sender=("p", "5"))
    assert [(model, used.calls, used.cost) for model, used in mine] == [
        ("m", 3, 1.5),  # most tokens first
        ("fast", 2, 1.0),
    ]
    of_group = await store.usage_by_model("2026-01-01", "2026-01-01", group_key="p:group:1")
    assert [(model, used.calls) for model, used in of_group] == [("fast", 2), ("m", 1)]
    assert await store.usage_by_model("2026-01-02", "2026-01-31", sender=("p", "5")) == []


async def test_export_replace_and_transfer_round_trip(open_store: Opener) -> None:
    store = await open_store()
    await add(store, "a", "p:group:1")
    await store.start_model_call(["p:group:1"])
    exported = await store.export_scopes()
    importing = Author("import", Channel.IMPORT)
    written = await writes.replace(
        store,
        {**exported, "p:group:2": (0, exported["p:group:1"][1])},
        now=NOW,
        by=importing,
        audited={"p:group:1", "p:group:2"},
    )
    assert written == 2
    assert await store.audit_log("p:group:1", 5) == []  # the same blocks again: no change
    (entry,) = await store.audit_log("p:group:2", 5)
    assert (entry.kind, entry.actor, entry.channel) == (ChangeKind.IMPORT, "import", Channel.IMPORT)
    await writes.replace(store, {"p:group:2": (0, [])}, now=NOW, by=importing)
    again = await store.export_scopes()
    assert {k: (c, [(b.label, b.content) for b in bs]) for k, (c, bs) in again.items()} == {
        "p:group:1": (1, [("a", "text")]),
        "p:group:2": (0, []),
    }
    assert await store.schema_version() >= 1
    assert not await store.is_empty()
    dump = await store.dump()
    assert dump["blocks"] and dump["scope_calls"] == [("p:group:1", 1), ("p:group:2", 0)]


async def test_processes_starting_at_once_migrate_once(open_store: Opener) -> None:
    stores = await asyncio.gather(*(open_store() for _ in range(4)))
    versions = {await store.schema_version() for store in stores}
    assert len(versions) == 1 and versions.pop() >= 1
    assert await stores[0].is_empty()


async def test_browsing_scopes_blocks_and_search(open_store: Opener) -> None:
    store = await open_store()
    scopes = ["t:group:-1", "t:group:-1::u:5", "t:group:-12", "t:group:-2", "t:direct:9"]
    for scope in scopes:
        for label in ("a", "b"):
            await add(store, label, scope, f"{label} 100%_off in {scope}")
    first = await store.scopes_with_prefix("t:group:", after="", limit=2)
    assert first == [("t:group:-1", 2), ("t:group:-12", 2)]  # bytewise: '2' sorts before ':'
    rest = await store.scopes_with_prefix("t:group:", after=first[-1][0], limit=10)
    assert [scope for scope, _ in rest] == ["t:group:-1::u:5", "t:group:-2"]
    members = await store.blocks_with_prefix("t:group:-1::u:")
    assert [(b.scope, b.label) for b in members] == [
        ("t:group:-1::u:5", "a"),
        ("t:group:-1::u:5", "b"),
    ]
    # LIKE's wildcards in the text are literal; a search can keep to some key prefixes.
    found = await store.search_blocks("100%_OFF", limit=50, within=["t:group:"])
    assert len(found) == 8 and all(":direct:" not in b.scope for b in found)
    assert await store.search_blocks("0%x", limit=50) == []
    assert len(await store.search_blocks("%", limit=3)) == 3


async def test_audit_entries_filter_and_usage_per_day(open_store: Opener) -> None:
    store = await open_store()
    await add(store, "x", "g1", audited=True)
    (x,) = await store.blocks(["g1"])
    by_8 = Author("8", Channel.COMMAND)
    one_day = timedelta(days=1)
    await writes.update(
        store, x, now=NOW + one_day, limits=Limits(5), by=by_8, audited=True, content="y"
    )
    await add(store, "z", "g2")
    (z,) = await store.blocks(["g2"])
    await writes.delete(store, z, now=NOW + 2 * one_day, by=BY_7, audited=True)
    everything = await store.audit_entries()
    assert [e.action for e in everything] == ["remove", "edit", "add context"]
    assert [e.action for e in await store.audit_entries(actor="7")] == ["remove", "add context"]
    added = await store.audit_entries(group="g1", kind=ChangeKind.ADD)
    assert [e.action for e in added] == ["add context"]
    window = await store.audit_entries(since=NOW + one_day, until=NOW + 2 * one_day)
    assert [e.action for e in window] == ["edit"]
    assert [e.action for e in await store.audit_entries(offset=1, limit=1)] == ["edit"]
    # One change of several aspects is one entry, found by the kind of each.
    (x,) = await store.blocks(["g1"])
    await writes.update(
        store, x, now=NOW + 3 * one_day, limits=Limits(5), by=by_8, audited=True,
        content="w", level=Level.STRONG, priority=5,
    )  # fmt: skip
    (both,) = await store.audit_entries(since=NOW + 3 * one_day)
    assert (both.kind, both.detail) == (ChangeKind.EDIT, "content; level strong; priority 5")
    for kind in (ChangeKind.EDIT, ChangeKind.LEVEL, ChangeKind.PRIORITY):
        assert (await store.audit_entries(kind=kind))[0] == both
    assert [e.action for e in await store.audit_entries(kind=ChangeKind.LEVEL)] == [both.action]
    assert await store.audit_entries(kind=ChangeKind.STATE) == []
    for day, sender, group, tokens in (
        ("2026-01-01", "7", "", 10),
        ("2026-01-01", "8", "p:group:1", 5),
        ("2026-01-02", "7", "p:group:1", 1),
    ):
        await store.add_usage(
            platform="p", sender=sender, day=day, group_key=group, usage=UsageTotals(1, tokens)
        )
    everyone = await store.usage_days("2026-01-01")
    assert [(d, t.prompt_tokens) for d, t in everyone] == [("2026-01-01", 15), ("2026-01-02", 1)]
    of_seven = await store.usage_days("2026-01-01", sender=("p", "7"))
    assert [t.prompt_tokens for _, t in of_seven] == [10, 1]
    users, groups = await store.usage_report("2026-01-01", 1)
    assert [(u.key, u.totals.prompt_tokens) for u in users] == [("7", 11)]
    assert [g.key for g in groups] == ["p:group:1"]
    of_group = await store.usage_days("2026-01-02", group_key="p:group:1")
    assert [(d, t.prompt_tokens) for d, t in of_group] == [("2026-01-02", 1)]


@pytest.mark.parametrize("kind", [PROPOSALS, SUGGESTIONS], ids=["proposals", "suggestions"])
async def test_decisions_are_numbered_per_scope_limited_decided_once_and_shown(
    open_store: Opener, kind: Kind[Any, Any]
) -> None:
    store = await open_store()
    later = NOW + timedelta(hours=24)

    async def add(label: str, scope: str = "p:group:1", now: datetime = NOW) -> Any:
        made = (
            NewProposal(scope, label, "content", None, None, "why", "42")
            if kind is PROPOSALS
            else NewSuggestion(scope, label, f"About {label}.", "why", f"about{label}")
        )
        return await store.add_decision(kind, made, now=now, expires_at=later, max_pending=2)

    first, second = await add("a"), await add("b")
    assert (first and first.number, second and second.number) == (1, 2)
    assert await add("c") is None  # two pending at most
    other = await add("a", "p:group:2")
    assert other is not None and other.number == 1  # numbers are per scope
    # Two decisions at once (two store instances: two workers): exactly one counts.
    again = await open_store()
    declined = kind.status("rejected" if kind is PROPOSALS else "dismissed")
    decided = await asyncio.gather(
        store.decide_once(kind, "p:group:1", 1, declined, by="7", now=NOW),
        again.decide_once(kind, "p:group:1", 1, kind.status("expired"), by="8", now=NOW),
    )
    assert sorted(decided) == [False, True]
    one = await store.decision(kind, "p:group:1", 1)
    assert one is not None and one.decided_at == NOW
    assert (one.decided_by in ("7", "8")) is kind.decider  # who decided, where it is kept
    assert [d.number for d in await store.decisions(kind, "p:group:1")] == [2]
    # One past its expiry counts no more against the limit, though pending until marked.
    assert (await add("c", now=later)).number == 3
    kept = await store.decisions(kind, "p:group:1", ("pending", declined))
    assert [d.number for d in kept] in ([2, 3], [1, 2, 3])
    await store.show_decision(kind, "p:group:2", 1, "-2", "77")
    shown = await store.decision(kind, "p:group:2", 1)
    assert shown is not None and (shown.chat, shown.message_id) == ("-2", "77")
    assert await store.shown_at(kind, "p:group:2", "-2", "77")
    assert not await store.shown_at(kind, "p:group:1", "-2", "77")
    assert len((await store.dump())[kind.table]) == 4
    # A note kept with a decision is written in its transaction, its number last; a decision
    # refused (the scope holds its most) writes no note either.
    made = (
        NewProposal("p:group:3", "n", "content", None, None, "why", "42")
        if kind is PROPOSALS
        else NewSuggestion("p:group:3", "n", "About n.", "why", "aboutn")
    )
    for _ in range(2):
        await store.add_decision(
            kind, made, now=NOW, expires_at=later, max_pending=2, note=("made", "update-1 4")
        )
    assert (await store.notes("p:group:3"))["made"] == "update-1 4 2"
    refused = await store.add_decision(
        kind, made, now=NOW, expires_at=later, max_pending=2, note=("made", "update-2")
    )
    assert refused is None and (await store.notes("p:group:3"))["made"] == "update-1 4 2"


async def test_an_approval_decides_its_proposal_once_and_a_moved_group_keeps_them(
    open_store: Opener,
) -> None:
    store = await open_store()
    later = NOW + timedelta(hours=24)
    for label in ("a", "b"):
        proposed = NewProposal("p:group:1", label, "content", None, None, "why", "42")
        await store.add_decision(PROPOSALS, proposed, now=NOW, expires_at=later, max_pending=2)
    # An approval's block change marks its proposal applied in the same transaction.
    change = Author("7", Channel.PROPOSAL, Origin(proposal=2))
    await writes.insert(
        store, new("b", "p:group:1"), now=NOW, limits=TWENTY, by=change, audited=True
    )
    applied = await store.decision(PROPOSALS, "p:group:1", 2)
    assert applied is not None and applied.status is ProposalStatus.APPLIED
    assert applied.decided_by == "7"
    # A change carrying out a proposal decided already writes nothing.
    with pytest.raises(AlreadyDecided):
        await writes.insert(store, new("c", "p:group:1"), now=NOW, limits=TWENTY, by=change)
    assert [b.label for b in await store.blocks(["p:group:1"])] == ["b"]
    await store.show_decision(PROPOSALS, "p:group:1", 1, "-100", "55")
    # A migrated group keeps its proposals; a transfer copies them.
    await store.move_group(
        "p:group:1", "p:group:9", members_prefix="p:group:1::", sessions_prefix="p:group:1:"
    )
    moved = await store.decision(PROPOSALS, "p:group:9", 1)
    assert moved is not None and moved.message_id == "55" and moved.status is ProposalStatus.PENDING
    assert len((await store.dump())["proposals"]) == 2


async def test_retention_keeps_the_newest_version_of_a_removed_sensitive_label_withheld(
    open_store: Opener,
) -> None:
    """Versions before the moment go, but for the newest of a label removed while sensitive:
    it stays (so the review knows the label was sensitive), its content withheld."""
    from storage.models import ABSENT, WITHHELD, BlockChange, BlockState, Wanted, label_key

    store = await open_store()
    secret = BlockState("jump host 10.11.12.13", Level.CONTEXT, State.ACTIVE, sensitive=True)
    for label, state in (("srv", secret), ("note", dataclasses.replace(secret, sensitive=False))):
        wanted = (Wanted(label, state),)
        change = BlockChange("s", wanted, BY_7, {label_key(label): ABSENT})
        await store.apply_change(change, now=NOW, limits=TWENTY)
    for block in await store.blocks(["s"]):
        await writes.delete(store, block, now=NOW, by=BY_7)
    await add(store, "kept")
    await store.forget_versions_before(NOW + timedelta(days=1))
    (srv,) = await store.versions("s", "srv")
    assert srv.before is not None and srv.before.sensitive and srv.before.content == WITHHELD
    assert await store.versions("s", "note") == []
    assert await store.versions("s", "kept") == []
    await store.forget_versions_before(NOW + timedelta(days=2))  # again: nothing more changes
    assert [v.before for v in await store.versions("s", "srv")] == [srv.before]


async def test_a_blocks_keywords_and_end_are_written_read_and_kept_in_its_versions(
    open_store: Opener,
) -> None:
    """Keywords (any script, a comma inside one) and an end go in through the one write, come
    back from every read (another process's too: the cached decoding is no shared state), and
    a change keeps the state before it, keywords and end included."""
    writer, reader = await open_store(), await open_store()
    end = datetime(2026, 12, 24, 18, tzinfo=UTC)
    keywords = ("deploy", "发布", "release notes, v2")
    await writes.insert(
        writer,
        NewBlock("s", "runbook", "Run the checks.", Level.CONTEXT, triggers=keywords, ends_at=end),
        now=NOW,
        limits=TWENTY,
        by=BY_7,
    )
    await add(writer, "plain")
    for store in (writer, reader):
        blocks = {b.label: b for b in await store.blocks(["s"])}
        assert (blocks["runbook"].triggers, blocks["runbook"].ends_at) == (keywords, end)
        assert (blocks["plain"].triggers, blocks["plain"].ends_at) == ((), None)
        now_blocks, _ = await store.scope_now("s")
        assert {b.label: b.triggers for b in now_blocks}["runbook"] == keywords
        (_, exported) = (await store.export_scopes())["s"]
        assert {b.label: b.ends_at for b in exported}["runbook"] == end

    (runbook,) = [b for b in await writer.blocks(["s"]) if b.label == "runbook"]
    _, marks = await writer.scope_now("s")
    later = BlockState(
        runbook.content, runbook.level, runbook.state, triggers=(), ends_at=end + timedelta(days=1)
    )
    change = BlockChange(
        "s", (Wanted("runbook", later),), BY_7, {"runbook": Seen(runbook, marks["runbook"])}
    )
    (applied,) = await writer.apply_change(change, now=NOW, limits=TWENTY)
    assert applied.after == later
    (changed,) = [b for b in await reader.blocks(["s"]) if b.label == "runbook"]
    assert (changed.triggers, changed.ends_at) == ((), end + timedelta(days=1))
    newest, added = await reader.versions("s", "runbook")
    assert newest.before is not None
    assert (newest.before.triggers, newest.before.ends_at) == (keywords, end)
    assert (newest.kind, newest.detail) == (ChangeKind.TRIGGERS, "always")
    assert added.kind is ChangeKind.ADD and added.before is None


async def test_a_model_call_sees_every_change_to_blocks_that_wait_for_keywords(
    open_store: Opener,
) -> None:
    """One store keeps a scope's triggered blocks while the scope's version stays; a change by
    another store (another process), a move and a removal of every block each give it a new
    version, so the next call reads them again."""
    reader, writer = await open_store(), await open_store()
    scope, moved = "telegram:group:-1", "telegram:group:-2"

    async def waiting(at: str) -> list[tuple[str, tuple[str, ...]]]:
        blocks, _ = await reader.start_model_call([at])
        return sorted((b.content, b.triggers) for b in blocks if b.triggers)

    for n in range(3):
        new = NewBlock(scope, f"k{n}", f"text {n}", Level.CONTEXT, triggers=(f"word{n}",))
        await writes.insert(writer, new, now=NOW, limits=TWENTY, by=BY_7)
    await writes.insert(
        writer, NewBlock(scope, "plain", "always", Level.CONTEXT), now=NOW, limits=TWENTY, by=BY_7
    )
    assert len(await waiting(scope)) == 3
    (k0,) = [b for b in await writer.blocks([scope]) if b.label == "k0"]
    await writes.update(writer, k0, now=NOW, limits=TWENTY, by=BY_7, content="changed")
    assert ("changed", ("word0",)) in await waiting(scope)
    await writer.move_group(
        scope, moved, members_prefix=f"{scope}::u:", sessions_prefix=f"{scope}:"
    )
    assert await waiting(scope) == []
    assert len(await waiting(moved)) == 3
    assert await writes.clear(writer, moved, now=NOW, by=BY_7) == 4
    assert await waiting(moved) == []
    await writes.insert(
        writer,
        NewBlock(moved, "again", "new", Level.CONTEXT, triggers=("fresh",)),
        now=NOW,
        limits=TWENTY,
        by=BY_7,
    )
    assert await waiting(moved) == [("new", ("fresh",))]


# --- a group's own settings (issue 49) ---------------------------------------------------------

SET_GROUP, SET_TOPIC = "p:group:1", "p:group:1:topic:3"
BY_OWNER = Author("1", Channel.COMMAND)


def setting(
    values: dict[str, str | None],
    seen: dict[str, str | None],
    place: str = SET_GROUP,
    op: str = "op1",
    by: Author = BY_OWNER,
) -> SettingChange:
    return SettingChange(place, SET_GROUP, values, by, seen, op)


async def test_a_settings_change_is_written_once_with_its_version_and_audit_entry(
    open_store: Opener,
) -> None:
    store = await open_store()
    changed = await store.apply_settings(
        setting({"pins": "true", "trigger": '"all"'}, {"pins": None, "trigger": None}), now=NOW
    )
    assert sorted(changed) == ["pins", "trigger"]
    assert await store.settings_of([SET_GROUP, SET_TOPIC]) == {
        SET_GROUP: {"pins": "true", "trigger": '"all"'}
    }
    versions = await store.setting_versions(SET_GROUP)
    assert sorted((v.op, v.name, v.before, v.after, v.actor, v.channel) for v in versions) == [
        ("op1", "pins", None, "true", "1", "command"),
        ("op1", "trigger", None, '"all"', "1", "command"),
    ]
    entries = await store.audit_log(SET_GROUP, 10)
    assert sorted((e.kind, e.label, e.old_content, e.new_content, e.actor) for e in entries) == [
        (ChangeKind.SETTING, "pins", None, "true", "1"),
        (ChangeKind.SETTING, "trigger", None, '"all"', "1"),
    ]
    # A topic's change is in its group's audit trail, the topic named in the label.
    topic = setting({"trigger": '"mention"'}, {"trigger": None}, place=SET_TOPIC, op="op2")
    assert await store.apply_settings(topic, now=NOW) == ["trigger"]
    newest = (await store.audit_log(SET_GROUP, 1))[0]
    assert (newest.label, newest.new_content) == ("trigger:topic:3", '"mention"')
    assert await store.settings_under(SET_GROUP, f"{SET_GROUP}:") == {
        SET_GROUP: {"pins": "true", "trigger": '"all"'},
        SET_TOPIC: {"trigger": '"mention"'},
    }
    # The same value again changes nothing and records nothing.
    again = setting({"pins": "true"}, {"pins": "true"}, op="op3")
    assert await store.apply_settings(again, now=NOW) == []
    assert len(await store.setting_versions(SET_GROUP)) == 2
    assert len(await store.audit_log(SET_GROUP, 10)) == 3


async def test_a_settings_change_decided_on_what_changed_since_is_refused(
    open_store: Opener,
) -> None:
    """Two workers change the same setting from what each read: one is written, the other
    refused with Conflict and nothing of it written."""
    first, second = await open_store(), await open_store()
    await first.apply_settings(setting({"admins": '["5"]'}, {"admins": None}), now=NOW)
    results = await asyncio.gather(
        first.apply_settings(
            setting({"admins": '["5", "6"]'}, {"admins": '["5"]'}, op="a"), now=NOW
        ),
        second.apply_settings(
            setting({"admins": '["5", "7"]'}, {"admins": '["5"]'}, op="b"), now=NOW
        ),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "list"]
    (now,) = (await second.settings_of([SET_GROUP]))[SET_GROUP].values()
    assert now in ('["5", "6"]', '["5", "7"]')
    assert len(await first.setting_versions(SET_GROUP)) == 2
    assert len(await first.audit_log(SET_GROUP, 10)) == 2
    with pytest.raises(Conflict):
        await first.apply_settings(setting({"pins": "true"}, {"pins": "false"}), now=NOW)
    assert "pins" not in (await first.settings_of([SET_GROUP]))[SET_GROUP]


async def test_an_undo_reverts_the_last_operation_and_marks_it_undone(open_store: Opener) -> None:
    store = await open_store()
    await store.apply_settings(setting({"pins": "true"}, {"pins": None}, op="one"), now=NOW)
    later = NOW + timedelta(minutes=1)
    await store.apply_settings(
        setting({"pins": "false", "model": '"fast"'}, {"pins": "true", "model": None}, op="two"),
        now=later,
    )
    last = await store.last_setting_operation(SET_GROUP)
    assert sorted((v.op, v.name, v.before) for v in last) == [
        ("two", "model", None),
        ("two", "pins", "true"),
    ]
    back = SettingChange(
        SET_GROUP,
        SET_GROUP,
        {v.name: v.before for v in last},
        Author("1", Channel.UNDO),
        {"pins": "false", "model": '"fast"'},
        "undo1",
    )
    assert sorted(await store.undo_settings(back, "two", now=later)) == ["model", "pins"]
    assert await store.settings_of([SET_GROUP]) == {SET_GROUP: {"pins": "true"}}
    versions = await store.setting_versions(SET_GROUP)
    assert {v.undone_by for v in versions if v.op == "two"} == {"undo1"}
    assert {(v.channel, v.undone_by) for v in versions if v.op == "undo1"} == {("undo", None)}
    # The next undo reverts the operation before; the undo itself is never undone.
    assert [(v.op, v.name) for v in await store.last_setting_operation(SET_GROUP)] == [
        ("one", "pins")
    ]
    entries = await store.audit_log(SET_GROUP, 10)
    assert [e.channel for e in entries[:2]] == [Channel.UNDO, Channel.UNDO]


async def test_a_moved_group_takes_its_settings_and_a_forgotten_one_loses_them(
    open_store: Opener,
) -> None:
    store = await open_store()
    moved_to = "p:group:2"
    await store.apply_settings(setting({"pins": "true", "model": '"a"'}, {}), now=NOW)
    topic = setting({"trigger": '"all"'}, {}, place=SET_TOPIC, op="op2")
    await store.apply_settings(topic, now=NOW)
    # The new chat already set its model: it keeps its own.
    own = SettingChange(moved_to, moved_to, {"model": '"b"'}, BY_OWNER, {}, "op3")
    await store.apply_settings(own, now=NOW)
    await store.move_group(
        SET_GROUP, moved_to, members_prefix=f"{SET_GROUP}::u:", sessions_prefix=f"{SET_GROUP}:"
    )
    assert await store.settings_under(moved_to, f"{moved_to}:") == {
        moved_to: {"model": '"b"', "pins": "true"},
        f"{moved_to}:topic:3": {"trigger": '"all"'},
    }
    # What the new chat set itself stays at the old key, as a shared block does (moved == 1
    # above): it is never written over.
    assert await store.settings_under(SET_GROUP, f"{SET_GROUP}:") == {SET_GROUP: {"model": '"a"'}}
    assert {v.op for v in await store.setting_versions(f"{moved_to}:topic:3")} == {"op2"}
    # Each name's versions go where its value went: the old chat's model stays with its value,
    # so an undo under the new key reverts the new chat's own model, never the old chat's.
    assert {(v.op, v.name) for v in await store.setting_versions(SET_GROUP)} == {("op1", "model")}
    assert {(v.op, v.name) for v in await store.setting_versions(moved_to)} == {
        ("op1", "pins"),
        ("op3", "model"),
    }
    # Removed from the group, and past its grace: its settings and their versions go with it.
    await store.group_removed(moved_to, chat="p:2", now=NOW)
    forgotten = await store.forget_group(
        moved_to,
        members_prefix=f"{moved_to}::u:",
        sessions_prefix=f"{moved_to}:",
        chat="p:2",
        removed_before=NOW + timedelta(days=1),
    )
    assert forgotten is not None and forgotten["settings"] == 3
    assert await store.settings_under(moved_to, f"{moved_to}:") == {}
    assert await store.setting_versions(moved_to) == []
    assert await store.setting_versions(f"{moved_to}:topic:3") == []


# The tables a transfer leaves out, and why: the search index (built again from the blocks),
# derived sums (summed again on load), and what holds only while workers run.
NOT_TRANSFERRED = {
    "blocks_search",  # SQLite: the full-text index and its shadow tables
    "blocks_search_config",
    "blocks_search_data",
    "blocks_search_docsize",
    "blocks_search_idx",
    "blocks_search_noted",
    "sqlite_sequence",
    "pinbot_migrations",  # PostgreSQL: the steps applied
    "budget_holds",
    "chat_leases",
    "rate_buckets",
    "workers",
    "scope_version_counter",
    "scope_versions",
    "usage_day_sums",
    "usage_window_sums",
    "usage_windows",
}


async def test_a_transfer_copies_every_table_a_group_setting_included(
    open_store: Opener, tmp_path: Path
) -> None:
    store = await open_store()
    tables = await store._db.fetch(
        store._db.pick(
            sqlite="SELECT name FROM sqlite_master WHERE type = 'table'",
            postgres="SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public'",
        )
    )
    assert {t[0] for t in tables} - NOT_TRANSFERRED == set(TABLES)
    await store.apply_settings(setting({"pins": "true"}, {}), now=NOW)
    await store.apply_settings(
        setting({"pins": "false"}, {"pins": "true"}, place=SET_GROUP, op="op2"), now=NOW
    )
    dump = await store.dump()
    assert dump["group_settings"] == [(SET_GROUP, "pins", "false")]
    assert [row[:3] for row in dump["group_setting_versions"]] == [
        ("op1", SET_GROUP, "pins"),
        ("op2", SET_GROUP, "pins"),
    ]
    async with await Store.open(tmp_path / "copy.sqlite3") as copy:
        await copy.load(dump)
        assert await copy.settings_of([SET_GROUP]) == {SET_GROUP: {"pins": "false"}}
        assert [v.op for v in await copy.last_setting_operation(SET_GROUP)] == ["op2"]
        assert (await copy.dump())["group_setting_versions"] == dump["group_setting_versions"]
