"""The Feishu adapter with real-format event payloads POSTed to its webhook (through lark-oapi's
dispatcher) and a fake Feishu OpenAPI server on 127.0.0.1, judged by the replies it records and
the blocks stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot.adapters.feishu import FeishuFrontend, Mention, resolve_mentions
from bot.adapters.feishu_api import CALL_ATTEMPTS, FeishuApi
from bot.adapters.kit import RefusalLog, Sent
from bot.core.entry.pinbot import UNREADABLE_REPLY, Pinbot
from bot.core.replies import Reply
from bot.llm.offline import OfflineChatModel
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import FEISHU_IN_PROCESS, TEST_KEY_ENV, agent_llm, make_config
from tests.fakes.clock import FakeClock
from tests.fakes.feishu_server import (
    APP_ID,
    APP_SECRET,
    BOT_OPEN_ID,
    VERIFICATION_TOKEN,
    FakeFeishu,
    card_action,
    card_text,
    encrypt,
    mention,
    receive_event,
    signature_headers,
    url_verification,
)
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.process import run_pinbot_here

pytestmark = FEISHU_IN_PROCESS  # they start Feishu frontends in this process

ENCRYPT_KEY = "encrypt-key-value"
BOT = mention("@_user_1", BOT_OPEN_ID, "pinbot")


class Harness:
    def __init__(self, frontend: FeishuFrontend, server: FakeFeishu, store: Store) -> None:
        self.frontend = frontend
        self.server = server
        self.store = store
        self.url = f"http://127.0.0.1:{frontend.port}/feishu/events"

    async def post(
        self,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        body = raw if raw is not None else json.dumps(payload).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.url, data=body, headers={"Content-Type": "application/json", **(headers or {})}
            ) as response,
        ):
            text = await response.text()
            return response.status, json.loads(text) if text else None

    async def send(self, payload: dict[str, Any], **kwargs: Any) -> list[str]:
        """POST an event, wait until it is processed, return the texts of all replies so far."""
        status, _ = await self.post(payload, **kwargs)
        assert status == 200
        await self.frontend.idle()
        return self.server.texts()


@pytest.fixture
async def start_feishu(
    fake_feishu: FakeFeishu, store: Store, clock: FakeClock
) -> AsyncIterator[Any]:
    running: list[tuple[FeishuFrontend, Any]] = []

    async def fake_sleep(seconds: float) -> None:
        fake_feishu.slept.append(seconds)

    async def start(
        *,
        encrypt_key: str = "",
        on: Store | None = None,
        model: Any = None,
        monotonic: Any = time.monotonic,
        **sections: Any,
    ) -> Harness:
        feishu = {
            "app_id": APP_ID,
            "base_url": fake_feishu.base_url,
            "webhook_port": free_port(),
            **sections.pop("feishu", {}),
        }
        config = make_config(feishu=feishu, **sections)
        model = model or OfflineChatModel()
        pinbot = Pinbot(config, on or store, model, clock=clock)
        frontend = FeishuFrontend(
            pinbot,
            config.feishu,
            FeishuApi(config.feishu, APP_SECRET, monotonic, fake_sleep),
            verification_token=VERIFICATION_TOKEN,
            encrypt_key=encrypt_key,
            clock=clock,
            sleep=fake_sleep,
            monotonic=monotonic,
        )
        await frontend.start()
        running.append((frontend, model))
        return Harness(frontend, fake_feishu, on or store)

    yield start
    # The model's client too: one left open is closed by the garbage collector in a later
    # test, whose loop it does not belong to (logged there as a task's failure).
    for frontend, model in running:
        await frontend.stop()
        await model.close()


async def test_url_verification_and_token_check(start_feishu: Any) -> None:
    bot = await start_feishu()
    assert await bot.post(url_verification()) == (200, {"challenge": "challenge-code-123"})
    status, _ = await bot.post(url_verification(token="forged"))
    assert status == 401
    status, _ = await bot.post(receive_event("/pin add a b", token="forged"))
    assert status == 401
    status, _ = await bot.post({}, raw=b"not json at all")
    assert status == 400
    await bot.frontend.idle()
    assert bot.server.replies == [] and await bot.store.blocks(["feishu:direct:ou_user1"]) == []


async def test_the_challenge_is_answered_as_json_whatever_it_holds(start_feishu: Any) -> None:
    bot = await start_feishu()
    encrypted = await start_feishu(encrypt_key=ENCRYPT_KEY)
    # Echoed into JSON as written, the first would add a key "x", the second break the JSON.
    for challenge in ('c-1","x":"1', 'c-2\\"}\n'):
        answer = await bot.post(url_verification(challenge=challenge))
        assert answer == (200, {"challenge": challenge})
        body = json.dumps(encrypt(url_verification(challenge=challenge), ENCRYPT_KEY)).encode()
        assert await encrypted.post({}, raw=body) == (200, {"challenge": challenge})
        status, _ = await bot.post(url_verification(token="forged", challenge=challenge))
        assert status == 401


async def test_p2p_pin_and_chat(start_feishu: Any, fake_feishu: FakeFeishu) -> None:
    bot = await start_feishu()
    assert bot.frontend.bot_open_id == BOT_OPEN_ID
    texts = await bot.send(receive_event('/pin add tone 请简短回答 <at user_id="all">'))
    assert texts == ["Saved strong block 'tone'."]
    texts = await bot.send(receive_event("你好"))
    assert "pinned blocks: tone (strong, personal)" in texts[-1]
    assert texts[-1].endswith("You said: 你好")
    (block,) = await bot.store.blocks(["feishu:direct:ou_user1"])
    assert block.content == '请简短回答 <at user_id="all">'
    reply = fake_feishu.replies[0]
    assert reply["msg_type"] == "post" and reply["message_id"].startswith("om_")
    await bot.send(receive_event("/pin list"))
    listing = json.loads(fake_feishu.replies[-1]["content"])["zh_cn"]["content"]
    assert [{"tag": "text", "text": '请简短回答 <at user_id="all">'}] in listing  # literal text
    assert len(fake_feishu.token_requests) == 1  # one cached token for every call
    assert set(fake_feishu.auth_headers) == {"Bearer t-token-1"}


def bot_removed(chat_id: str, open_id: str) -> dict[str, Any]:
    """An `im.chat.member.bot.deleted_v1` event: open_id removed the bot from chat_id."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": f"ev_removed_{chat_id}",
            "token": VERIFICATION_TOKEN,
            "create_time": "1767225600000",
            "event_type": "im.chat.member.bot.deleted_v1",
            "tenant_key": "tenant_1",
            "app_id": APP_ID,
        },
        "event": {
            "chat_id": chat_id,
            "operator_id": {"open_id": open_id, "user_id": "u_admin", "union_id": "on_admin"},
            "external": False,
            "operator_tenant_key": "tenant_1",
            "name": "Team",
        },
    }


