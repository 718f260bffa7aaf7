"""Several webhook workers on one PostgreSQL, as an operator runs them behind a load balancer:
real `pinbot telegram` / `pinbot feishu` processes (forked from one that imported pinbot once,
tests/forked.py), updates posted round-robin, workers killed and restarted while traffic flows.
Judged by the replies each chat gets, the requests the model receives and the blocks in the
database."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from storage import Store
from tests.fakes.feishu_server import APP_ID, APP_SECRET, VERIFICATION_TOKEN, FakeFeishu
from tests.fakes.feishu_server import receive_event as feishu_event
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.fakes.telegram_server import (
    TOKEN,
    FakeTelegram,
    group_chat,
    message,
    private_chat,
    tap,
    user,
)
from tests.forked import Forks
from tests.pg import PgCluster, fresh_database
from tests.process import run_pinbot_here
from tests.workers import WAIT_S, Cluster, Worker

# Each test runs several pinbot processes: at most two such tests at a time, each of two groups
# on one parallel worker (the groups share the module's time about equally).
FIRST = pytest.mark.xdist_group("pinbot-workers-1")
SECOND = pytest.mark.xdist_group("pinbot-workers-2")

SECRET = "webhook-secret-0000"
DB_ENV = "PINBOT_TEST_DB"

StartCluster = Callable[..., Awaitable[Cluster]]


KEY = "sk-test-key-"  # each worker's model API key is this and its index


def worker_key(index: int) -> str:
    """Worker index's own model API key, so each model request says which worker sent it."""
    return f"{KEY}{index}"


def asked_by(fake_openai: FakeOpenAI, request: int) -> int:
    """The index of the worker that sent the model's request number request."""
    return int(fake_openai.headers[request]["Authorization"].removeprefix(f"Bearer {KEY}"))


@pytest.fixture
async def start_cluster(
    tmp_path: Path, pg_url: str, fake_openai: FakeOpenAI, forks: Forks
) -> AsyncIterator[StartCluster]:
    clusters: list[Cluster] = []
    # The model echoes the newest user message, so each reply says which turn it answers.
    fake_openai.respond = lambda body: completion(f"echo {body['messages'][-1]['content']}")

    async def start(
        platform: str, count: int, *, url: str | None = None, **sections: Any
    ) -> Cluster:
        workers = []
        for index in range(count):
            port = free_port()
            settings: dict[str, Any] = {
                "storage": {"url_env": DB_ENV, "takeover_check_s": 0.1},
                "llm": {"backend": "openai", "base_url": fake_openai.base_url, "timeout_s": 30},
                "limits": {"pin_commands_per_minute": 0, "model_turns_per_minute": 0},
                **sections,
            }
            settings[platform] = {**settings.get(platform, {}), "webhook_port": port}
            config = tmp_path / f"{platform}{index}.yaml"
            config.write_text(yaml.safe_dump(settings), encoding="utf-8")
            env = {
                DB_ENV: url or pg_url,
                "OPENAI_API_KEY": worker_key(index),
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_WEBHOOK_SECRET": SECRET,
                "FEISHU_APP_SECRET": APP_SECRET,
                "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
            }
            path = settings[platform].get("webhook_path", "")
            args = [platform, "--config", str(config)]
            workers.append(Worker(args, env, port, path, forks=forks))
        await asyncio.gather(*(worker.start() for worker in workers))
        cluster = Cluster(workers)
        cluster.session = aiohttp.ClientSession()
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        for worker in cluster.workers:
            if worker.running:
                await worker.stop(signal.SIGKILL)
        if cluster.session is not None:
            await cluster.session.close()


def telegram_settings(fake_telegram: FakeTelegram, **extra: Any) -> dict[str, Any]:
    return {
        "base_url": fake_telegram.base_url,
        "mode": "webhook",
        "webhook_path": "/hook",
        "webhook_url": "https://bot.example.test/hook",
        **extra,
    }


HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
_update_ids = itertools.count(1)


