"""What the metrics count, in-process: each count made where the message goes through the core,
labels held to their fixed sets, the model's calls timed, the inbox of a webhook worker read at
scrape time, and readiness. (tests/integration/test_metrics.py judges a real process from
outside, through Prometheus.)"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from bot import metrics
from bot.clock import utc_now
from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.transfer import apply_import, export_document, plan_import
from bot.core.replies import Result
from bot.llm.base import ModelError, ModelReply, ModelRequest, Progress, TextSink
from bot.llm.offline import OfflineChatModel
from bot.metrics.listener import Health
from bot.metrics.model import MeteredModel, metered
from storage import Store
from storage.dialect.base import watched
from storage.errors import Unavailable
from storage.schema import LATEST
from tests.conftest import BotFactory, ask, dm, group, make_config
from tests.fakes.clock import FakeClock
from tests.pg import PgCluster

WAIT_S = 60  # a safety net for a busy machine, never a pause


@pytest.fixture
def meters() -> Iterator[metrics.Meters]:
    yield metrics.enable(version="test", model="m", currency="USD")
    metrics.disable()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value (0 when it has none yet)."""
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def label_values(registry: CollectorRegistry) -> set[str]:
    from prometheus_client.exposition import generate_latest

    scrape = generate_latest(registry).decode()
    return {
        value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        for value in sample.labels.values()
    }


def test_nothing_is_counted_without_a_listener() -> None:
    assert metrics.active() is None
    metrics.update_received("telegram", "message")  # returns at once
    model = OfflineChatModel()
    assert metered(model) is model


def test_a_label_outside_its_set_is_counted_as_other(meters: metrics.Meters) -> None:
    metrics.update_received("telegram", "poll_answer_from_12345")
    metrics.update_received("matrix-9876", "message")
    metrics.refused("because user 4242 said so")
    metrics.blocks_written("somewhere-777", 2)
    r = meters.registry
    assert value(r, "pinbot_updates_received_total", platform="telegram", kind="other") == 1
    assert value(r, "pinbot_updates_received_total", platform="other", kind="message") == 1
    assert value(r, "pinbot_refusals_total", reason="other") == 1
    assert value(r, "pinbot_blocks_written_total", channel="other") == 2
    assert not [v for v in label_values(r) if any(n in v for n in ("12345", "9876", "4242", "777"))]


async def test_the_core_counts_handling_refusals_writes_and_compactions(
    make_bot: BotFactory, meters: metrics.Meters
) -> None:
    bot = make_bot(
        limits={"pin_commands_per_minute": 2, "model_turns_per_minute": 0},
        access={"allowed_users": ["42", "43"]},
        chat={"history_max_turns": 1, "compaction_keep_turns": 0, "compaction": "drop"},
    )
    await ask(bot, dm("42"), "/pin add tone be brief")
    await ask(bot, dm("42"), "/pin add tone again")  # the label is taken: a block rule
    await ask(bot, dm("42"), "/pin list")  # the third /pin within the minute
    await ask(bot, dm("99"), "hello")  # not on the access list
    for n in range(3):
        await ask(bot, dm("43"), f"question {n}")
    r = meters.registry
    assert value(r, "pinbot_handling_seconds_count", kind="command") == 3
    assert value(r, "pinbot_handling_seconds_count", kind="turn") == 4
    assert value(r, "pinbot_blocks_written_total", channel="command") == 1
    assert value(r, "pinbot_refusals_total", reason="block_rules") == 1
    assert value(r, "pinbot_refusals_total", reason="rate_limit") == 1
    assert value(r, "pinbot_refusals_total", reason="access") == 1
    assert value(r, "pinbot_history_compactions_total", outcome="dropped") >= 1
    assert value(r, "pinbot_store_transaction_seconds_count") > 0
    # the offline model reports no usage: its estimate is counted, as budgets count it
    assert value(r, "pinbot_model_tokens_total", kind="prompt", model="m") > 0


async def test_budget_refusals_are_counted(make_bot: BotFactory, meters: metrics.Meters) -> None:
    bot = make_bot(budgets={"user_daily_tokens": 1})
    await ask(bot, dm("42"), "first")  # spends the budget
    reply = await ask(bot, dm("42"), "second")
    assert reply is not None and "budget" in reply.text
    assert value(meters.registry, "pinbot_refusals_total", reason="budget") == 1


async def test_proposals_are_counted(
    make_bot: BotFactory, meters: metrics.Meters, store: Store
) -> None:
    bot = make_bot(pins={"enable_in_group": True})
    outcome = await bot.pins.proposals.propose(
        _context(bot, group("42")), "rules", "be kind", reason="asked"
    )
    assert "#1" in str(outcome)
    assert value(meters.registry, "pinbot_proposals_written_total", channel="proposal") == 1