async def test_the_bot_removed_from_a_group_is_logged_and_its_blocks_stay(
    start_feishu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_feishu(pins={"enable_in_group": True, "group_shared_admin_ids": ["u_admin"]})
    caplog.set_level(logging.INFO, logger="bot")
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_group"}
    added = receive_event(
        "@_user_1 /pin shared add rules Be kind",
        mentions=[BOT],
        open_id="ou_admin",
        user_id="u_admin",
        **group,
    )
    assert (await bot.send(added))[-1] == "Saved context block 'rules'."
    replies = len(bot.server.replies)
    await bot.send(bot_removed("oc_group", "ou_admin"))
    removals = [m for m in caplog.messages if m.startswith("removed from")]
    assert removals == ["removed from feishu:group:oc_group by ou_admin"]
    assert len(bot.server.replies) == replies  # nothing posted to a chat the bot has left
    (block,) = await bot.store.blocks(["feishu:group:oc_group"])
    assert (block.label, block.content) == ("rules", "Be kind")


def for_app(payload: dict[str, Any], app_id: str) -> dict[str, Any]:
    """The event or callback payload as Feishu sends it for the app app_id."""
    return {**payload, "header": {**payload["header"], "app_id": app_id}}


async def test_events_for_another_app_are_not_acted_on(
    start_feishu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pins = {"enable_in_group": True, "group_shared_admin_ids": ["ou_admin"]}
    bot = await start_feishu(pins=pins)
    caplog.set_level(logging.INFO, logger="bot")
    event = receive_event("/pin add elsewhere x", event_id="ev_other_app")
    # Authentic (its token is right), so acknowledged: a refusal would only be delivered again.
    assert (await bot.post(for_app(event, "cli_other_app")))[0] == 200
    tap = card_action({"pinbot": "pinbot:proposal:approve:1"}, open_id="ou_admin")
    assert await bot.post(for_app(tap, "cli_other_app")) == (200, {})  # no toast
    assert (await bot.post(for_app(bot_removed("oc_group", "ou_admin"), "cli_other_app")))[0] == 200
    # The long connection hands events to the same callbacks.
    payload = json.dumps(for_app(receive_event("/pin add via-ws x"), "cli_other_app")).encode()
    await asyncio.to_thread(bot.frontend.dispatcher._do_without_validation, payload)
    await bot.frontend.idle()
    assert bot.server.replies == [] and bot.server.card_updates == []
    assert await bot.store.blocks(["feishu:direct:ou_user1"]) == []
    assert not [m for m in caplog.messages if m.startswith("removed from")]
    warnings = [r for r in caplog.records if "cli_other_app" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert VERIFICATION_TOKEN not in caplog.text and APP_SECRET not in caplog.text
    # Not recorded either: the same event for this app is taken, and answered.
    assert await bot.send(event) == ["Saved strong block 'elsewhere'."]
    # An event that names no app (older payloads) is taken as this app's.
    unnamed = receive_event("/pin add unnamed x")
    del unnamed["header"]["app_id"]
    assert (await bot.send(unnamed))[-1] == "Saved strong block 'unnamed'."


async def test_group_mentions_topics_and_triggers(start_feishu: Any) -> None:
    bot = await start_feishu(pins={"enable_in_group": True, "group_shared_admin_ids": ["u_admin"]})
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_group"}
    await bot.send(receive_event("just talking", **group))
    assert bot.server.replies == []
    other = mention("@_user_2", "ou_other", "Zhang")
    texts = await bot.send(receive_event("@_user_1 hello @_user_2", mentions=[BOT, other], **group))
    assert texts[-1].endswith("You said: hello @Zhang")
    texts = await bot.send(
        receive_event(
            "@_user_1 /pin shared add rules Be kind",
            mentions=[BOT],
            open_id="ou_admin",
            user_id="u_admin",
            **group,
        )
    )
    assert texts[-1] == "Saved context block 'rules'."
    texts = await bot.send(
        receive_event(
            "@_user_1 /pin add mine in a thread", mentions=[BOT], thread_id="omt_1", **group
        )
    )
    assert texts[-1] == "Saved context block 'mine'."
    texts = await bot.send(
        receive_event("@_user_1 what now", mentions=[BOT], root_id="om_root", **group)
    )
    assert "rules (context, shared); mine (context, personal)" in texts[-1]
    assert [b.label for b in await bot.store.blocks(["feishu:group:oc_group"])] == ["rules"]
    assert [b.label for b in await bot.store.blocks(["feishu:group:oc_group::u:ou_user1"])] == [
        "mine"
    ]
    assert [e.content for e in await bot.store.history("feishu:group:oc_group:topic:om_root")] == [
        "what now",
        texts[-1],
    ]


async def test_group_commands_need_the_mention_unless_the_trigger_is_all(
    start_feishu: Any,
) -> None:
    # Feishu cannot address a command to one bot (no /pin@bot) and several bots share groups.
    pins = {"enable_in_group": True}
    bot = await start_feishu(pins=pins)
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_group"}
    await bot.send(receive_event("/pin add unasked x", **group))
    other = mention("@_user_2", "ou_other_bot", "Helper")
    await bot.send(receive_event("@_user_2 /pin list", mentions=[other], **group))
    assert bot.server.replies == []
    texts = await bot.send(receive_event("@_user_1 /pin add asked x", mentions=[BOT], **group))
    assert texts == ["Saved context block 'asked'."]
    assert (await bot.send(receive_event("/pin list")))[-1].startswith("You have no blocks")  # DM
    everyone = await start_feishu(pins=pins, feishu={"group_trigger": "all"})
    texts = await everyone.send(receive_event("/pin list", chat_type="group", chat_id="oc_all"))
    assert texts[-1].startswith("You have no personal blocks in this group")
    mine = "feishu:group:oc_group::u:ou_user1"
    assert [b.label for b in await bot.store.blocks([mine])] == ["asked"]


async def test_group_trigger_all(start_feishu: Any) -> None:
    bot = await start_feishu(feishu={"group_trigger": "all"})
    texts = await bot.send(receive_event("anyone?", chat_type="group", chat_id="oc_g"))
    assert texts[-1].endswith("You said: anyone?")


async def test_missing_sender_and_other_chat_types_are_refused(start_feishu: Any) -> None:
    bot = await start_feishu(pins={"enable_in_group": True})
    texts = await bot.send(
        receive_event("@_user_1 /pin add a b", mentions=[BOT], open_id=None, chat_type="group")
    )
    assert "no sender id" in texts[-1]
    texts = await bot.send(receive_event("/pin add a b", chat_type="topic_group_v9"))
    assert "not available in this kind of chat" in texts[-1]
    assert await bot.store.blocks(["feishu:group:oc_chat1", "feishu:direct:ou_user1"]) == []


async def test_allowlists_match_any_of_the_three_ids(start_feishu: Any) -> None:
    bot = await start_feishu(
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": ["on_union9"],
            "group_strong_user_ids": ["feishu:group:oc_g::u:u_strong"],
        }
    )
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_g", "mentions": [BOT]}
    texts = await bot.send(
        receive_event("@_user_1 /pin shared add x y", open_id="ou_9", union_id="on_union9", **group)
    )
    assert texts[-1].startswith("Saved")
    texts = await bot.send(
        receive_event("@_user_1 /pin add-strong s t", open_id="ou_7", user_id="u_strong", **group)
    )
    assert texts[-1].startswith("Saved strong")
    texts = await bot.send(receive_event("@_user_1 /pin add-strong s t", open_id="ou_8", **group))
    assert "pins.group_strong_user_ids" in texts[-1]
    assert [b.scope for b in await bot.store.blocks(["feishu:group:oc_g::u:ou_7"])] == [
        "feishu:group:oc_g::u:ou_7"
    ]  # scopes are keyed by open_id


async def test_encrypted_bodies_and_signatures(start_feishu: Any) -> None:
    bot = await start_feishu(encrypt_key=ENCRYPT_KEY)
    body = json.dumps(encrypt(receive_event("/pin add secret-ok x"), ENCRYPT_KEY)).encode()
    texts = await bot.send({}, raw=body, headers=signature_headers(body, ENCRYPT_KEY))
    assert texts == ["Saved strong block 'secret-ok'."]
    body = json.dumps(encrypt(receive_event("/pin add lower-ok x"), ENCRYPT_KEY)).encode()
    lowered = {name.lower(): value for name, value in signature_headers(body, ENCRYPT_KEY).items()}
    texts = await bot.send({}, raw=body, headers=lowered)  # as an HTTP/2 proxy writes them
    assert texts[-1] == "Saved strong block 'lower-ok'."
    body = json.dumps(encrypt(receive_event("/pin add forged x"), ENCRYPT_KEY)).encode()
    status, _ = await bot.post({}, raw=body, headers=signature_headers(body, "wrong-key"))
    assert status == 401
    status, _ = await bot.post({}, raw=body)
    assert status == 401
    plain = json.dumps(receive_event("/pin add plain x")).encode()
    status, _ = await bot.post({}, raw=plain, headers=signature_headers(plain, "wrong-key"))
    assert status == 401
    challenge = json.dumps(encrypt(url_verification(), ENCRYPT_KEY)).encode()
    assert await bot.post({}, raw=challenge) == (200, {"challenge": "challenge-code-123"})
    await bot.frontend.idle()
    labels = [b.label for b in await bot.store.blocks(["feishu:direct:ou_user1"])]
    assert labels == ["secret-ok", "lower-ok"]


async def test_signed_requests_outside_the_freshness_window_are_refused(
    start_feishu: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_feishu(encrypt_key=ENCRYPT_KEY)  # the clock reads 2026-01-01 00:00 UTC
    body = json.dumps(encrypt(receive_event("/pin add replayed x"), ENCRYPT_KEY)).encode()
    year_2001 = signature_headers(body, ENCRYPT_KEY, timestamp="978307200")
    status, _ = await bot.post({}, raw=body, headers=year_2001)
    assert status == 401
    assert "s behind this machine's clock" in caplog.text  # one line in the refusal log
    now = int(clock.now.timestamp())
    ahead = signature_headers(body, ENCRYPT_KEY, timestamp=str(now + 301))
    assert (await bot.post({}, raw=body, headers=ahead))[0] == 401
    # The signature hashes timestamp + nonce as one string: moved into the nonce, no timestamp.
    fresh = signature_headers(body, ENCRYPT_KEY, timestamp=str(now - 299), nonce="n0nce")
    resplit = {**fresh, "X-Lark-Request-Timestamp": "", "X-Lark-Request-Nonce": f"{now - 299}n0nce"}
    assert (await bot.post({}, raw=body, headers=resplit))[0] == 401
    huge = {**fresh, "X-Lark-Request-Timestamp": "9" * 5000}  # more digits than int() reads
    assert (await bot.post({}, raw=body, headers=huge))[0] == 401
    await bot.frontend.idle()
    assert bot.server.replies == []
    # Nothing was recorded: the same event signed now is taken (299 s old is within the window).
    assert await bot.send({}, raw=body, headers=fresh) == ["Saved strong block 'replayed'."]
    clock.advance(minutes=10)  # the window follows the bot's clock
    later = json.dumps(encrypt(receive_event("/pin add later x"), ENCRYPT_KEY)).encode()
    assert (await bot.post({}, raw=later, headers=signature_headers(later, ENCRYPT_KEY)))[0] == 401
    later_now = signature_headers(later, ENCRYPT_KEY, timestamp=str(int(clock.now.timestamp())))
    assert (await bot.send({}, raw=later, headers=later_now))[-1] == "Saved strong block 'later'."


async def test_duplicate_events_are_processed_once_even_after_a_restart(
    start_feishu: Any, tmp_path: Any
) -> None:
    path = tmp_path / "restart.sqlite3"
    first_store = await Store.open(path)
    bot = await start_feishu(on=first_store)
    event = receive_event("/pin add once x", event_id="ev_dup")
    await bot.send(event)
    await bot.send(event)
    await bot.frontend.stop()
    await first_store.close()
    async with await Store.open(path) as reopened:  # a new process would see the same file
        again = await start_feishu(on=reopened)
        await again.send(event)
        await again.frontend.stop()
    assert bot.server.texts() == ["Saved strong block 'once'."]


async def test_a_message_delivered_again_under_a_new_event_id_is_answered_once(
    start_feishu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await FakeOpenAI().start()
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = {**agent_llm(server.base_url), "agent_tools": False}
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    try:
        bot = await start_feishu(model=model, llm=llm)
        first = receive_event("what is pinned?", event_id="ev_first")
        again = {**first, "header": {**first["header"], "event_id": "ev_again"}}
        assert await bot.send(first) == ["reply 1"]
        assert await bot.send(again) == ["reply 1"]  # nothing more
        assert len(server.requests) == 1
        (reply,) = bot.server.replies
        assert reply["message_id"] == first["event"]["message"]["message_id"]
    finally:
        await server.stop()


async def test_long_connection_hand_off_from_another_thread(start_feishu: Any) -> None:
    bot = await start_feishu()
    payload = json.dumps(receive_event("/pin add via-ws x")).encode()
    loop_thread = threading.get_ident()
    seen_threads: list[int] = []
    original = bot.frontend.on_event

    def recording(data: Any) -> None:
        seen_threads.append(threading.get_ident())
        original(data)

    bot.frontend.dispatcher._processorMap["p2.im.message.receive_v1"].f = recording
    # lark.ws.Client calls exactly this on its own thread for every event it receives
    await asyncio.to_thread(bot.frontend.dispatcher._do_without_validation, payload)
    await bot.server.wait_for_replies(1)
    assert bot.server.texts() == ["Saved strong block 'via-ws'."]
    assert seen_threads and seen_threads[0] != loop_thread


async def test_api_errors_are_logged_and_never_stop_the_bot(
    start_feishu: Any, fake_feishu: FakeFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_feishu()
    fake_feishu.reply_errors.append({"code": 230002, "msg": "bot not in chat"})
    await bot.send(receive_event("/pin list"))
    assert fake_feishu.replies == []
    assert "code 230002" in caplog.text and APP_SECRET not in caplog.text
    fake_feishu.current_token = "rotated-on-the-server"  # our cached token is now stale
    texts = await bot.send(receive_event("/pin list"))
    assert len(texts) == 1 and len(fake_feishu.token_requests) == 2


async def test_long_replies_are_split(start_feishu: Any) -> None:
    bot = await start_feishu(pins={"max_content_length": 500})
    for i in range(20):
        await bot.send(receive_event(f"/pin add b{i} " + "长" * 500))
    texts = await bot.send(receive_event("/pin list"))
    parts = texts[20:]
    assert len(parts) >= 2 and all(len(p) <= 8000 for p in parts)
    assert "\n".join(parts).count("长" * 500) == 20


def test_leading_bot_mention_is_removed_and_others_resolved() -> None:
    mentions = (Mention("@_user_1", BOT_OPEN_ID, "pinbot"), Mention("@_user_2", "ou_x", "Li"))
    assert resolve_mentions("@_user_1 /pin list", mentions, BOT_OPEN_ID) == ("/pin list", True)
    assert resolve_mentions("hi @_user_2 and @_user_1", mentions, BOT_OPEN_ID) == (
        "hi @Li and @pinbot",
        True,
    )
    assert resolve_mentions("@_user_2 hi", mentions, BOT_OPEN_ID) == ("@Li hi", True)
    assert resolve_mentions("@_user_2 hi", mentions[1:], BOT_OPEN_ID) == ("@Li hi", False)


async def test_cli_needs_app_id_and_secret(tmp_path: Any) -> None:
    import os

    config = tmp_path / "c.yaml"
    config.write_text(f"storage: {{path: {tmp_path / 'db.sqlite3'}}}\n")
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("FEISHU_")}
    code, _, err = await run_pinbot_here("feishu", "--config", str(config), env=env)
    assert code == 2 and "feishu.app_id" in err
    config.write_text(config.read_text() + "feishu: {app_id: cli_x}\n")
    code, _, err = await run_pinbot_here("feishu", "--config", str(config), env=env)
    assert code == 2 and "FEISHU_APP_SECRET" in err


async def test_websocket_mode_runs_the_client_in_its_own_thread(
    start_feishu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lark_oapi as lark

    payload = json.dumps(receive_event("/pin add from-ws x")).encode()
    seen: dict[str, Any] = {}

    class FakeWsClient:
        """Stands in for lark.ws.Client: start() blocks its thread and delivers one event the
        way the real client does, through the dispatcher's _do_without_validation."""

        def __init__(
            self, app_id: str, app_secret: str, *, event_handler: Any, domain: str
        ) -> None:
            seen.update(app_id=app_id, domain=domain)
            self.handler = event_handler

        def start(self) -> None:
            seen["thread"] = threading.current_thread().name
            seen["own_loop"] = not asyncio.get_event_loop().is_running()
            self.handler._do_without_validation(payload)

    monkeypatch.setattr(lark.ws, "Client", FakeWsClient)
    bot = await start_feishu(feishu={"mode": "websocket"})
    await bot.server.wait_for_replies(1)
    assert bot.server.texts() == ["Saved strong block 'from-ws'."]
    assert seen["thread"] == "feishu-ws" and seen["own_loop"]
    assert seen["app_id"] == APP_ID and seen["domain"] == bot.server.base_url


async def test_images_and_files_get_one_short_answer(start_feishu: Any, clock: FakeClock) -> None:
    bot = await start_feishu()
    image: dict[str, Any] = {"message_type": "image", "content": json.dumps({"image_key": "img_1"})}
    texts = await bot.send(receive_event(None, **image))
    assert texts == [UNREADABLE_REPLY]
    audio: dict[str, Any] = {
        "message_type": "audio",
        "content": json.dumps({"file_key": "f", "duration": 2}),
    }
    assert await bot.send(receive_event(None, **audio)) == [UNREADABLE_REPLY]  # same minute
    clock.advance(seconds=61)
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_g", **image}
    assert await bot.send(receive_event(None, **group)) == [UNREADABLE_REPLY]  # not addressed
    assert await bot.send(receive_event(None, mentions=[BOT], **group)) == [UNREADABLE_REPLY] * 2
    assert await bot.store.history("feishu:direct:ou_user1") == []


async def test_an_html_gateway_error_at_start_is_retried(
    start_feishu: Any, fake_feishu: FakeFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    fake_feishu.token_failures = [502, 502]
    bot = await start_feishu()
    assert fake_feishu.slept == [0.5, 1.0]  # the call is tried again, waiting longer each time
    assert caplog.text.count("trying again") == 2 and "Traceback" not in caplog.text
    assert bot.frontend.bot_open_id == BOT_OPEN_ID
    assert await bot.send(receive_event("/pin list")) == [
        "You have no blocks. Add one with /pin add <label> <content>."
    ]


async def test_refused_webhooks_are_one_line_per_address_a_minute(
    start_feishu: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_feishu()
    for _ in range(5):
        status, _ = await bot.post(receive_event("hi", token="forged-token"))
        assert status == 401
    refused = [r for r in caplog.records if "refused a Feishu webhook request" in r.getMessage()]
    assert len(refused) == 1 and not any(r.exc_info for r in caplog.records)
    assert "[Lark]" not in capsys.readouterr().out  # lark-oapi no longer prints on its own
    assert bot.server.replies == []


def test_refusal_log_counts_what_it_did_not_write(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = RefusalLog("Feishu", lambda: now[0])
    for _ in range(4):
        refusals.note("10.0.0.1", "bad token")
    refusals.note("10.0.0.2", "bad signature")
    now[0] = 61.0
    refusals.note("10.0.0.1", "bad token")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[-1].endswith("bad token (3 more refused from there since the last line)")


def post_elements(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for line in json.loads(reply["content"])["zh_cn"]["content"] for e in line]


async def test_model_markdown_goes_out_as_styled_elements_and_never_mentions_anyone(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    bot = await start_feishu()
    await bot.send(receive_event('**bold** `a<b&c>` <at user_id="all">everyone</at>'))
    elements = post_elements(fake_feishu.replies[-1])
    assert {e["tag"] for e in elements} == {"text"}  # no md, no at: nothing is read as markup
    assert {"tag": "text", "text": "bold", "style": ["bold"]} in elements
    assert fake_feishu.texts()[-1].endswith(
        'You said: bold `a<b&c>` <at user_id="all">everyone</at>'
    )
    await bot.send(receive_event("/pin add md **x** <b>y</b> _z_"))
    await bot.send(receive_event("/pin list"))
    elements = post_elements(fake_feishu.replies[-1])
    assert {e["tag"] for e in elements} == {"text"}  # /pin replies stay literal
    assert {"tag": "text", "text": "**x** <b>y</b> _z_"} in elements


async def test_a_refused_formatted_post_is_sent_again_as_text(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    bot = await start_feishu()
    fake_feishu.reply_errors = [{"code": 230001, "msg": "invalid message content"}]
    await bot.send(receive_event("**hello** [docs](https://example.org)"))
    (reply,) = fake_feishu.replies
    assert all("style" not in e and e["tag"] == "text" for e in post_elements(reply))
    assert fake_feishu.texts()[-1].endswith("You said: hello docs (https://example.org)")
    fake_feishu.reply_errors = [{"code": 230002, "msg": "bot not in chat"}]
    await bot.send(receive_event("**again**"))
    assert len(fake_feishu.replies) == 1  # about the chat: plain text would not help


async def test_feishu_plain_reply_format(start_feishu: Any, fake_feishu: FakeFeishu) -> None:
    bot = await start_feishu(feishu={"reply_format": "plain"})
    await bot.send(receive_event("**hello**"))
    assert {e["tag"] for e in post_elements(fake_feishu.replies[-1])} == {"text"}


async def test_a_webhook_port_in_use_is_one_clear_error(start_feishu: Any) -> None:
    from bot.config import ConfigError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"feishu\.webhook_port.*choose a free port"):
            await start_feishu(feishu={"webhook_port": port})


async def test_the_bot_posts_to_a_chat_and_edits_what_it_posted(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    bot = await start_feishu(feishu={"reply_format": "markdown"})
    sent = await bot.frontend.send("oc_group", Reply('A **proposal** <at user_id="all">x</at>'))
    assert sent == Sent("oc_group", "om_sent_1")
    (posted,) = fake_feishu.posted
    assert posted["receive_id"] == "oc_group" and posted["msg_type"] == "post"
    assert fake_feishu.texts([posted]) == ['A **proposal** <at user_id="all">x</at>']  # literal
    assert await bot.frontend.edit(sent, Reply("Approved by 7.", formatted=True))
    (edit,) = fake_feishu.edits
    assert edit["message_id"] == "om_sent_1"
    assert json.loads(edit["content"])["zh_cn"]["content"] == [
        [{"tag": "text", "text": "Approved by 7."}]
    ]


async def test_a_reply_without_content_pins_the_parent_fetched_by_id(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    bot = await start_feishu(pins={"enable_in_group": True})
    group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_group"}
    other = mention("@_user_2", "ou_other", "Zhang")
    fake_feishu.add_message("om_parent", "Standup at 9:30, @_user_2 runs it", mentions=[other])
    post = json.dumps({"title": "", "content": [[{"tag": "text", "text": "Post body"}]]})
    fake_feishu.add_message("om_post", post, msg_type="post", sender="ou_author")
    texts = await bot.send(
        receive_event("@_user_1 /pin add standup", mentions=[BOT], parent_id="om_parent", **group)
    )
    assert texts[-1] == "Saved context block 'standup'."
    await bot.send(
        receive_event("@_user_1 /pin add post", mentions=[BOT], parent_id="om_post", **group)
    )
    mine = "feishu:group:oc_group::u:ou_user1"
    assert sorted((b.label, b.content) for b in await bot.store.blocks([mine])) == [
        ("post", "Post body"),
        ("standup", "Standup at 9:30, @Zhang runs it"),
    ]
    (version,) = await bot.store.versions(mine, "post")
    assert version.origin is not None
    assert (version.origin.message_id, version.origin.author) == ("om_post", "ou_author")
    # A read Feishu refuses names the permission the app needs; nothing is saved.
    fake_feishu.add_message("om_secret", "hidden")
    fake_feishu.denied_reads.add("om_secret")
    texts = await bot.send(
        receive_event("@_user_1 /pin add secret", mentions=[BOT], parent_id="om_secret", **group)
    )
    assert "im:message.group_msg" in texts[-1]
    assert len(await bot.store.blocks([mine])) == 2


@contextlib.asynccontextmanager
async def proposing_standup(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[dict[str, Any], OpenAIChatModel]]:
    """The llm settings and the real OpenAI client of a fake model server that proposes one
    shared block (standup, "Standup at 9:30.") at the first turn and then says "Proposed."
    (start_feishu closes the client it is given)."""
    server = await FakeOpenAI().start()
    try:
        monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
        llm = agent_llm(server.base_url)
        propose = {"label": "standup", "content": "Standup at 9:30.", "reason": "agreed"}
        server.script = [tool_calls(("pin_propose", propose)), completion("Proposed.")]
        yield llm, OpenAIChatModel.from_config(make_config(llm=llm).llm)
    finally:
        await server.stop()


async def test_a_proposal_card_and_an_admins_card_action(
    start_feishu: Any, fake_feishu: FakeFeishu, monkeypatch: pytest.MonkeyPatch
) -> None:
    pins = {"enable_in_group": True, "group_shared_admin_ids": ["ou_admin"]}
    async with proposing_standup(monkeypatch) as (llm, model):
        bot = await start_feishu(model=model, llm=llm, pins=pins)
        group: dict[str, Any] = {"chat_type": "group", "chat_id": "oc_group"}
        await bot.send(receive_event("@_user_1 keep the standup time", mentions=[BOT], **group))
        (card,) = [p for p in fake_feishu.posted if p["msg_type"] == "interactive"]
        assert card["receive_id"] == "oc_group"
        assert "Proposal #1" in card_text(card["content"])
        buttons = json.loads(card["content"])["elements"][1]["actions"]
        assert [b["value"] for b in buttons] == [
            {"pinbot": "pinbot:proposal:approve:1"},
            {"pinbot": "pinbot:proposal:reject:1"},
        ]
        approve = buttons[0]["value"]
        # A member's tap: a toast, nothing recorded, nothing changed.
        status, answer = await bot.post(
            card_action(approve, open_id="ou_user1", message_id="om_sent_1")
        )
        assert status == 200 and "Only this group's shared admins" in answer["toast"]["content"]
        # A forged callback is refused like a forged event.
        status, _ = await bot.post(card_action(approve, open_id="ou_admin", token="forged"))
        assert status == 401
        # The admin's tap, delivered twice: one toast each, one change, one card update.
        tapped = card_action(approve, open_id="ou_admin", message_id="om_sent_1", event_id="ev_t")
        for _ in range(2):
            status, answer = await bot.post(tapped)
            assert status == 200 and answer["toast"]["content"] == "Approving proposal #1…"
        await bot.frontend.idle()
        blocks = await bot.store.blocks(["feishu:group:oc_group"])
        assert [(b.label, b.content) for b in blocks] == [("standup", "Standup at 9:30.")]
        (update,) = fake_feishu.card_updates
        assert update["message_id"] == "om_sent_1"
        shown = json.loads(update["content"])
        assert len(shown["elements"]) == 1  # the buttons are gone
        assert card_text(update["content"]).endswith("Approved by ou_admin: saved.")


async def test_events_are_counted_and_readiness_follows_the_webhook_listener(
    start_feishu: Any,
) -> None:
    from bot import metrics

    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        bot = await start_feishu()
        assert bot.frontend.not_ready() is None  # the webhook listener is up
        await bot.send(receive_event("/pin add tone be brief"))
        hello = receive_event("hello")
        for _ in range(3):  # Feishu delivers again when it missed the 200: counted once
            await bot.send(hello)
        counted = meters.registry.get_sample_value(
            "pinbot_updates_received_total", {"platform": "feishu", "kind": "message"}
        )
        assert counted == 2
    finally:
        metrics.disable()


async def test_readiness_follows_feishu_answering_the_bots_calls(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    now = [1000.0]
    bot = await start_feishu(monotonic=lambda: now[0])
    frontend = bot.frontend
    assert frontend.not_ready() is None  # its calls so far were answered
    fake_feishu.down = True
    await bot.send(receive_event("hello"))  # the reply cannot go
    assert frontend.not_ready() is None  # within the window
    now[0] += 61
    assert frontend.not_ready() == "Feishu has answered none of the bot's requests for 60 s"
    fake_feishu.down = False  # back: the call readiness makes meanwhile finds it
    deadline = time.monotonic() + 60  # a safety net for a busy machine, never a pause
    while frontend.not_ready() is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the call is on its way
    assert frontend.not_ready() is None


def test_lark_oapi_has_the_long_connection_hooks_readiness_uses() -> None:
    import lark_oapi as lark

    client = lark.ws.Client("cli_app", "secret")
    assert callable(client.on_reconnecting) and callable(client.on_reconnected)


async def test_a_pin_suggestion_card_in_a_dm_and_a_tap_on_pin(
    start_feishu: Any, fake_feishu: FakeFeishu, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await FakeOpenAI().start()
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = {**agent_llm(server.base_url), "agent_tools": False}
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    short = {"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100000}
    try:
        pins = {"enable_in_group": True}
        bot = await start_feishu(model=model, llm=llm, chat=short, pins=pins)
        for number in (1, 2, 3):
            await bot.send(receive_event(f"message {number}"))
        tea = {"label": "tea", "content": "Drinks green tea, no sugar.", "reason": "said so"}
        server.script = [
            tool_calls(("compact_history", {"summary": "They talked.", "suggestions": [tea]})),
            completion("answer 4"),
        ]
        await bot.send(receive_event("message 4"))
        (card,) = [p for p in fake_feishu.posted if p["msg_type"] == "interactive"]
        assert card["receive_id"] == "oc_chat1"
        assert "tea: Drinks green tea, no sugar." in card_text(card["content"])
        buttons = json.loads(card["content"])["elements"][1]["actions"]
        assert [b["value"] for b in buttons] == [
            {"pinbot": "pinbot:suggestion:pin:1"},
            {"pinbot": "pinbot:suggestion:dismiss:1"},
        ]
        # The card action does not say what kind of chat it comes from, and the button's data
        # is no proof: a tap in a group (on a copy of the card), or on another message of the
        # DM, does nothing.
        toasts = []
        for chat_id, message_id in (("oc_group", "om_sent_1"), ("oc_chat1", "om_other")):
            elsewhere = card_action(
                buttons[0]["value"], open_id="ou_user1", chat_id=chat_id, message_id=message_id
            )
            status, answer = await bot.post(elsewhere)
            assert status == 200 and answer["toast"]["type"] == "warning"
            toasts.append(answer["toast"]["content"])
        assert toasts == ["This button does nothing here."] * 2
        await bot.frontend.idle()
        assert await bot.store.blocks(["feishu:direct:ou_user1"]) == []
        assert fake_feishu.card_updates == []
        tapped = card_action(
            buttons[0]["value"], open_id="ou_user1", chat_id="oc_chat1", message_id="om_sent_1"
        )
        status, answer = await bot.post(tapped)
        assert status == 200 and answer["toast"]["content"] == "Pinning suggestion #1…"
        await bot.frontend.idle()
        blocks = await bot.store.blocks(["feishu:direct:ou_user1"])
        assert [(b.label, b.content, b.level.value) for b in blocks] == [
            ("tea", "Drinks green tea, no sugar.", "strong")
        ]
        (update,) = fake_feishu.card_updates
        assert update["message_id"] == "om_sent_1"
        assert len(json.loads(update["content"])["elements"]) == 1  # the buttons are gone
        assert card_text(update["content"]).endswith("Pinned: saved.")
    finally:
        await server.stop()


async def test_a_suggestion_card_feishu_fails_to_post_costs_neither_the_turn_nor_the_summary(
    start_feishu: Any,
    fake_feishu: FakeFeishu,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = await FakeOpenAI().start()
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = {**agent_llm(server.base_url), "agent_tools": False}
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    short = {"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100000}
    try:
        bot = await start_feishu(model=model, llm=llm, chat=short)
        for number in (1, 2, 3):
            await bot.send(receive_event(f"message {number}"))
        tea = {"label": "tea", "content": "Drinks green tea, no sugar.", "reason": "said so"}
        server.script = [
            tool_calls(("compact_history", {"summary": "They talked.", "suggestions": [tea]})),
            completion("answer 4"),
        ]
        fake_feishu.post_failures.extend([500] * CALL_ATTEMPTS)  # failing after every retry
        with caplog.at_level(logging.WARNING):
            assert (await bot.send(receive_event("message 4")))[-1] == "answer 4"
        assert fake_feishu.posted == []
        failed = [r.getMessage() for r in caplog.records if "pin suggestion" in r.getMessage()]
        assert failed == ["posting a pin suggestion message failed (FeishuTransientError)"]
        # The summary took the place of the oldest turns; the suggestion waits all the same.
        assert server.requests[-1]["messages"][1]["content"].endswith("They talked.")
        listed = await bot.send(receive_event("/pin suggestions"))
        assert "#1 tea: Drinks green tea, no sugar. (why: said so)" in listed[-1]
    finally:
        await server.stop()


FEISHU_500 = {"code": 1000004, "msg": "internal error, please try again"}
GATEWAY_502 = "<html><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.mark.parametrize(
    ("status", "answer", "landed"),
    [
        (500, FEISHU_500, False),  # Feishu failed before posting
        (502, GATEWAY_502, False),  # a gateway's page: nothing reached Feishu
        (500, FEISHU_500, True),  # posted, but the answer that said so was lost
        (502, GATEWAY_502, True),
    ],
)
async def test_a_reply_that_fails_once_arrives_exactly_once(
    start_feishu: Any,
    fake_feishu: FakeFeishu,
    status: int,
    answer: dict[str, Any] | str,
    landed: bool,
) -> None:
    bot = await start_feishu()
    fake_feishu.reply_failures.append((status, answer, landed))
    assert await bot.send(receive_event("/pin add tone Be brief.")) == [
        "Saved strong block 'tone'."
    ]
    assert fake_feishu.slept == [0.5]  # tried again once, after a short wait
    # Both attempts carried the same uuid: Feishu posted the reply once.
    assert len(fake_feishu.replies) == 1 and len(fake_feishu.uuids) == 1


async def test_a_reply_that_cannot_go_is_logged_with_its_chat_and_counted(
    start_feishu: Any, fake_feishu: FakeFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    from bot import metrics

    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        bot = await start_feishu()
        fake_feishu.reply_failures += [(502, GATEWAY_502, False)] * CALL_ATTEMPTS
        assert await bot.send(receive_event("/pin add tone Be brief.")) == []
        assert fake_feishu.slept == [0.5, 1.0, 2.0]  # bounded, each wait twice the last
        lost = [r for r in caplog.records if "was lost" in r.getMessage()]
        assert len(lost) == 1 and "in chat oc_chat1" in lost[0].getMessage()
        assert "Be brief" not in caplog.text  # what was lost is counted, not quoted
        counted = meters.registry.get_sample_value(
            "pinbot_replies_lost_total", {"platform": "feishu"}
        )
        assert counted == 1
        # The command itself stands, and the next message is answered.
        assert await bot.send(receive_event("/pin list")) != []
        assert [b.label for b in await bot.store.blocks(["feishu:direct:ou_user1"])] == ["tone"]
    finally:
        metrics.disable()


async def test_an_answer_kept_before_a_crash_goes_out_at_the_next_start(
    start_feishu: Any, fake_feishu: FakeFeishu, store: Store, clock: FakeClock
) -> None:
    from bot.adapters.feishu import FeishuMessage
    from bot.core.replies import replies_to_json

    # As a worker killed between keeping its answer and sending it left the inbox.
    event = FeishuMessage(
        *("ev_kept", "om_kept", "oc_chat1", "p2p", None, None, "text"),
        content=json.dumps({"text": "/pin add tone Be brief."}),
        mentions=(),
        open_id="ou_user1",
        user_id="u_user1",
        union_id="on_user1",
    )
    await store.register_worker(now=clock())
    chat, payload = "feishu:oc_chat1", event.to_json()
    await store.record_update(
        "feishu", "om_kept", chat=chat, position=0, payload=payload, now=clock()
    )
    pending = await store.next_update(chat)
    assert pending is not None
    await store.hold_replies(pending.seq, replies_to_json([Reply("Saved strong block 'tone'.")]))
    await store.leave_workers()
    bot = await start_feishu()
    await bot.frontend.idle()
    assert fake_feishu.texts() == ["Saved strong block 'tone'."]  # sent, not worked out again
    assert await bot.store.blocks(["feishu:direct:ou_user1"]) == []


async def test_export_me_is_a_file_message_and_forget_me_a_card(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    bot = await start_feishu()
    await bot.send(receive_event("/pin add tone Be brief."))
    texts = await bot.send(receive_event("/export me"))
    assert "1 pinned block" in texts[-1]
    (file_message,) = [r for r in fake_feishu.replies if r["msg_type"] == "file"]
    (name, data) = fake_feishu.files[json.loads(file_message["content"])["file_key"]]
    assert (
        name.startswith("pinbot-feishu-ou_user1")
        and json.loads(data)["blocks"][0]["label"] == "tone"
    )
    await bot.send(receive_event("/forget me"))
    card = fake_feishu.replies[-1]
    assert card["msg_type"] == "interactive" and "1 pinned block" in card_text(card["content"])
    (button,) = json.loads(card["content"])["elements"][1]["actions"]
    status, answer = await bot.post(
        card_action(button["value"], open_id="ou_user1", chat_id="oc_chat1", message_id="om_c")
    )
    assert status == 200 and answer["toast"]["content"] == "Forgotten."
    (update,) = fake_feishu.card_updates
    assert card_text(update["content"]).startswith("Done: I removed everything")
    assert await bot.store.blocks(["feishu:direct:ou_user1"]) == []