def update(uid: int, text: str) -> dict[str, Any]:
    return {"update_id": next(_update_ids), **message(private_chat(uid), text, user(uid))}


def replies(fake_telegram: FakeTelegram, uid: int) -> list[str]:
    return [sent["text"] for sent in fake_telegram.sent(uid)]


def user_turns(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def assert_turns_in_order(fake_openai: FakeOpenAI) -> None:
    """Every model request holds, before its newest message, exactly the turns before it."""
    for request in fake_openai.requests:
        turns = user_turns(request)
        number = int(turns[-1].rsplit("m", 1)[1])
        assert turns == [f"m{n}" for n in range(1, number + 1)], turns


async def send_in_order(cluster: Cluster, uid: int, texts: list[str]) -> None:
    """One chat's messages, each posted once the previous one is acknowledged, as Telegram
    delivers them; consecutive ones go to different workers."""
    for text in texts:
        assert await cluster.post(update(uid, text), HEADERS) == 200


SCRIPT = ["/pin add a one", "m1", "m2", "/pin add b two", "m3", "m4"]


def expected(script: list[str]) -> list[str]:
    saved = {
        "/pin add a one": "Saved strong block 'a'.",
        "/pin add b two": "Saved strong block 'b'.",
    }
    return [saved.get(text, f"echo {text}") for text in script]


@FIRST
async def test_three_workers_keep_each_chats_order_and_lose_or_double_nothing(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, pg_url: str
) -> None:
    cluster = await start_cluster(
        "telegram", 3, telegram=telegram_settings(fake_telegram), pins={"max_blocks_per_session": 3}
    )
    chats = list(range(100, 112))
    await asyncio.gather(*(send_in_order(cluster, uid, SCRIPT) for uid in chats))
    await fake_telegram.wait_for(
        lambda: all(len(fake_telegram.sent(uid)) >= len(SCRIPT) for uid in chats), WAIT_S
    )
    for uid in chats:
        assert replies(fake_telegram, uid) == expected(SCRIPT), cluster.logs()
    assert len(fake_openai.requests) == 4 * len(chats)  # no turn twice
    assert_turns_in_order(fake_openai)

    # Eight adds to one chat at once, spread over the workers: the limit of 3 is exact.
    adds = [update(300, f"/pin add l{n} text") for n in range(8)]
    assert set(await asyncio.gather(*(cluster.post(a, HEADERS) for a in adds))) == {200}
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(300)) >= 8, WAIT_S)
    said = replies(fake_telegram, 300)
    assert sum(text.startswith("Saved") for text in said) == 3, said

    store = await Store.open(url=pg_url)
    try:
        for uid in chats:
            assert [b.label for b in await store.blocks([f"telegram:direct:{uid}"])] == ["a", "b"]
        assert len(await store.blocks(["telegram:direct:300"])) == 3
    finally:
        await store.close()


@FIRST
async def test_rate_limits_hold_across_workers(
    start_cluster: StartCluster, fake_telegram: FakeTelegram
) -> None:
    cluster = await start_cluster(
        "telegram",
        3,
        telegram=telegram_settings(fake_telegram),
        limits={"pin_commands_per_minute": 4, "model_turns_per_minute": 0},
    )
    lists = [update(7, "/pin list") for _ in range(9)]
    assert set(await asyncio.gather(*(cluster.post(u, HEADERS) for u in lists))) == {200}
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(7)) >= 9, WAIT_S)
    said = replies(fake_telegram, 7)
    assert sum("too fast" in text for text in said) == 5, said


