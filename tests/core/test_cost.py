"""Cost: requests whose prefix the provider can cache, usage recorded for every call, /usage,
budgets, and `pinbot usage`, through Pinbot.handle and the real openai SDK against a fake
server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from tests.conftest import OpenAIBots, ask, dm, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.process import run_pinbot_here

USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 7,
    "total_tokens": 107,
    "prompt_tokens_details": {"cached_tokens": 64},
}


def assert_cacheable(requests: list[dict[str, Any]]) -> None:
    """Each request minus its newest user message is an exact prefix of the next one, the system
    message never changes, and the tools are the same every time."""
    for before, after in itertools.pairwise(requests):
        kept = before["messages"][:-1]
        assert after["messages"][: len(kept)] == kept
        assert json.dumps(after["messages"][0]) == json.dumps(before["messages"][0])
        assert after.get("tools") == before.get("tools")


async def pin_five(bot: Pinbot, speaker: Any) -> None:
    for label in ("a", "b", "c"):
        await ask(bot, speaker, f"/pin add-strong {label} Rule {label}: be careful.")
    for label in ("d", "e"):
        await ask(bot, speaker, f"/pin add-context {label} Note {label}: background.")


@pytest.mark.parametrize(
    "llm", [{}, {"stream": True}, {"agent_tools": True}, {"agent_tools": True, "stream": True}]
)
async def test_requests_keep_a_cacheable_prefix_in_a_dm(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, llm: dict[str, Any]
) -> None:
    bot = await openai_bots(llm=llm)
    await pin_five(bot, dm())
    streamed: list[str] = []

    async def sink(text: str) -> None:
        streamed.append(text)

    for turn in range(6):
        await ask(bot, dm(), f"question {turn}", on_text=sink)
    assert len(fake_openai.requests) == 6
    assert_cacheable(fake_openai.requests)
    assert "Rule a" in fake_openai.requests[0]["messages"][0]["content"]
    assert "Note d" in fake_openai.requests[-1]["messages"][-1]["content"]


async def test_requests_keep_a_cacheable_prefix_in_a_group(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    await ask(bot, group("7"), "/pin shared add-strong house Be kind.")
    await ask(bot, group("7"), "/pin shared add faq The FAQ.")
    await ask(bot, group("5"), "/pin add mine My note.")
    for turn in range(4):
        await ask(bot, group("5"), f"hello {turn}")
    assert_cacheable(fake_openai.requests)


async def test_a_block_change_changes_the_prefix_once(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    await pin_five(bot, dm())
    await ask(bot, dm(), "one")
    await ask(bot, dm(), "/pin edit a Rule a: be very careful.")
    await ask(bot, dm(), "two")
    await ask(bot, dm(), "three")
    first, second, third = fake_openai.requests
    assert first["messages"][0] != second["messages"][0]
    assert_cacheable([second, third])


async def test_usage_is_recorded_for_every_call(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    fake_openai.usage = USAGE
    bot = await openai_bots(llm={"agent_tools": True})
    fake_openai.script = [tool_calls(("pin_get", {})), completion("done")]
    await ask(bot, dm(), "use a tool")  # two calls: the tool round and the answer
    await ask(bot, dm(), "plain")
    report = text_of(await ask(bot, dm(), "/usage")) or ""
    assert (
        "today: 3 call(s), 300 prompt tokens (192 cached, 64% cache hits), 21 completion tokens"
        in report
    )
    assert "this month: 3 call(s)" in report and "your budget: none" in report


async def test_streamed_usage_and_a_server_that_rejects_stream_options(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    fake_openai.usage = USAGE
    bot = await openai_bots(llm={"stream": True})

    async def sink(text: str) -> None:
        pass

    await ask(bot, dm("1"), "streamed", on_text=sink)
    assert fake_openai.requests[-1]["stream_options"] == {"include_usage": True}
    assert "1 call(s), 100 prompt tokens (64 cached, 64% cache hits), 7 completion" in (
        text_of(await ask(bot, dm("1"), "/usage"))
    )
    fake_openai.reject_stream_options = True
    await ask(bot, dm("2"), "first", on_text=sink)
    await ask(bot, dm("2"), "second", on_text=sink)
    asked = ["stream_options" in request for request in fake_openai.requests[1:]]
    assert asked == [True, False, False]  # rejected once, asked again without, remembered
    report = text_of(await ask(bot, dm("2"), "/usage")) or ""
    assert "2 call(s)" in report and "2 call(s) estimated" in report


async def test_deepseek_cache_hits_count_as_cached(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    fake_openai.usage = {
        "prompt_tokens": 50,
        "completion_tokens": 5,
        "prompt_cache_hit_tokens": 40,
        "prompt_cache_miss_tokens": 10,
    }
    bot = await openai_bots()
    await ask(bot, dm(), "hi")
    assert "50 prompt tokens (40 cached, 80% cache hits)" in text_of(await ask(bot, dm(), "/usage"))


async def test_a_turn_that_fails_after_the_model_answered_is_still_billed(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    fake_openai.usage = USAGE
    bot = await openai_bots(llm={"agent_tools": True})

    def answer_then_fail(body: dict[str, Any]) -> Any:
        fake_openai.status = 500  # the next request fails
        return tool_calls(("pin_get", {}))

    fake_openai.respond = answer_then_fail
    reply = text_of(await ask(bot, dm(), "tools then failure"))
    assert reply is not None and "try again" in reply
    fake_openai.status = 200
    assert await bot.store.history("console:direct:42") == []
    assert "today: 1 call(s), 100 prompt tokens" in text_of(await ask(bot, dm(), "/usage"))


async def test_budgets_refuse_turns_without_a_model_call(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    fake_openai.usage = USAGE
    bot = await openai_bots(
        budgets={"user_daily_tokens": 200, "group_monthly_tokens": 300},
        pins={"enable_in_group": True, "group_shared_admin_ids": ["9"]},
    )
    assert text_of(await ask(bot, dm("1"), "one")) == "reply 1"
    assert text_of(await ask(bot, dm("1"), "two")) == "reply 2"  # 107 used: still under
    refused = (
        text_of(await ask(bot, dm("1"), "three")) or ""
    )  # 214 used: the crossing call completed
    assert "budget for today is used up" in refused and "budgets.user_daily_tokens" in refused
    assert "2026-01-02 00:00 UTC" in refused
    assert len(fake_openai.requests) == 2
    assert outcome_of(await ask(bot, dm("1"), "/pin add tone Be brief.")) is Result.DONE
    assert "left" in text_of(await ask(bot, dm("1"), "/usage"))
    assert "Your ids: 1" in text_of(await ask(bot, dm("1"), "/whoami"))
    assert text_of(await ask(bot, dm("2"), "another user")) == "reply 3"  # untouched budget
    for sender in ("4", "5", "6"):
        await ask(bot, group(sender), "group talk")
    group_refusal = text_of(await ask(bot, group("7"), "over the group budget")) or ""
    assert "this group's token budget for this month" in group_refusal
    assert len(fake_openai.requests) == 6
    admin_view = text_of(await ask(bot, group("9"), "/usage")) or ""
    assert "This group, all members" in admin_view and "3 call(s)" in admin_view
    assert "This group" not in text_of(await ask(bot, group("4"), "/usage"))
    clock.advance(days=1)
    assert text_of(await ask(bot, dm("1"), "next day")) == "reply 7"


async def test_the_offline_model_is_counted_as_estimated(make_bot: Any) -> None:
    bot = make_bot()
    await ask(bot, dm(), "hello")
    report = text_of(await ask(bot, dm(), "/usage")) or ""
    assert "1 call(s)" in report and "1 call(s) estimated" in report
    assert "0 prompt tokens" not in report


async def test_pinbot_usage_json(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.usage = USAGE
    bot = await openai_bots(pins={"enable_in_group": True})
    await ask(bot, dm("1"), "a")
    await ask(bot, group("1"), "b")
    await ask(bot, group("2"), "c")
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{path: '{tmp_path / 'bot.sqlite3'}'}}\n", encoding="utf-8")
    code, out, err = await run_pinbot_here(
        "usage",
        "--json",
        "--days",
        "400",  # the fake clock's day is months before today's
        "--config",
        str(config),
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["days"] == 400
    users = {row["id"]: row for row in document["users"]}
    assert users["1"]["calls"] == 2 and users["1"]["prompt_tokens"] == 200
    assert users["1"]["cost"] is None and document["currency"] == "USD"  # no price: unknown
    assert users["1"]["cached_tokens"] == 128 and users["1"]["completion_tokens"] == 14
    assert users["1"]["estimated_calls"] == 0 and users["1"]["platform"] == "console"
    (group_row,) = document["groups"]
    assert group_row["id"] == "-100123" and group_row["calls"] == 2
    keys = {"platform", "id", "calls", "prompt_tokens", "cached_tokens", "completion_tokens"}
    assert keys | {"estimated_calls"} <= set(group_row)