def _context(bot: Any, conversation: Any) -> Any:
    from bot.core.people.context import MessageContext

    return MessageContext.resolve(conversation, bot.config.pins, None, bot.config.access)


class Streaming:
    """A model that streams two pieces of text, or fails, or is cut off."""

    def __init__(self, clock: FakeClock, *, fail: bool = False, cut_off: bool = False) -> None:
        self.fail, self.cut_off = fail, cut_off

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        if self.fail:
            raise ModelError("The model failed.", "test")
        if on_text is not None:
            await on_text("Hel")
            await on_text("Hello")
        return ModelReply("Hello", cut_off=self.cut_off)

    async def close(self) -> None:
        return None


async def test_model_calls_are_timed_with_their_first_text(
    meters: metrics.Meters, clock: FakeClock
) -> None:
    seen: list[str] = []

    async def sink(text: str) -> None:
        seen.append(text)

    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    await MeteredModel(Streaming(clock)).complete(request, on_text=sink)
    await MeteredModel(Streaming(clock)).complete(request)  # not streamed: no first text
    await MeteredModel(Streaming(clock, cut_off=True)).complete(request, on_text=sink)
    with pytest.raises(ModelError):
        await MeteredModel(Streaming(clock, fail=True)).complete(request, on_text=sink)
    r = meters.registry
    assert seen == ["Hel", "Hello", "Hel", "Hello"]  # the text still reaches the surface
    assert value(r, "pinbot_model_calls_total", outcome="ok", model="m") == 2
    assert value(r, "pinbot_model_calls_total", outcome="cut_off", model="m") == 1
    assert value(r, "pinbot_model_calls_total", outcome="failed", model="m") == 1
    assert value(r, "pinbot_model_call_seconds_count") == 4
    assert value(r, "pinbot_model_first_token_seconds_count") == 2


def test_only_an_unreachable_database_is_a_store_failure(meters: metrics.Meters) -> None:
    with watched(), watched():  # a statement inside a transaction is part of it
        pass
    with pytest.raises(Unavailable), watched():
        raise Unavailable("gone")
    with pytest.raises(KeyError), watched():
        raise KeyError("a refused write is the store working")
    r = meters.registry
    assert value(r, "pinbot_store_transaction_seconds_count") == 3
    assert value(r, "pinbot_store_failures_total") == 1


async def test_a_webhook_worker_reports_its_waiting_updates(
    store: Store, clock: FakeClock, meters: metrics.Meters
) -> None:
    await store.register_worker(now=clock())
    health = Health(store, inbox=True, clock=clock)
    await health.refresh(meters)
    r = meters.registry
    assert value(r, "pinbot_inbox_waiting_updates") == 0
    assert value(r, "pinbot_ready") == 1
    for n in range(3):
        await store.record_update(
            "telegram", str(n), chat="telegram:chat:1", position=n, payload="{}", now=clock()
        )
        clock.advance(seconds=1)
    await health.refresh(meters)
    assert value(r, "pinbot_inbox_waiting_updates") == 3
    assert value(r, "pinbot_inbox_oldest_wait_seconds") > 0
    while (pending := await store.next_update("telegram:chat:1")) is not None:
        await store.finish_update(pending.seq, now=clock())
    await health.refresh(meters)
    assert value(r, "pinbot_inbox_waiting_updates") == 0
    assert value(r, "pinbot_inbox_oldest_wait_seconds") == 0


async def test_readiness_says_what_is_not_ready(tmp_path: Any) -> None:
    store = await Store.open(tmp_path / "ready.sqlite3")
    assert await Health(store).not_ready() is None
    assert await Health(store, lambda: "the platform is away").not_ready() == (
        "the platform is away"
    )
    await store.close()
    reason = await Health(store).not_ready()
    assert reason is not None and reason.startswith("the database cannot be reached")


