"""The metrics and health listener of a real `pinbot telegram` process (against the fake Bot API
and the fake model), judged from outside: by a real Prometheus server scraping it, by promtool,
by /healthz and /readyz while its PostgreSQL server stops and comes back, and by the series a
thousand distinct users leave behind."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import TOKEN, FakeTelegram, group_chat, message, private_chat, user
from tests.forked import Forks
from tests.pg import PgCluster
from tests.prometheus import Prometheus, promtool
from tests.workers import Worker

ROOT = Path(__file__).resolve().parents[2]
MODEL_KEY_ENV = "PINBOT_METRICS_MODEL_KEY"
DB_ENV = "PINBOT_METRICS_DB"
LISTENING = re.compile(r"metrics listening on http://127\.0\.0\.1:(\d+) ")
WAIT_S = 60  # a safety net for a process on a busy machine, never a pause
# The usage every answer of the fake model reports, and the price of its model.
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 7,
    "total_tokens": 127,
    "prompt_tokens_details": {"cached_tokens": 80},
}
PRICE = {"prompt": 2.0, "cached_prompt": 0.5, "completion": 8.0}  # per 1,000,000 tokens


@dataclass
class Running:
    """A running `pinbot telegram` with its metrics listener, the fakes it talks to."""

    worker: Worker
    telegram: FakeTelegram
    model: FakeOpenAI
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.get(self.url + path) as response:
            return response.status, await response.text()

    async def answered(self, count: int) -> None:
        """Wait until the bot has sent count replies in all."""
        await self.telegram.wait_for(lambda: len(self.telegram.sent()) >= count, WAIT_S)


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeTelegram, FakeOpenAI]]:
    telegram, model = await FakeTelegram().start(), await FakeOpenAI().start()
    model.usage = USAGE
    try:
        yield telegram, model
    finally:
        await telegram.stop()
        await model.stop()


async def start_bot(
    folder: Path,
    telegram: FakeTelegram,
    model: FakeOpenAI,
    forks: Forks,
    *,
    url: str | None = None,
    env: dict[str, str] | None = None,
    telegram_settings: dict[str, Any] | None = None,
    **sections: Any,
) -> Running:
    """`pinbot telegram` (polling) with metrics.listen on a free port, as an operator runs it
    (forked: tests/forked.py)."""
    settings: dict[str, Any] = {
        "storage": {"url_env": DB_ENV} if url else {"path": str(folder / "bot.sqlite3")},
        "telegram": telegram_settings or {"base_url": telegram.base_url, "poll_timeout_s": 1},
        "llm": {
            "backend": "openai",
            "base_url": model.base_url,
            "model": "fake-model",
            "api_key_env": MODEL_KEY_ENV,
            "max_retries": 0,
        },
        "pricing": {"currency": "EUR", "models": {"fake-model": PRICE}},
        "metrics": {"listen": "127.0.0.1:0"},
        **sections,
    }
    config = folder / "bot.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    env = {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        MODEL_KEY_ENV: "sk-metrics-test",
        DB_ENV: url or "",
        **(env or {}),
    }
    worker = Worker(["telegram", "--config", str(config)], env, 0, "/", forks=forks)
    await worker.start()
    ports = [int((await worker.logged(LISTENING)).group(1))]
    assert len(ports) == 1, "\n".join(worker.log)
    return Running(worker, telegram, model, ports[0])


async def stopped(running: Running) -> None:
    if running.worker.running:
        assert await running.worker.stop() == 0, "\n".join(running.worker.log)


async def test_prometheus_reads_the_counts_of_what_the_bot_did(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeOpenAI], forks: Forks
) -> None:
    telegram, model = fakes
    bot = await start_bot(tmp_path, telegram, model, forks)
    prometheus = await Prometheus([f"127.0.0.1:{bot.port}"]).start()
    try:
        adds, turns = 7, 4
        for n in range(adds):
            uid = 5_000_100 + n % 3
            telegram.push(message(private_chat(uid), f"/pin add note{n} text {n}", user(uid)))
        refused = message(private_chat(5_000_100), "/pin add note0 again", user(5_000_100))
        telegram.push(refused)  # note0 is taken: refused by a block rule
        for n in range(turns):
            uid = 5_000_200 + n
            telegram.push(message(private_chat(uid), f"question {n}", user(uid)))
        await bot.answered(adds + 1 + turns)

        expected = {
            'sum(pinbot_updates_received_total{platform="telegram",kind="message"})': adds
            + 1
            + turns,
            'pinbot_handling_seconds_count{kind="command"}': adds + 1,
            'pinbot_handling_seconds_count{kind="turn"}': turns,
            'pinbot_blocks_written_total{channel="command"}': adds,
            'pinbot_refusals_total{reason="block_rules"}': 1,
            'pinbot_model_calls_total{outcome="ok"}': turns,
            "pinbot_model_call_seconds_count": turns,
            'pinbot_model_tokens_total{kind="prompt",model="fake-model"}': turns * 120,
            'pinbot_model_tokens_total{kind="cached_prompt",model="fake-model"}': turns * 80,
            'pinbot_model_tokens_total{kind="completion",model="fake-model"}': turns * 7,
            "pinbot_ready": 1,
            'pinbot_version_info{version!=""}': 1,
        }
        seen = {query: await prometheus.wait_for(query, value) for query, value in expected.items()}
        assert seen == expected
        cost = turns * (40 * PRICE["prompt"] + 80 * PRICE["cached_prompt"] + 7 * 8.0) / 1e6
        spent = await prometheus.value('pinbot_model_cost_total{currency="EUR"}')
        assert spent == pytest.approx(cost)
        started = await prometheus.value("pinbot_start_time_seconds")
        assert started is not None and abs(started - time.time()) < 3600
        assert await prometheus.value('sum(pinbot_store_transaction_seconds_count{job="pinbot"})')

        # promtool lints a real scrape: names, units, help and types as Prometheus wants them.
        status, scrape = await bot.get("/metrics")
        assert status == 200
        checked = promtool("check", "metrics", stdin=scrape.encode())
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        await prometheus.stop()
        await stopped(bot)


def test_promtool_accepts_the_shipped_alert_rules() -> None:
    checked = promtool("check", "rules", str(ROOT / "docs/prometheus/alerts.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout + checked.stderr


def test_the_cache_alert_fires_only_where_the_provider_reports_cached_tokens(
    tmp_path: Path,
) -> None:
    """promtool's rule unit test: two models with the same traffic and no cache hits, one whose
    server reported cached tokens earlier in the day (its cache stopped working: alert) and one
    whose server never reports any (no cache to watch: no alert)."""
    tokens = "pinbot_model_tokens_total{{instance='a', kind='{kind}', model='{model}'}}"
    series = [
        {"series": tokens.format(kind="prompt", model="cached"), "values": "0+1000x300"},
        # cached tokens for the first hour, then none
        {
            "series": tokens.format(kind="cached_prompt", model="cached"),
            "values": "0+900x60 54000+0x240",
        },
        {"series": tokens.format(kind="prompt", model="local"), "values": "0+1000x300"},
        {"series": tokens.format(kind="cached_prompt", model="local"), "values": "0+0x300"},
    ]
    fired = {
        "exp_labels": {"severity": "warning", "instance": "a", "model": "cached"},
        "exp_annotations": {
            "summary": "model cache hit ratio on a under 30%",
            "description": "0% of prompt tokens came from the cache.",
        },
    }
    tests = {
        "rule_files": [str(ROOT / "docs/prometheus/alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "50m", "alertname": "PinbotCacheHitRatioLow", "exp_alerts": []},
                    {
                        "eval_time": "300m",
                        "alertname": "PinbotCacheHitRatioLow",
                        "exp_alerts": [fired],
                    },
                ],
            }
        ],
    }
    unit = tmp_path / "cache-alert-test.yml"
    unit.write_text(yaml.safe_dump(tests), encoding="utf-8")
    checked = promtool("test", "rules", str(unit))
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def poll(running: Running, path: str, wanted: int) -> tuple[int, str]:
    """Ask path until it answers wanted (a safety net bounds it), /healthz staying 200 all the
    while; the last answer."""
    deadline = time.monotonic() + WAIT_S
    while True:
        status, text = await running.get(path)
        assert (await running.get("/healthz")) == (200, "ok\n")
        if status == wanted or time.monotonic() > deadline:
            return status, text
        await asyncio.sleep(0.1)  # polling an external process until it answers


@pytest.mark.xdist_group("postgres-outage")
async def test_readyz_follows_the_database_and_healthz_stays_up(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeOpenAI], forks: Forks
) -> None:
    telegram, model = fakes
    cluster = PgCluster().start()  # its own server: this test stops it
    try:
        bot = await start_bot(tmp_path, telegram, model, forks, url=cluster.url())
        try:
            assert await poll(bot, "/readyz", 200) == (200, "ready\n")
            cluster.stop_server()
            status, reason = await poll(bot, "/readyz", 503)
            assert status == 503
            assert reason.startswith("not ready: the database cannot be reached"), reason
            cluster.start_server()
            assert await poll(bot, "/readyz", 200) == (200, "ready\n")
            # and the bot serves again
            telegram.push(message(private_chat(5_000_300), "/pin add back yes", user(5_000_300)))
            await bot.answered(1)
            assert telegram.sent()[-1]["text"].startswith("Saved ")
        finally:
            await stopped(bot)
    finally:
        cluster.stop()


def series(scrape: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every series of a scrape: its name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
    }


async def test_hundreds_of_users_leave_no_trace_in_the_labels(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeOpenAI], forks: Forks
) -> None:
    telegram, model = fakes
    bot = await start_bot(
        tmp_path,
        telegram,
        model,
        forks,
        pins={"enable_in_group": True},
    )
    # 50 users, then six times as many: a label that grew with users would show at once
    first_uid, users, early = 7_100_000, 300, 50
    said: list[str] = []  # every id, label and text the users sent

    def user_traffic(n: int) -> int:
        """User n's messages: a /pin add, a refused /pin add and a chat turn, in a DM or in a
        group of their own; how many replies they get."""
        uid = first_uid + n
        group = -1_007_200_000 - n
        chat = private_chat(uid) if n % 2 else group_chat(group)
        label, content = f"lbl{uid}", f"content{uid}"
        said.extend([str(uid), str(group), label, content])
        for text in (f"/pin add {label} {content}", f"/pin add {label} again", f"@pin_bot q{uid}"):
            telegram.push(message(chat, text, user(uid)))
        return 3

    try:
        expected = sum(user_traffic(n) for n in range(early))
        await bot.answered(expected)
        status, scrape = await bot.get("/metrics")
        assert status == 200
        after_few = series(scrape)
        expected += sum(user_traffic(n) for n in range(early, users))
        await bot.answered(expected)
        status, scrape = await bot.get("/metrics")
        after_all = series(scrape)
    finally:
        await stopped(bot)

    assert after_all == after_few  # the same series after 50 users and after 300
    assert len(after_all) < 400
    values = {value for _, labels in after_all for _, value in labels}
    assert not [v for v in values if any(part in v for part in said)]
    assert not [v for v in values if re.search(r"\d{5}", v)]  # no id-like value at all
    counted = {
        name: labels
        for name, labels in after_all
        if name == "pinbot_updates_received_total" and ("kind", "message") in labels
    }
    assert counted  # the traffic was counted, under fixed labels only


async def test_the_web_page_serves_its_own_metrics_and_health(tmp_path: Path, forks: Forks) -> None:
    config = tmp_path / "web.yaml"
    settings = {
        "storage": {"path": str(tmp_path / "web.sqlite3")},
        "web": {"port": free_port()},
        "metrics": {"listen": "127.0.0.1:0"},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    token = {"PINBOT_WEB_TOKEN": "t" * 32}
    worker = Worker(["web", "--config", str(config)], token, 0, "/", forks=forks)
    await worker.start()
    try:
        ports = [int((await worker.logged(LISTENING)).group(1))]
        assert len(ports) == 1, "\n".join(worker.log)
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{ports[0]}"
            for path, expected in (("/healthz", "ok\n"), ("/readyz", "ready\n")):
                async with session.get(base + path) as response:
                    assert (response.status, await response.text()) == (200, expected)
            async with session.get(base + "/metrics") as response:
                scrape = await response.text()
        assert "\npinbot_ready 1.0\n" in scrape
        assert "pinbot_store_transaction_seconds_count" in scrape
    finally:
        assert await worker.stop() == 0, "\n".join(worker.log)


async def scraped(running: Running, name: str) -> float:
    status, scrape = await running.get("/metrics")
    assert status == 200
    families = text_string_to_metric_families(scrape)
    (found,) = [sample.value for f in families for sample in f.samples if sample.name == name]
    return float(found)


async def test_a_webhook_worker_shows_the_updates_waiting_for_it(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeOpenAI], forks: Forks
) -> None:
    telegram, model = fakes
    model.release = asyncio.Event()  # the model answers only when the test says so
    hook = free_port()
    webhook = {
        "base_url": telegram.base_url,
        "mode": "webhook",
        "webhook_port": hook,
        "webhook_path": "/hook",
        "webhook_url": "https://bot.example.test/hook",
    }
    secret = {"TELEGRAM_WEBHOOK_SECRET": "metrics-webhook-secret"}
    bot = await start_bot(tmp_path, telegram, model, forks, env=secret, telegram_settings=webhook)
    try:
        assert await poll(bot, "/readyz", 200) == (200, "ready\n")
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret["TELEGRAM_WEBHOOK_SECRET"]}
        chat, sender = private_chat(5_000_400), user(5_000_400)
        async with aiohttp.ClientSession() as session:
            for n in range(3):
                update = {"update_id": 100 + n, **message(chat, f"q{n}", sender)}
                url = f"http://127.0.0.1:{hook}/hook"
                async with session.post(url, json=update, headers=headers) as response:
                    assert response.status == 200
        assert await scraped(bot, "pinbot_inbox_waiting_updates") == 3
        assert await scraped(bot, "pinbot_inbox_oldest_wait_seconds") > 0
        model.release.set()
        await bot.answered(3)
        deadline = time.monotonic() + WAIT_S
        while await scraped(bot, "pinbot_inbox_waiting_updates") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the last update is marked processed after its reply
        assert await scraped(bot, "pinbot_inbox_waiting_updates") == 0
        assert await scraped(bot, "pinbot_inbox_oldest_wait_seconds") == 0
        updates = 'pinbot_updates_received_total{kind="message",platform="telegram"}'
        assert f"\n{updates} 3.0\n" in (await bot.get("/metrics"))[1]
    finally:
        await stopped(bot)
