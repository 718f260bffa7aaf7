"""Every message answered exactly once through crashes: real `pinbot telegram` (polling) and
`pinbot feishu` (webhook) processes killed with SIGKILL at random points while messages keep
arriving, then run to the end; judged by the replies the fake platforms received (counted) and
the requests the model was asked.

A "point" is one request the bot makes of a platform or the model, the k-th since the process
started (k drawn at random): the process dies as the fake answers it, whatever else the bot
was doing meanwhile; on Feishu also as a request arrives, which is then dropped (killed while
its reply was on the wire: the reply the bot kept is sent by the next process, and Feishu's
uuid shows it once). Telegram has no such key: a reply whose request is lost with the process
after its update was marked done is lost, so no Telegram point falls in that window (it is
the time of one local write, between the commit and the request leaving). The processes are
forked from one that imported pinbot once (tests/forked.py): fifty restarts cost fifty forks,
not fifty imports."""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.fakes.feishu_server import APP_ID, APP_SECRET, VERIFICATION_TOKEN, FakeFeishu
from tests.fakes.feishu_server import receive_event as feishu_event
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user
from tests.forked import Forks

KILLS = 50
WAIT_S = 60  # a safety net for a hung bot, never a pause
SEED = 46  # the kill points are random, and the same on every run: a failure can be replayed
PATH = "/feishu/events"


def echo_model(fake_openai: FakeOpenAI) -> None:
    """The model answers "echo <the newest user message>": each reply says what it answers."""
    fake_openai.respond = lambda body: completion(f"echo {body['messages'][-1]['content']}")


def config_file(tmp_path: Path, fake_openai: FakeOpenAI, **sections: Any) -> str:
    settings = {
        "storage": {"path": str(tmp_path / "pins.sqlite3"), "takeover_check_s": 0.1},
        "llm": {"backend": "openai", "base_url": fake_openai.base_url, "timeout_s": 30},
        "limits": {"pin_commands_per_minute": 0, "model_turns_per_minute": 0},
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return str(path)


class KillSwitch:
    """Kills the running bot as the fakes answer its k-th request since it started."""

    def __init__(self, forks: Forks) -> None:
        self.forks = forks
        self.pid: int | None = None
        self.at: int | None = None
        self.seen = 0

    def arm(self, pid: int | None, at: int | None) -> None:
        """Kill pid at its at-th request (None: let it run)."""
        self.pid, self.at, self.seen = pid, at, 0

    def request(self, *_: object) -> bool:
        """One point passed; whether the bot was killed there."""
        self.seen += 1
        if self.pid is not None and self.seen == self.at:
            self.forks.kill(self.pid)
            return True
        return False


def answered(texts: list[str]) -> Counter[str]:
    return Counter(text for text in texts if text.startswith("echo "))


async def test_a_poller_killed_fifty_times_answers_every_message_once(
    tmp_path: Path, forks: Forks, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    echo_model(fake_openai)
    telegram = {"base_url": fake_telegram.base_url, "poll_timeout_s": 1}
    args = ("telegram", "--config", config_file(tmp_path, fake_openai, telegram=telegram))
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "OPENAI_API_KEY": "sk-test"}
    kill = KillSwitch(forks)
    fake_telegram.on_call = kill.request
    fake_openai.on_request = kill.request
    draw = random.Random(SEED)
    chat, sender = private_chat(5), user(5)
    texts: list[str] = []

    def replies() -> list[str]:
        return [sent["text"] for sent in fake_telegram.sent(5)]

    for _ in range(KILLS):
        for _ in range(draw.randint(1, 2)):  # messages keep arriving, the bot up or not
            texts.append(f"m{len(texts) + 1}")
            fake_telegram.push(message(chat, texts[-1], sender))
        pid = await forks.fork(*args, env=env)
        kill.arm(pid, draw.randint(1, 12))
        assert await forks.ended(pid) == -signal.SIGKILL, "\n".join(forks.log)
        assert max(answered(replies()).values(), default=1) == 1, replies()
    kill.arm(None, None)
    pid = await forks.fork(*args, env=env)
    last = fake_telegram.updates[-1]["update_id"]
    await fake_telegram.wait_for(
        lambda: fake_telegram.confirmed >= last and len(answered(replies())) == len(texts), WAIT_S
    )
    assert answered(replies()) == Counter(f"echo {text}" for text in texts), "\n".join(forks.log)
    assert len(replies()) == len(texts)  # nothing else was sent, nothing twice
    asked = {request["messages"][-1]["content"] for request in fake_openai.requests}
    assert set(texts) <= asked  # an interrupted turn is asked again (the rest: compactions)


async def test_a_poller_killed_while_the_model_answers_answers_after_its_restart_once(
    tmp_path: Path, forks: Forks, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    echo_model(fake_openai)
    telegram = {"base_url": fake_telegram.base_url, "poll_timeout_s": 1}
    args = ("telegram", "--config", config_file(tmp_path, fake_openai, telegram=telegram))
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "OPENAI_API_KEY": "sk-test"}
    fake_openai.release = asyncio.Event()  # the model holds its answer back
    pushed = fake_telegram.push(message(private_chat(5), "m1", user(5)))
    pid = await forks.fork(*args, env=env)
    await fake_openai.wait_for_requests(1, WAIT_S)
    assert fake_telegram.confirmed < pushed["update_id"] or fake_telegram.sent(5) == []
    forks.kill(pid)
    assert await forks.ended(pid) == -signal.SIGKILL
    fake_openai.release.set()
    assert fake_telegram.sent(5) == []
    pid = await forks.fork(*args, env=env)
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(5)) == 1, WAIT_S)
    # Once more round the poll: nothing else comes for that message.
    fake_telegram.push(message(private_chat(5), "m2", user(5)))
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent(5)) == 2, WAIT_S)
    assert [sent["text"] for sent in fake_telegram.sent(5)] == ["echo m1", "echo m2"]
    assert len(fake_openai.requests) == 3  # m1 asked again after the kill, then m2


