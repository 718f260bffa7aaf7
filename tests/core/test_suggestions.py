"""Pin suggestions at compaction (issue 39), through Pinbot.handle against the fake OpenAI server
and the real openai SDK: the model suggests, people decide, and only good suggestions are shown."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest

from bot.core.entry import SILENT, ChatKind, Pinbot, Tap, Tapped
from bot.core.replies import Reply, Result, Sent
from bot.llm.suggest import COMPACT_TOOL
from bot.llm.summary import SUMMARY_INSTRUCTIONS
from storage.decisions import PROPOSALS, SUGGESTIONS
from tests.conftest import OpenAIBots, ask, dm, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

# Past two turns of history the oldest are compacted, the newest one kept word for word.
SHORT = {"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100000}
DIET = {"label": "diet", "content": "Vegetarian; eats no fish.", "reason": "said it twice"}
AGAIN = {"label": "home", "content": "lives in LISBON!", "reason": "where they live"}
SECRET = {
    "label": "key",
    "content": "My API key is sk-proj-abcdefghijklmnopqrstuvwx.",
    "reason": "",
}
TOOLS_REFUSED = "tools param requires --jinja flag"
PIN_1 = "pinbot:suggestion:pin:1"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")


class Posted:
    """A messenger that keeps what the bot posts and edits, as a platform would show it."""

    def __init__(self) -> None:
        self.messages: dict[str, Reply] = {}
        self.edits: list[tuple[str, Reply]] = []

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        self.messages[str(len(self.messages) + 1)] = reply
        return Sent(chat, str(len(self.messages)))

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        self.messages[sent.message_id] = reply
        self.edits.append((sent.message_id, reply))
        return True

    def with_buttons(self) -> list[Reply]:
        return [reply for reply in self.messages.values() if reply.buttons]


def compacted(*suggestions: dict[str, str], summary: str = "They talked.") -> dict[str, Any]:
    """The model's answer to the combined call: the tool called with a summary and suggestions."""
    return tool_calls((COMPACT_TOOL, {"summary": summary, "suggestions": list(suggestions)}))


async def chat_until_compaction(bot: Pinbot, conversation: Any = None) -> None:
    """Three turns of history (messages 1 to 3): message 4 compacts the oldest two, and then
    every second message (6, 8, …) compacts again."""
    for number in (1, 2, 3):
        await ask(bot, conversation or dm(), f"message {number}")


async def suggesting_bot(openai_bots: OpenAIBots, **sections: Any) -> tuple[Pinbot, Posted]:
    bot = await openai_bots(chat=SHORT, **sections)
    posted = Posted()
    bot.use_messenger(posted)
    return bot, posted


def is_compaction(request: dict[str, Any]) -> bool:
    """Whether a request is a compaction's: the summary's, or the suggestions' of their own."""
    return str(request["messages"][0]["content"]).startswith(("You compact", "You read a chat"))


def compaction_requests(fake_openai: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in fake_openai.requests if is_compaction(r)]