@SECOND
async def test_a_feishu_message_delivered_to_every_worker_is_handled_once(
    start_cluster: StartCluster, fake_feishu: FakeFeishu, fake_openai: FakeOpenAI
) -> None:
    settings = {
        "app_id": APP_ID,
        "base_url": fake_feishu.base_url,
        "mode": "webhook",
        "webhook_path": "/feishu/events",
    }
    cluster = await start_cluster("feishu", 3, feishu=settings)
    add = feishu_event("/pin add tone Be brief.")
    hello = feishu_event("hello")

    def again(event: dict[str, Any], n: int) -> dict[str, Any]:
        """The event as delivered the n-th time: every other time under a new event id (one
        message, delivered again by Feishu as a new event)."""
        header = {**event["header"], "event_id": f"{event['header']['event_id']}-{n // 2}"}
        return {**event, "header": header} if n % 2 else event

    posts = [cluster.post_to(n % 3, again(e, n), {}) for e in (add, hello) for n in range(6)]
    assert set(await asyncio.gather(*posts)) == {200}
    await fake_feishu.wait_for_replies(2, WAIT_S)
    # Both events are processed: anything more would be a second handling.
    await cluster.post_to(0, feishu_event("/pin list"), {})
    await fake_feishu.wait_for_replies(3, WAIT_S)
    texts = fake_feishu.texts()
    assert len(texts) == 3 and len(fake_openai.requests) == 1, cluster.logs()
    assert sorted(texts[:2]) == ["Saved strong block 'tone'.", "echo hello"]
    # The list comes last in the chat's order: a second handling would have replied before it.
    assert texts[2].startswith("Your blocks (1 of ") and "1. tone (strong, active)" in texts[2]


@SECOND
async def test_a_worker_killed_mid_turn_loses_nothing_acknowledged(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, pg_url: str
) -> None:
    cluster = await start_cluster("telegram", 3, telegram=telegram_settings(fake_telegram))
    assert await cluster.post_to(0, update(5, "/pin add keep safe"), HEADERS) == 200
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(5)) == 1, WAIT_S)
    fake_openai.release = asyncio.Event()  # the model holds every answer back
    assert await cluster.post_to(0, update(5, "m1"), HEADERS) == 200
    await fake_openai.wait_for_requests(1, WAIT_S)
    # Usually worker 0, but another's watcher may take the chat up between worker 0 recording
    # the update and claiming the chat: the worker mid-turn is the one that asked the model.
    mid_turn = cluster.workers[asked_by(fake_openai, 0)]
    assert await cluster.post_to(1, update(5, "/pin add after later"), HEADERS) == 200
    assert await cluster.post_to(2, update(5, "m2"), HEADERS) == 200
    assert await mid_turn.stop(signal.SIGKILL) == -signal.SIGKILL
    fake_openai.release.set()
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(5)) >= 4, WAIT_S)
    assert replies(fake_telegram, 5) == [
        "Saved strong block 'keep'.",
        "echo m1",
        "Saved strong block 'after'.",
        "echo m2",
    ], cluster.logs()
    # The interrupted turn was asked again by the worker that took the chat over.
    assert [user_turns(r)[-1] for r in fake_openai.requests] == ["m1", "m1", "m2"]
    assert_turns_in_order(fake_openai)
    store = await Store.open(url=pg_url)
    try:
        assert [b.label for b in await store.blocks(["telegram:direct:5"])] == ["keep", "after"]
    finally:
        await store.close()