class FeishuDeliveries:
    """Feishu's side of a webhook: each event posted until the bot acknowledges it (200), and
    posted again when it does not (the bot down, or killed while answering)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}{PATH}"
        self.waiting: list[dict[str, Any]] = []
        self.acknowledged: list[dict[str, Any]] = []
        self.posted: set[str] = set()  # the event ids posted at least once

    def fresh(self) -> int:
        """How many waiting events are messages the bot cannot have seen yet."""
        return sum(
            1
            for event in self.waiting
            if event["header"]["event_id"] not in self.posted
            and not event["header"]["event_id"].endswith("-again")
        )

    async def deliver(self, session: aiohttp.ClientSession) -> None:
        """Post every waiting event once, concurrently; those acknowledged stop waiting."""

        async def post(event: dict[str, Any]) -> bool:
            self.posted.add(event["header"]["event_id"])
            try:
                async with session.post(self.url, json=event) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        results = await asyncio.gather(*(post(event) for event in self.waiting))
        self.acknowledged += [e for e, ok in zip(self.waiting, results, strict=True) if ok]
        self.waiting = [e for e, ok in zip(self.waiting, results, strict=True) if not ok]


async def started_or_ended(forks: Forks, pid: int, since: int) -> bool:
    """Wait until the bot says it started (True) or its process ends (False)."""
    started = asyncio.create_task(forks.line(" started (", since))
    ended = asyncio.create_task(forks.ended(pid))
    done, _ = await asyncio.wait({started, ended}, timeout=WAIT_S, return_when="FIRST_COMPLETED")
    started.cancel()
    ended.cancel()
    assert done, "\n".join(forks.log)
    return started in done


async def test_a_feishu_worker_killed_fifty_times_answers_every_message_once(
    tmp_path: Path, forks: Forks, fake_feishu: FakeFeishu, fake_openai: FakeOpenAI
) -> None:
    echo_model(fake_openai)
    port = free_port()
    feishu = {
        "app_id": APP_ID,
        "base_url": fake_feishu.base_url,
        "mode": "webhook",
        "webhook_path": PATH,
        "webhook_port": port,
    }
    args = ("feishu", "--config", config_file(tmp_path, fake_openai, feishu=feishu))
    env = {
        "FEISHU_APP_SECRET": APP_SECRET,
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
        "OPENAI_API_KEY": "sk-test",
    }
    kill = KillSwitch(forks)
    fake_feishu.on_call = kill.request
    fake_openai.on_request = kill.request
    feishu_side = FeishuDeliveries(port)
    draw = random.Random(SEED)
    texts: list[str] = []
    users = ["ou_a", "ou_b", "ou_c"]

    def new_event() -> dict[str, Any]:
        texts.append(f"m{len(texts) + 1}")
        person = draw.choice(users)
        return feishu_event(texts[-1], open_id=person, chat_id=f"oc_{person}")

    async with aiohttp.ClientSession() as session:
        for _ in range(KILLS):
            feishu_side.waiting += [new_event() for _ in range(draw.randint(1, 3))]
            if feishu_side.acknowledged and draw.random() < 0.3:
                # Feishu delivers an acknowledged message again, under a new event id.
                again = json.loads(json.dumps(draw.choice(feishu_side.acknowledged)))
                again["header"]["event_id"] += "-again"
                feishu_side.waiting.append(again)
            since = len(forks.log)
            pid = await forks.fork(*args, env=env)
            # A worker asks Feishu twice as it starts (two points each), then the model (one)
            # and Feishu (two) for each new message: a point it reaches, even with nothing left
            # from before.
            kill.arm(pid, draw.randint(1, 4 + 3 * feishu_side.fresh()))
            if await started_or_ended(forks, pid, since):
                await feishu_side.deliver(session)
            assert await forks.ended(pid) == -signal.SIGKILL, "\n".join(forks.log)
            assert max(answered(fake_feishu.texts()).values(), default=1) == 1
        kill.arm(None, None)
        since = len(forks.log)
        pid = await forks.fork(*args, env=env)
        assert await started_or_ended(forks, pid, since)
        await feishu_side.deliver(session)
        assert feishu_side.waiting == []
        await fake_feishu.wait_for(lambda: len(answered(fake_feishu.texts())) == len(texts), WAIT_S)
    assert answered(fake_feishu.texts()) == Counter(f"echo {text}" for text in texts)
    assert len(fake_feishu.replies) == len(texts), "\n".join(forks.log)  # none twice