async def test_one_good_suggestion_is_shown_pinned_with_a_tap_and_sent_next_time(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    await ask(bot, dm(), "/pin add tz Lives in Lisbon.")
    await chat_until_compaction(bot)
    fake_openai.script = [compacted(AGAIN, SECRET, DIET), completion("answer 4")]
    assert text_of(await ask(bot, dm(), "message 4")) == "answer 4"
    (combined,) = compaction_requests(fake_openai)
    assert [t["function"]["name"] for t in combined["tools"]] == [COMPACT_TOOL]
    assert combined["tool_choice"] == "required"
    assert "at most 3 suggestions" in combined["messages"][0]["content"]
    # The repeat of a block (same content up to case and punctuation) and the credential are
    # left out: one message, with Pin and Dismiss.
    (shown,) = posted.with_buttons()
    assert "diet: Vegetarian; eats no fish." in shown.text and "Why: said it twice" in shown.text
    assert [(b.text, b.data) for b in shown.buttons or ()] == [
        ("Pin", "pinbot:suggestion:pin:1"),
        ("Dismiss", "pinbot:suggestion:dismiss:1"),
    ]
    listing = text_of(await ask(bot, dm(), "/pin suggestions"))
    assert "#1 diet: Vegetarian; eats no fish." in listing and "sk-proj" not in listing
    # The summary took the place of the oldest turn.
    assert fake_openai.messages()[1]["content"].endswith("They talked.")
    # A tap on Pin: a notice at once, then the command that saves it through /pin add's rules.
    # Its button counts only on the message that shows it, in the DM.
    for chat, message_id in (("42", "2"), ("-100123", "1")):
        elsewhere = await bot.handle(Tap(dm(), PIN_1, Sent(chat, message_id)), SILENT)
        assert elsewhere == Tapped("This button does nothing here.", None, dm())
    tapped = await bot.handle(Tap(dm(), PIN_1, Sent("42", "1")), SILENT)
    assert tapped is not None and tapped.notice == "Pinning suggestion #1…"
    # A tap whose chat kind the platform does not say (Feishu's cards) is in the DM whose
    # message shows the suggestion, and in a group anywhere else.
    unsaid = dataclasses.replace(dm(), kind=ChatKind.UNKNOWN)
    for message, kind in ((Sent("42", "1"), ChatKind.DIRECT), (Sent("42", "2"), ChatKind.GROUP)):
        told = await bot.handle(Tap(unsaid, PIN_1, message, chat_kind_known=False), SILENT)
        assert told is not None and told.conversation.kind is kind
        assert told.command == (tapped.command if kind is ChatKind.DIRECT else None)
    assert tapped.command == "/pin accept 1"
    assert text_of(await ask(bot, dm(), tapped.command)) == "Saved strong block 'diet'."
    assert posted.messages["1"].buttons == () and "Pinned: saved." in posted.messages["1"].text
    again = await ask(bot, dm(), "/pin accept 1")
    assert outcome_of(again) is Result.REFUSED and "pinned already" in text_of(again)
    # The next request carries it, in the strong section.
    await ask(bot, dm(), "message 5")
    assert "label=diet]\nVegetarian; eats no fish.\n" in fake_openai.messages()[0]["content"]
    # Its tokens show in /usage, under compaction.
    usage = text_of(await ask(bot, dm(), "/usage"))
    assert "of which compaction (summaries and pin suggestions), today: 1 call(s)" in usage


async def test_dismiss_changes_nothing_and_the_content_is_not_suggested_again(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    await chat_until_compaction(bot)
    fake_openai.script = [compacted(DIET), completion("answer 4")]
    await ask(bot, dm(), "message 4")
    before = await bot.store.blocks(["console:direct:42"])
    dismissed = await ask(bot, dm(), "/pin dismiss 1")
    assert text_of(dismissed) == "Dismissed suggestion #1; it will not be suggested again."
    assert await bot.store.blocks(["console:direct:42"]) == before == []
    assert "Dismissed" in posted.messages["1"].text and posted.messages["1"].buttons == ()
    # The next compaction suggests the same content again (another label, other case and
    # spacing): nothing is shown.
    await ask(bot, dm(), "message 5")
    same = {**DIET, "label": "food", "content": "vegetarian  eats no FISH"}
    # Nor with invisible characters (a zero-width space, a soft hyphen) or symbols around it.
    hidden = {**DIET, "label": "meals", "content": "Vege\u200btar\u00adian; eats no fish."}
    quoted = {**DIET, "label": "eats", "content": "`Vegetarian` 🥗 eats no fish"}
    fake_openai.script = [compacted(same, hidden, quoted), completion("answer 6")]
    await ask(bot, dm(), "message 6")
    assert len(compaction_requests(fake_openai)) == 2
    assert len(posted.with_buttons()) == 0
    assert text_of(await ask(bot, dm(), "/pin suggestions")).startswith("No pin suggestions")


async def test_suggest_max_a_full_scope_said_once_and_expiry(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    bot, posted = await suggesting_bot(
        openai_bots, pins={"suggest_max": 2, "max_blocks_per_session": 3}
    )
    await chat_until_compaction(bot)
    many = [{"label": f"fact{n}", "content": f"Fact number {n}.", "reason": ""} for n in range(4)]
    fake_openai.script = [compacted(*many), completion("answer")]
    await ask(bot, dm(), "message 4")
    assert [r.text.splitlines()[1] for r in posted.with_buttons()] == [
        "fact0: Fact number 0.",
        "fact1: Fact number 1.",
    ]
    # Past pins.proposal_ttl_hours a suggestion expires: Pin saves nothing.
    clock.advance(hours=25)
    expired = await ask(bot, dm(), "/pin accept 2")
    assert text_of(expired) == "Suggestion #2 expired; nothing was saved."
    assert "Expired" in posted.messages["2"].text
    # At the block limit the model is not asked for suggestions, and the chat is told once.
    for n in range(3):
        await ask(bot, dm(), f"/pin add b{n} Block {n}.")
    requests = len(fake_openai.requests)
    for turn in range(5, 9):
        await ask(bot, dm(), f"message {turn}")
    summaries = [r for r in fake_openai.requests[requests:] if is_compaction(r)]
    assert summaries and all("tools" not in r for r in summaries)
    assert all(r["messages"][0]["content"].startswith(SUMMARY_INSTRUCTIONS) for r in summaries)
    full = [r.text for r in posted.messages.values() if r.text.startswith("No pins are suggested")]
    assert full == [
        "No pins are suggested from the conversation while your blocks are full (3 of 3, "
        "pins.max_blocks_per_session). Remove one with /pin remove <label> to get suggestions "
        "again."
    ]


async def test_a_pin_a_rule_refuses_stays_pending_and_its_message_says_why(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots, pins={"max_total_chars": 40})
    await chat_until_compaction(bot)
    fake_openai.script = [compacted(DIET), completion("answer 4")]
    await ask(bot, dm(), "message 4")
    await ask(bot, dm(), "/pin add note Twenty characters!!")
    refused = await ask(bot, dm(), "/pin accept 1")
    assert outcome_of(refused) is Result.REFUSED and "pins.max_total_chars" in text_of(refused)
    assert posted.messages["1"].buttons and "Not saved:" in posted.messages["1"].text
    await ask(bot, dm(), "/pin remove note")
    assert text_of(await ask(bot, dm(), "/pin accept 1")) == "Saved strong block 'diet'."


async def test_in_a_group_suggestions_become_proposals_only_shared_admins_approve(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    pins = {
        "enable_in_group": True,
        "group_shared_admin_ids": ["7"],
        "suggest_on_compaction": "all",
    }
    bot, posted = await suggesting_bot(openai_bots, pins=pins)
    member = group("42")
    await chat_until_compaction(bot, member)
    deadline = {"label": "deadline", "content": "Release on Friday.", "reason": "agreed"}
    fake_openai.script = [compacted(deadline, SECRET), completion("answer 4")]
    await ask(bot, member, "message 4")
    (proposal,) = posted.with_buttons()
    assert proposal.text.startswith("Proposal #1 for this group's shared blocks:")
    assert "Release on Friday." in proposal.text and "sk-proj" not in proposal.text
    # Nobody in the group asked for it: the model is its proposer, and the reason says so.
    assert "\nReason: Suggested by the model at compaction: agreed\n" in proposal.text
    (pending,) = await bot.store.decisions(PROPOSALS, "console:group:-100123")
    assert pending.new.proposer == "model"
    assert [b.data for b in proposal.buttons or ()] == [
        "pinbot:proposal:approve:1",
        "pinbot:proposal:reject:1",
    ]
    # Nothing personal is suggested in a group, and a suggestion's button does nothing there.
    assert (
        await bot.store.decisions(
            SUGGESTIONS, "console:group:-100123::u:42", ("pending", "dismissed")
        )
        == []
    )
    forged = await bot.handle(Tap(member, PIN_1, Sent("-100123", "1")), SILENT)
    assert forged is not None and forged.command is None
    here = await ask(bot, member, "/pin suggestions")
    assert outcome_of(here) is Result.REFUSED and "/pin shared proposals" in text_of(here)
    assert outcome_of(await ask(bot, member, "/pin shared approve 1")) is Result.REFUSED
    assert await bot.store.blocks(["console:group:-100123"]) == []
    assert text_of(await ask(bot, group("7"), "/pin shared approve 1")).startswith(
        "Approved proposal #1."
    )
    (block,) = await bot.store.blocks(["console:group:-100123"])
    assert (block.label, block.content) == ("deadline", "Release on Friday.")
    # A rejected proposal's content is not suggested again.
    await ask(bot, member, "message 5")
    lunch = {"label": "lunch", "content": "Team lunch on Tuesdays.", "reason": "agreed"}
    fake_openai.script = [compacted(lunch), completion("answer 6")]
    await ask(bot, member, "message 6")
    await ask(bot, group("7"), "/pin shared reject 2")
    await ask(bot, member, "message 7")
    fake_openai.script = [compacted({**lunch, "label": "food"}), completion("answer 8")]
    await ask(bot, member, "message 8")
    assert len(posted.with_buttons()) == 0  # both decided; no third proposal
    assert "no pending proposals" in text_of(await ask(bot, member, "/pin shared proposals"))


async def test_dm_mode_suggests_nothing_in_groups_and_off_makes_no_extra_call(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots, pins={"enable_in_group": True})
    await chat_until_compaction(bot, group("42"))
    await ask(bot, group("42"), "message 4")
    (summary,) = compaction_requests(fake_openai)
    assert "tools" not in summary and summary["messages"][0]["content"].startswith(
        SUMMARY_INSTRUCTIONS
    )
    off, _ = await suggesting_bot(openai_bots, pins={"suggest_on_compaction": "off"})
    before = len(fake_openai.requests)
    await chat_until_compaction(off, dm("9"))
    await ask(off, dm("9"), "message 4")
    sent = fake_openai.requests[before:]
    assert len(sent) == 5  # four turns and one summary: no call for suggestions
    assert all("tools" not in request for request in sent)
    assert posted.messages == {}


async def test_a_server_without_tools_gets_the_fallback_call_and_says_so_once(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    fake_openai.refuse["tools"] = TOOLS_REFUSED
    await chat_until_compaction(bot)
    alone = json.dumps({"suggestions": [DIET]})
    fake_openai.script = [
        completion("They talked."),
        completion(f"Here you are:\n```json\n{alone}\n```"),
        completion("answer 4"),
    ]
    with caplog.at_level(logging.WARNING):
        assert text_of(await ask(bot, dm(), "message 4")) == "answer 4"
    said = [r for r in caplog.records if "refuses tools" in r.getMessage()]
    # One line for the agent tools (bot.llm.server), one for what compaction does instead.
    refused = [r for r in said if r.name == "bot.core.conversation.compaction"]
    assert len(refused) == 1 and TOOLS_REFUSED in refused[0].getMessage()
    assert [r.name for r in said] == ["bot.llm.server", "bot.core.conversation.compaction"]
    summary, suggestions = compaction_requests(fake_openai)[1:]
    assert summary["messages"][0]["content"].startswith(SUMMARY_INSTRUCTIONS)
    assert '{"suggestions": [' in suggestions["messages"][0]["content"]
    assert "tools" not in summary and "tools" not in suggestions
    (shown,) = posted.with_buttons()
    assert "diet: Vegetarian; eats no fish." in shown.text
    # Both calls are compaction's in /usage, and the next compaction offers no tools at all.
    usage = text_of(await ask(bot, dm(), "/usage"))
    assert "of which compaction (summaries and pin suggestions), today: 2 call(s)" in usage
    await ask(bot, dm(), "message 5")
    fake_openai.script = [completion("Summary."), completion("no idea"), completion("answer 6")]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        await ask(bot, dm(), "message 6")
    assert all("tools" not in r for r in fake_openai.requests[-3:])
    assert not [r for r in caplog.records if "refuses tools" in r.getMessage()]
    assert [r for r in caplog.records if "held no JSON" in r.getMessage()]
    assert len(posted.with_buttons()) == 1


async def test_the_budget_holds_the_suggestion_call(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # Every call reports 60 tokens; the budget admits the turns and the summary, and is used up
    # when the suggestions' call of its own would start.
    fake_openai.usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    bot, posted = await suggesting_bot(openai_bots, budgets={"user_daily_tokens": 240})
    fake_openai.refuse["tools"] = TOOLS_REFUSED
    await chat_until_compaction(bot)
    fake_openai.script = [completion("They talked."), completion(json.dumps([DIET]))]
    with caplog.at_level(logging.WARNING):
        reply = await ask(bot, dm(), "message 4")
    assert "budget for today is used up" in text_of(reply)
    assert [
        r for r in caplog.records if "the call failed (Sorry, your token budget" in r.getMessage()
    ]
    # The summary was asked (and the refused tools request, which used nothing); the
    # suggestions were not.
    assert len(fake_openai.requests) == 5 and fake_openai.script
    assert posted.messages == {}
    usage = await bot.store.sender_usage("console", "42", "2026-01-01", "2026-01-01")
    part = await bot.store.sender_usage(
        "console", "42", "2026-01-01", "2026-01-01", compaction=True
    )
    assert (usage.calls, part.calls, part.billed_tokens) == (4, 1, 60)


class Failing(Posted):
    """A platform that fails every post and every edit."""

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        raise ConnectionError(f"cannot post {reply.text}")

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        raise ConnectionError(f"cannot edit {reply.text}")


async def test_a_platform_that_fails_to_post_costs_neither_the_turn_nor_the_suggestions(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    pins = {"enable_in_group": True, "suggest_on_compaction": "all"}
    bot = await openai_bots(chat=SHORT, pins=pins)
    bot.use_messenger(Failing())
    await chat_until_compaction(bot)
    fake_openai.script = [compacted(DIET), completion("answer 4")]
    with caplog.at_level(logging.WARNING):
        assert text_of(await ask(bot, dm(), "message 4")) == "answer 4"
        assert text_of(await ask(bot, dm(), "/pin dismiss 1")).startswith("Dismissed")
    assert "Vegetarian" not in caplog.text
    # In a group the proposal is made and listed all the same.
    member = group("42")
    await chat_until_compaction(bot, member)
    deadline = {"label": "deadline", "content": "Release on Friday.", "reason": "agreed"}
    fake_openai.script = [compacted(deadline), completion("answer 4")]
    with caplog.at_level(logging.WARNING):
        assert text_of(await ask(bot, member, "message 4")) == "answer 4"
    assert "Release on Friday." in text_of(await ask(bot, member, "/pin shared proposals"))
    assert "Release on Friday" not in caplog.text


# OpenAI's context-length 400 names "functions" when the request offers tools.
CONTEXT_LENGTH = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens (8800 in the messages, 200 in the functions). Please reduce the length of the "
    "messages or functions."
)


@pytest.mark.parametrize(
    "said",
    [
        CONTEXT_LENGTH,
        "The response was filtered due to the prompt triggering Azure OpenAI's content "
        "management policy (the functions are fine).",
        "Input tokens exceed the configured limit of 4096 tokens for tools and messages "
        "(context window).",
    ],
)
async def test_an_error_that_is_not_about_tools_leaves_tools_on(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, said: str
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    await chat_until_compaction(bot)
    fake_openai.refuse["tools"] = said
    fake_openai.script = [completion("answer 4")]
    with caplog.at_level(logging.WARNING):
        assert text_of(await ask(bot, dm(), "message 4")) == "answer 4"
    assert not [r for r in caplog.records if "refuses tools" in r.getMessage()]
    assert [r for r in caplog.records if "dropping old turns" in r.getMessage()]
    # The next compaction offers the tool again.
    fake_openai.refuse.pop("tools", None)
    await ask(bot, dm(), "message 5")
    fake_openai.script = [compacted(DIET), completion("answer 6")]
    await ask(bot, dm(), "message 6")
    assert compaction_requests(fake_openai)[-1]["tools"][0]["function"]["name"] == COMPACT_TOOL
    assert len(posted.with_buttons()) == 1


@pytest.mark.parametrize(
    "said",
    [
        TOOLS_REFUSED,
        "tool_choice param requires --jinja flag",
        "registry.ollama.ai/library/gemma:2b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "Unrecognized request argument supplied: tools",
        "Function calling is not enabled for this model",
    ],
)
async def test_a_refusal_of_tools_turns_them_off_for_compaction(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, said: str
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    await chat_until_compaction(bot)
    fake_openai.refuse["tools"] = said
    fake_openai.script = [
        completion("They talked."),
        completion(json.dumps([DIET])),
        completion("answer 4"),
    ]
    with caplog.at_level(logging.WARNING):
        assert text_of(await ask(bot, dm(), "message 4")) == "answer 4"
    assert [r for r in caplog.records if "refuses tools" in r.getMessage()]
    assert len(posted.with_buttons()) == 1
    assert fake_openai.messages()[1]["content"].endswith("They talked.")


async def test_a_group_is_asked_for_the_groups_facts_and_a_dm_for_the_users(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    pins = {"enable_in_group": True, "suggest_on_compaction": "all"}
    bot, _ = await suggesting_bot(openai_bots, pins=pins)
    await chat_until_compaction(bot, group("42"))
    await ask(bot, group("42"), "message 4")
    await chat_until_compaction(bot)
    await ask(bot, dm(), "message 4")
    # A server without tools: the group's call of its own says the same.
    fake_openai.refuse["tools"] = TOOLS_REFUSED
    await chat_until_compaction(bot, group("42", chat="-100999"))
    await ask(bot, group("42", chat="-100999"), "message 4")
    texts = [r["messages"][0]["content"] for r in compaction_requests(fake_openai)]
    # The group's and the DM's combined calls (each followed by the summary alone: the fake
    # model calls the tool with no arguments, as a server told to call it may); then the
    # refused one, the summary alone, and the suggestions' call of its own.
    in_group, _, in_dm, _, refused, _, group_alone = texts
    assert group_alone.startswith("You read a chat")
    for text in (in_group, refused, group_alone):
        assert "the group's decisions, conventions" in text
        assert "Never a fact about one person" in text
        assert "the user's lasting preferences" not in text
    assert "the user's lasting preferences, facts about them" in in_dm
    assert "the group's decisions" not in in_dm


async def test_a_suggestions_lines_cannot_fake_another_suggestion(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots)
    await chat_until_compaction(bot)
    faking = {**DIET, "content": "Vegetarian.\n#7 tz: Lives in Lisbon. (why: asked)\r\nWhy: x"}
    fake_openai.script = [compacted(faking), completion("answer 4")]
    await ask(bot, dm(), "message 4")
    (shown,) = posted.with_buttons()
    assert shown.text.splitlines()[1] == (
        "diet: Vegetarian. ⏎ #7 tz: Lives in Lisbon. (why: asked) ⏎ Why: x"
    )
    assert [line for line in shown.text.splitlines() if line.startswith("Why:")] == [
        "Why: said it twice"
    ]
    listing = text_of(await ask(bot, dm(), "/pin suggestions")).splitlines()
    assert [line for line in listing if line.startswith("#")] == [
        "#1 diet: Vegetarian. ⏎ #7 tz: Lives in Lisbon. (why: asked) ⏎ Why: x (why: said it twice)"
    ]
    # What is pinned is the content as suggested, line breaks and all.
    await ask(bot, dm(), "/pin accept 1")
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.content == faking["content"]


async def test_a_suggestion_that_cannot_fit_the_character_budget_is_not_shown(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await suggesting_bot(openai_bots, pins={"max_total_chars": 40})
    await ask(bot, dm(), "/pin add note Twenty characters!!")  # 19 of 40: room for 21
    await chat_until_compaction(bot)
    short = {"label": "fish", "content": "Eats no fish at all.", "reason": "said so"}
    fake_openai.script = [compacted(DIET, short), completion("answer 4")]
    await ask(bot, dm(), "message 4")
    (shown,) = posted.with_buttons()
    assert "fish: Eats no fish at all." in shown.text
    assert text_of(await ask(bot, dm(), "/pin accept 1")) == "Saved strong block 'fish'."


async def test_the_groups_full_note_has_no_figure_and_goes_when_suggestions_do(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    pins: dict[str, Any] = {
        "enable_in_group": True,
        "group_shared_admin_ids": ["7"],
        "suggest_on_compaction": "all",
        "max_blocks_per_session": 1,
    }
    bot, posted = await suggesting_bot(openai_bots, pins=pins)
    await ask(bot, group("7"), "/pin shared add rule Be kind.")
    member = group("42")
    await chat_until_compaction(bot, member)
    await ask(bot, member, "message 4")
    (said,) = [r.text for r in posted.messages.values()]
    assert said.startswith(
        "No pins are suggested from the conversation while this group's shared blocks are full "
        "(1 of 1, pins.max_blocks_per_session)."
    )
    status = text_of(await ask(bot, member, "/pin status"))
    assert (
        "Note: No pins are suggested from the conversation while this group's shared blocks "
        "are full (pins.max_blocks_per_session). Remove one with /pin shared remove <label> to "
        "get suggestions again."
    ) in status
    # Suggestions turned off for groups: the next compaction there drops the note.
    dm_only, _ = await suggesting_bot(openai_bots, pins={**pins, "suggest_on_compaction": "dm"})
    await ask(dm_only, member, "message 5")
    await ask(dm_only, member, "message 6")
    assert "No pins are suggested" not in text_of(await ask(dm_only, member, "/pin status"))
    # And when they come back while it is still full, the group is told again.
    await ask(bot, member, "message 7")
    await ask(bot, member, "message 8")
    assert len([r for r in posted.messages.values() if r.text.startswith("No pins")]) == 2