def _server_processes(cluster: PgCluster) -> list[int]:
    """The postmaster of cluster and every process it started."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *map(int, children)]


async def _probe(health: Health) -> str | None:
    """health.not_ready(), bounded by a safety net: a probe that hangs fails the test."""
    probe = asyncio.ensure_future(health.not_ready())
    done, _ = await asyncio.wait({probe}, timeout=WAIT_S)
    assert done, "the readiness probe hung on the frozen database"
    return probe.result()


@pytest.mark.xdist_group("postgres-outage")
async def test_readiness_answers_while_postgresql_is_frozen(meters: metrics.Meters) -> None:
    cluster = PgCluster().start()  # its own server: this test freezes it
    try:
        store = await Store.open(url=cluster.url())
        await store.register_worker(now=utc_now())
        health = Health(store, inbox=True, check_s=0.5)
        assert await _probe(health) is None
        frozen = _server_processes(cluster)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            # The check's connection hangs: not awaited, it is dropped; a probe after it asks
            # again on a new connection, which hangs in its turn (one check at a time).
            for _ in range(3):
                assert await _probe(health) == "the database did not answer within 0.5 s"
            done, _ = await asyncio.wait(
                {asyncio.ensure_future(health.refresh(meters))}, timeout=WAIT_S
            )
            assert done
            assert value(meters.registry, "pinbot_ready") == 0
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + WAIT_S  # a safety net for a busy machine, never a pause
        while (reason := await _probe(health)) is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # polling a server that is waking up
        assert reason is None
        await store.close()
    finally:
        cluster.stop()


async def test_readiness_says_so_while_another_connection_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.sqlite3"
    store = await Store.open(path)
    health = Health(store)
    assert await health.not_ready() is None
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # WAL still lets reads through, writes wait
        assert await store.schema_version() == LATEST  # what readiness asked before
        assert await health.not_ready() == (
            "the database is locked by another connection: nothing can be written now"
        )
        other.execute("ROLLBACK")
        assert await health.not_ready() is None
        # the checks left the store's own connection alone
        await store.record_update(
            "telegram", "1", chat="c", position=1, payload="{}", now=utc_now()
        )
    finally:
        other.close()
        await store.close()


async def test_a_block_rule_refusal_is_counted_when_it_is_given_not_when_built(
    make_bot: BotFactory, meters: metrics.Meters
) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["1"]})
    outcome = await bot.pins.proposals.propose(
        _context(bot, group("2")), "rules", "be kind", reason="asked"
    )
    assert "#1" in str(outcome)
    reply = await ask(bot, group("1"), "/pin shared approve 1")
    assert reply is not None and reply.text.startswith("Approved"), reply
    assert value(meters.registry, "pinbot_refusals_total", reason="block_rules") == 0
    reply = await ask(bot, group("1"), "/pin undo")  # refused, but by no block rule
    assert reply is not None and reply.outcome is Result.REFUSED
    assert value(meters.registry, "pinbot_refusals_total", reason="block_rules") == 0
    reply = await ask(bot, group("1"), "/pin shared add rules again")  # the label is taken
    assert reply is not None and reply.outcome is Result.REFUSED
    assert value(meters.registry, "pinbot_refusals_total", reason="block_rules") == 1


class Broken:
    """A model whose every call fails with a fault pinbot does not expect."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        raise RuntimeError("a fault")

    async def close(self) -> None:
        return None


async def test_a_failed_message_is_counted_and_logged_as_failed(
    make_bot: BotFactory, meters: metrics.Meters, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.core.entry.pinbot")
    reply = await ask(make_bot(Broken()), dm("42"), "hello")
    assert reply is not None and reply.outcome is Result.FAILED
    assert value(meters.registry, "pinbot_handling_seconds_count", kind="turn") == 1
    (handled,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("handled")]
    assert handled.startswith("handled turn session=console:direct:42 outcome=failed ms=")


async def test_an_import_counts_the_labels_it_changed(
    make_bot: BotFactory, store: Store, clock: FakeClock, meters: metrics.Meters
) -> None:
    bot = make_bot()
    for label in ("a", "b", "c"):
        await ask(bot, dm("42"), f"/pin add {label} text {label}")
    document = await export_document(store, clock())
    policy = BlockPolicy(make_config().pins)
    ops = BlockOps(store, policy)
    before = value(meters.registry, "pinbot_blocks_written_total", channel="import")
    plan = plan_import(document, policy, clock())
    await apply_import(ops, plan)  # the same blocks again: nothing changes
    assert plan.problems == []
    assert value(meters.registry, "pinbot_blocks_written_total", channel="import") == before == 0
    document["scopes"]["console:direct:42"]["blocks"][0]["content"] = "changed"
    plan = plan_import(document, policy, clock())
    await apply_import(ops, plan)
    assert plan.problems == []
    assert value(meters.registry, "pinbot_blocks_written_total", channel="import") == 1


async def test_readiness_says_the_schema_is_behind(tmp_path: Path) -> None:
    path = tmp_path / "behind.sqlite3"
    store = await Store.open(path)
    try:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute(f"PRAGMA user_version = {LATEST - 1}")  # as an older pinbot left it
        other.close()
        assert await Health(store).not_ready() == (
            f"the database schema is at step {LATEST - 1} and this pinbot needs step {LATEST}: "
            "run pinbot migrate"
        )
    finally:
        await store.close()


async def test_the_offline_backends_calls_are_labelled_offline(make_bot: BotFactory) -> None:
    """The model label is the model called: the built-in backend's, whatever llm.model says."""
    from bot.metrics.listener import counting

    config = make_config(metrics={"listen": "127.0.0.1:0"}, llm={"model": "gpt-4o-mini"})
    with counting(config) as meters:
        assert meters is not None
        await ask(make_bot(), dm("42"), "hello")
        r = meters.registry
        assert value(r, "pinbot_model_tokens_total", kind="prompt", model="offline") > 0
        assert "gpt-4o-mini" not in label_values(r)