@FIRST
async def test_a_rolling_restart_during_traffic_loses_and_reorders_nothing(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    cluster = await start_cluster("telegram", 3, telegram=telegram_settings(fake_telegram))
    chats = list(range(200, 208))
    script = [f"m{n}" for n in range(1, 19)]
    phases = [script[:6], script[6:12], script[12:]]
    for worker, phase in zip(cluster.workers, phases, strict=True):  # one at a time
        # Each worker is stopped while every chat has a turn at the model and more waiting,
        # and comes back for the next phase.
        before = len(fake_openai.requests)
        fake_openai.release = asyncio.Event()  # the model holds its answers
        traffic = asyncio.gather(*(send_in_order(cluster, uid, phase) for uid in chats))
        await fake_openai.wait_for_requests(before + len(chats), WAIT_S)
        stopping = asyncio.create_task(worker.stop(signal.SIGTERM))
        await asyncio.sleep(0)  # let it send the signal
        assert len(fake_openai.requests) == before + len(chats)  # turns in flight, more queued
        fake_openai.release.set()
        assert await stopping == 0, "\n".join(worker.log)
        await traffic
        fake_openai.release = None
        await worker.start()
    await fake_telegram.wait_for(
        lambda: all(len(fake_telegram.sent(uid)) >= len(script) for uid in chats), WAIT_S
    )
    for uid in chats:
        assert replies(fake_telegram, uid) == [f"echo {text}" for text in script], cluster.logs()
    assert len(fake_openai.requests) == len(chats) * len(script)
    assert_turns_in_order(fake_openai)


@FIRST
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_second_poller_of_one_bot_is_refused_at_start(
    backend: str, tmp_path: Path, pg_url: str, fake_telegram: FakeTelegram, forks: Forks
) -> None:
    storage = {"url_env": DB_ENV} if backend == "postgres" else {"path": str(tmp_path / "db")}
    settings = {
        "storage": storage,
        "telegram": {"base_url": fake_telegram.base_url},
        # A refused second poller says nothing of metrics first: only why it was refused.
        "metrics": {"listen": "127.0.0.1:0"},
    }
    config = tmp_path / "polling.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    env = {DB_ENV: pg_url, "TELEGRAM_BOT_TOKEN": TOKEN}
    first = Worker(["telegram", "--config", str(config)], env, 0, "", forks=forks)
    await first.start()
    # The second poller's main in this process: refused at start, it needs no process of its own.
    code, out, err = await run_pinbot_here("telegram", "--config", str(config), env=env)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "only one process may poll a bot" in err and "webhook" in err
    assert await first.stop() == 0  # the first poller kept going
    assert TOKEN not in err + "\n".join(first.log)


@SECOND
async def test_a_users_budget_holds_across_three_workers(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, pg_url: str
) -> None:
    fake_openai.usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    fake_openai.release = asyncio.Event()  # the model answers when the test says so
    cluster = await start_cluster(
        "telegram",
        3,
        telegram=telegram_settings(fake_telegram, group_trigger="all"),
        budgets={"user_daily_tokens": 100},
    )
    chats = [-1001, -1002, -1003, -1004, -1005, -1006]

    def said() -> int:
        return sum(len(fake_telegram.sent(chat)) for chat in chats)

    posts = [
        {"update_id": next(_update_ids), **message(group_chat(chat), "hello", user(7))}
        for chat in chats
    ]
    assert set(await asyncio.gather(*(cluster.post(p, HEADERS) for p in posts))) == {200}
    await fake_openai.wait_for_requests(1)
    await fake_telegram.wait_for(lambda: said() >= 5, WAIT_S)  # five refused meanwhile
    assert len(fake_openai.requests) == 1, cluster.logs()
    fake_openai.release.set()
    await fake_telegram.wait_for(lambda: said() >= 6, WAIT_S)
    texts = [sent["text"] for chat in chats for sent in fake_telegram.sent(chat)]
    assert sum("budget for today is used up" in text for text in texts) == 5
    for n, chat in enumerate(chats * 2):  # one by one now: admitted while under the budget
        post = {"update_id": next(_update_ids), **message(group_chat(chat), f"m{n}", user(7))}
        assert await cluster.post(post, HEADERS) == 200
        expected = 7 + n
        await fake_telegram.wait_for(lambda: said() >= expected, WAIT_S)  # noqa: B023
    assert len(fake_openai.requests) == 2  # 0 and 60 were under 100; nothing after 120
    store = await Store.open(url=pg_url)
    try:
        today = time.strftime("%Y-%m-%d", time.gmtime())
        used = await store.sender_usage("telegram", "7", today, today)
    finally:
        await store.close()
    assert used.billed_tokens == 120 <= 100 + 60  # the budget plus one call at most


@SECOND
async def test_one_update_gets_one_answer_across_a_database_outage(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    own = PgCluster().start()  # stopped and started again here, so not the shared one
    try:
        url = await fresh_database(own)
        fake_openai.release = asyncio.Event()  # every turn waits on the model
        cluster = await start_cluster(
            "telegram", 3, url=url, telegram=telegram_settings(fake_telegram)
        )
        chats = list(range(500, 507))
        for uid in chats:  # one turn in flight per chat, and the next queued behind it
            await send_in_order(cluster, uid, ["m1", "m2"])
        await fake_openai.wait_for_requests(len(chats))
        own.stop_server()  # the database goes away while the turns wait on the model
        fake_openai.release.set()

        await until(lambda: cluster.logs().count("could not be recorded") >= len(chats))
        assert all(fake_telegram.sent(uid) == [] for uid in chats), cluster.logs()
        own.start_server()
        await fake_telegram.wait_for(
            lambda: all(len(fake_telegram.sent(uid)) >= 2 for uid in chats), WAIT_S
        )
        store = await Store.open(url=url)
        try:
            for uid in chats:  # every update processed: nothing left to answer again
                await until_async(functools.partial(store.next_update, f"telegram:{uid}"))
        finally:
            await store.close()
        for uid in chats:  # one answer each, in order: none lost, none twice
            assert replies(fake_telegram, uid) == ["echo m1", "echo m2"], cluster.logs()
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            own.stop()


async def until(condition: Callable[[], bool]) -> None:
    """Wait until condition holds, checking every few milliseconds (WAIT_S is a safety net)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.02)


async def until_async(nothing_left: Callable[[], Awaitable[object]]) -> None:
    """Wait until nothing_left() returns None (WAIT_S is a safety net)."""
    async with asyncio.timeout(WAIT_S):
        while await nothing_left() is not None:
            await asyncio.sleep(0.02)


@FIRST
async def test_one_tap_delivered_to_two_workers_applies_once(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, pg_url: str
) -> None:
    proposal = {"label": "deadline", "content": "Release on Friday."}
    fake_openai.script = [tool_calls(("pin_propose", proposal)), completion("Proposed.")]
    cluster = await start_cluster(
        "telegram",
        2,
        telegram=telegram_settings(fake_telegram),
        llm={
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "timeout_s": 30,
            "agent_tools": True,
        },
        pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]},
    )
    chat = group_chat(-1009)
    ask = {"update_id": next(_update_ids), **message(chat, "@pin_bot keep it", user(42))}
    assert await cluster.post(ask, HEADERS) == 200

    def posted() -> list[tuple[dict[str, Any], Any]]:
        return [(p, r) for p, r in fake_telegram.results("sendMessage") if "reply_markup" in p]

    await fake_telegram.wait_for(lambda: bool(posted()), WAIT_S)
    (params, result) = posted()[0]
    shown = {"message_id": result["message_id"], "text": params["text"]}
    tapped = {
        "update_id": next(_update_ids),
        **tap(
            chat, user(7), shown, params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        ),
    }
    statuses = await asyncio.gather(*(cluster.post_to(i, tapped, HEADERS) for i in (0, 1)))
    assert statuses == [200, 200]
    await fake_telegram.wait_for(lambda: bool(fake_telegram.called("editMessageText")), WAIT_S)
    # A later message of the chat is answered after the tap: by then every copy is done.
    later = {"update_id": next(_update_ids), **message(chat, "/pin shared list", user(42))}
    assert await cluster.post(later, HEADERS) == 200
    await fake_telegram.wait_for(
        lambda: any(
            "deadline" in s["text"] for s in fake_telegram.sent(-1009) if "reply_markup" not in s
        ),
        WAIT_S,
    )
    assert len(fake_telegram.called("answerCallbackQuery")) == 1, cluster.logs()
    (edit,) = fake_telegram.called("editMessageText")
    assert edit["text"].endswith("Approved by 7: saved.")
    store = await Store.open(url=pg_url)
    try:
        blocks = await store.blocks(["telegram:group:-1009"])
        assert [(b.label, b.content) for b in blocks] == [("deadline", "Release on Friday.")]
        assert len(await store.versions("telegram:group:-1009", "deadline")) == 1
    finally:
        await store.close()
