"""Issue 44 through the front ends: a credential of every kind in the corpus is refused at every
door into a group (a shared admin's /pin shared add, a member's /pin add, the model's pin_set, a
proposal's reason, a Sticky import into a group scope), and a sensitive block's secrets never
reach the model's request or the tools' reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage.decisions import PROPOSALS
from tests.conftest import OpenAIBots, ask, dm, group, text_of
from tests.core.secrets.corpus import SECRETS, Secret
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.integration.test_sticky import pinbot_import, slot

SHARED = "console:group:-100123"
PERSONAL = "console:group:-100123::u:42"
GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}


def _one_of_each_kind() -> list[Secret]:
    """The first single-line credential of each kind in the corpus (a whole PEM block does not
    fit in a one-line command)."""
    seen: dict[str, Secret] = {}
    for secret in SECRETS:
        if secret.credential and "\n" not in secret.line and secret.kind not in seen:
            seen[secret.kind] = secret
    return list(seen.values())


CREDENTIALS = _one_of_each_kind()


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_the_doors_are_tried_with_many_kinds() -> None:
    assert len(CREDENTIALS) >= 30


async def test_pin_commands_in_a_group_refuse_every_kind(openai_bots: OpenAIBots) -> None:
    bot = await openai_bots(pins=GROUPS)
    for secret in CREDENTIALS:
        for speaker, command in (
            (group("7"), f"/pin shared add k {secret.line}"),
            (group("42"), f"/pin add k {secret.line}"),
        ):
            reply = text_of(await ask(bot, speaker, command)) or ""
            assert "looks like" in reply, (secret.kind, secret.line, reply)
            assert all(part not in reply for part in secret.hidden)
    assert await bot.store.blocks([SHARED, PERSONAL]) == []


async def test_the_models_pin_set_and_proposal_reasons_refuse_every_kind(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins=GROUPS, llm={"agent_tools": True})
    calls = []
    for number, secret in enumerate(CREDENTIALS):
        calls.append(("pin_set", {"label": f"s{number}", "content": secret.line}))
        reason = {"label": "deadline", "content": "Friday.", "reason": secret.line}
        calls.append(("pin_propose", reason))
    fake_openai.script = [tool_calls(*calls), completion("Done.")]
    assert text_of(await ask(bot, group("42"), "pin all of these")) == "Done."
    results = tool_results(fake_openai.requests[1])
    assert len(results) == 2 * len(CREDENTIALS)
    for secret, result in zip([s for s in CREDENTIALS for _ in range(2)], results, strict=True):
        assert result.startswith("Refused") and "looks like" in result, (secret.line, result)
    assert await bot.store.blocks([SHARED, PERSONAL]) == []
    assert await bot.store.decisions(PROPOSALS, SHARED) == []


async def test_a_sticky_import_into_a_group_scope_refuses_every_kind(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    slots = {f"s{number}": slot(secret.line) for number, secret in enumerate(CREDENTIALS)}
    document = {"version": 1, "slots": slots}
    pins = "{max_blocks_per_session: 100, max_total_chars: 100000}"
    out = await pinbot_import(tmp_path, document, "--scope", SHARED, pins=pins)
    refused = [line for line in out.splitlines() if "refused (credential)" in line]
    assert len(refused) == len(CREDENTIALS), out
    assert all(part not in out for secret in CREDENTIALS for part in secret.hidden)
    bot = await openai_bots()
    assert await bot.store.blocks([SHARED]) == []


@pytest.mark.parametrize(
    "secret", [s for s in SECRETS if "\n" not in s.line][::7], ids=lambda s: s.kind
)
async def test_a_sensitive_blocks_secrets_never_reach_the_model_or_its_tools(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, secret: Secret
) -> None:
    bot = await openai_bots(llm={"agent_tools": True})
    reply = text_of(await ask(bot, dm(), f"/pin add note --sensitive {secret.line}")) or ""
    assert reply.startswith("Saved") and all(part not in reply for part in secret.hidden)
    fake_openai.script = [
        tool_calls(
            ("pin_get", {"label": "note"}), ("pin_get", {}), ("sticky_get", {"key": "note"})
        ),
        completion("Read."),
    ]
    assert text_of(await ask(bot, dm(), "what is in my note?")) == "Read."
    for request in fake_openai.requests:
        sent = json.dumps(request["messages"], ensure_ascii=False)
        assert all(part not in sent for part in secret.hidden), (secret.line, sent)
    listing = text_of(await ask(bot, dm(), "/pin list")) or ""
    assert all(part not in listing for part in secret.hidden)


async def test_sticky_get_shows_a_sensitive_blocks_secrets_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    """With the Sticky Context tool names, `sticky_get` of one slot and of all slots returns
    the block as the model may read it: the secret masked, the rest as written."""
    bot = await openai_bots(llm={"agent_tools": True, "tool_names": "sticky"})
    line = "jump host 10.11.12.13, password: Tr0ub4dor&3, door ||4821||"
    assert "Saved" in (text_of(await ask(bot, dm(), f"/pin add ops --sensitive {line}")) or "")
    fake_openai.script = [
        tool_calls(("sticky_get", {"key": "ops"}), ("sticky_get", {})),
        completion("Read."),
    ]
    assert text_of(await ask(bot, dm(), "read my slots")) == "Read."
    one, every = tool_results(fake_openai.requests[1])
    for result in (one, every):
        assert "jump host [ip], password: [secret], door [hidden]" in result
    sent = json.dumps([r["messages"] for r in fake_openai.requests], ensure_ascii=False)
    assert all(part not in sent for part in ("10.11.12.13", "Tr0ub4dor", "4821"))
