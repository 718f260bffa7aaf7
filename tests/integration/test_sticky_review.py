"""The hostile review of sensitive blocks (issue 37), through the paths a user's message takes:
what a block held before it was made sensitive stays hidden in histories, the group's log and
exports; the model cannot overwrite what it only saw masked; flags are read where users put
them; masking catches how people write secrets."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from bot.cli.importing import MAX_FILE_BYTES
from bot.core.blocks.review import RULE_TEXTS, Rule
from bot.web import views
from storage import Store
from storage.decisions import PROPOSALS
from storage.models import (
    ABSENT,
    WITHHELD,
    Author,
    BlockChange,
    BlockState,
    Channel,
    Level,
    Limits,
    State,
    Wanted,
)
from tests.conftest import BotFactory, OpenAIBots, ask, dm, group, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.integration.test_sticky import pinbot_import, slot
from tests.integration.test_web_keys_and_history import GROUP, Serve, said, serve
from tests.ops.test_transfer import run_cli
from tests.process import run_pinbot_here

__all__ = ["serve"]  # the web page's fixture, served here too

GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
ADDRESS = "10.20.30.4"  # of both contents below


async def test_sensitive_on_hides_earlier_versions_in_the_log_history_and_export(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    bot = make_bot(pins=GROUPS)
    admin, member = group("7"), group("42")
    await ask(bot, admin, "/pin shared add ops the server is 10.20.30.40")
    clock.advance(minutes=1)
    await ask(bot, admin, "/pin shared edit ops the server is 10.20.30.41 now")
    log = text_of(await ask(bot, member, "/pin shared log"))
    assert ADDRESS in log  # not sensitive yet: the group reads it
    clock.advance(minutes=1)
    await ask(bot, admin, "/pin shared sensitive ops on")
    for asked in ("/pin shared log", "/pin shared history ops"):
        shown = text_of(await ask(bot, member, asked))
        assert ADDRESS not in shown, (asked, shown)
        assert "the server is [ip]" in shown, (asked, shown)
    code, out, err = await run_cli("export", "--with-history", db=tmp_path / "pins.sqlite3")
    assert code == 0, err
    assert ADDRESS not in out
    document = json.loads(out)
    assert document["redacted"] is True
    befores = [v["before"] for v in document["scopes"]["console:group:-100123"]["history"]]
    assert [b["content"] if b else None for b in befores] == [
        None,
        "the server is [ip]",
        "the server is [ip] now",
    ]
    # The stored versions stay whole: the raw export has them.
    raw = ("export", "--with-history", "--raw")
    code, out, err = await run_cli(*raw, db=tmp_path / "pins.sqlite3")
    assert code == 0 and "10.20.30.40" in out and "10.20.30.41" in out, err
    # Turned off, what comes after shows as written; what came before stays hidden.
    await ask(bot, admin, "/pin shared sensitive ops off")
    history = text_of(await ask(bot, member, "/pin shared history ops"))
    assert history.count(ADDRESS) == 1 and "1. (now)" in history.splitlines()[1]
    assert ADDRESS in history.splitlines()[1]


async def test_a_block_added_sensitive_after_removal_hides_the_old_log(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins=GROUPS)
    admin = group("7")
    await ask(bot, admin, "/pin shared add ops the server is 10.20.30.40")
    await ask(bot, admin, "/pin shared remove ops")
    await ask(bot, admin, "/pin shared add ops the server moved --sensitive")
    log = text_of(await ask(bot, group("42"), "/pin shared log"))
    assert ADDRESS not in log and "the server is [ip]" in log


async def test_the_web_history_hides_versions_from_before_sensitive(serve: Serve) -> None:
    bot, session, base = await serve()
    assert await said(bot, "/pin shared add ops the server is 10.20.30.40") is not None
    assert await said(bot, "/pin shared sensitive ops on") is not None
    url = f"{base}/scope/{quote(GROUP, safe='')}/history?label=ops"
    async with session.get(url) as page:
        shown = await page.text()
    assert page.status == 200
    assert ADDRESS not in shown and "the server is [ip]" in shown
    async with session.get(f"{url}&raw=1") as page:
        raw = await page.text()
    assert page.status == 200 and re.search(r"the server is 10\.20\.30\.40", raw)


async def test_a_change_built_without_a_mask_keeps_sensitive_content_out_of_the_log(
    store: Store, clock: FakeClock
) -> None:
    scope = "console:group:-100123"
    state = BlockState("the server is 10.20.30.40", Level.CONTEXT, State.ACTIVE, sensitive=True)
    change = BlockChange(
        scope, (Wanted("ops", state),), Author("7", Channel.COMMAND), {"ops": ABSENT}, True
    )
    await store.apply_change(change, now=clock(), limits=Limits(20))
    (entry,) = await store.audit_log(scope, 10)
    assert entry.new_content == WITHHELD
    (block,) = await store.blocks([scope])
    assert block.content == "the server is 10.20.30.40"  # the store keeps it whole


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.usefixtures("api_key")
async def test_the_model_cannot_write_back_what_it_saw_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True, "tool_names": "sticky"})
    await ask(bot, dm(), "/pin add ops server 10.20.30.40 port 22 --sensitive")
    await ask(bot, dm(), "/pin add notes plain text --sensitive")
    fake_openai.script = [
        tool_calls(
            ("sticky_set", {"key": "ops", "content": "server [ip] port 22 user admin"}),
            ("sticky_set", {"key": "notes", "content": "plain text, more of it"}),
        ),
        completion("Done."),
    ]
    assert text_of(await ask(bot, dm(), "add the user to ops")) == "Done."
    refused, saved = tool_results(fake_openai.requests[1])
    assert refused == "Refused: " + RULE_TEXTS[Rule.MASKED].format(label="ops", pin="/pin")
    assert saved.startswith("Saved the new content of 'notes'.")
    blocks = {b.label: b.content for b in await bot.store.blocks(["console:direct:42"])}
    assert blocks["ops"] == "server 10.20.30.40 port 22"


@pytest.mark.usefixtures("api_key")
async def test_a_proposal_cannot_write_back_a_sensitive_shared_block_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True}, pins=GROUPS)
    await ask(bot, group("7"), "/pin shared add ops server 10.20.30.40 --sensitive")
    propose = {"label": "ops", "content": "server [ip], port 22"}
    fake_openai.script = [tool_calls(("pin_propose", propose)), completion("Tried.")]
    assert text_of(await ask(bot, group("42"), "note the port")) == "Tried."
    (result,) = tool_results(fake_openai.requests[1])
    assert result == "Refused: " + RULE_TEXTS[Rule.MASKED].format(label="ops", pin="/pin shared")
    assert await bot.store.decisions(PROPOSALS, "console:group:-100123") == []


async def test_sensitive_is_read_right_after_the_label_and_on_edit(make_bot: BotFactory) -> None:
    bot = make_bot()
    saved = text_of(await ask(bot, dm(), "/pin add ops --sensitive host 10.20.30.40"))
    assert saved.startswith("Saved strong block 'ops', sensitive"), saved
    await ask(bot, dm(), "/pin add web --priority 5 --pinned host 10.20.30.41")
    await ask(bot, dm(), "/pin add db host 10.20.30.42")
    assert text_of(await ask(bot, dm(), "/pin edit db host 10.20.30.43 --sensitive")) == (
        "Updated block 'db'."
    )
    await ask(bot, dm(), "/pin edit web --sensitive host 10.20.30.44")
    blocks = {b.label: b for b in await bot.store.blocks(["console:direct:42"])}
    assert (blocks["ops"].content, blocks["ops"].sensitive) == ("host 10.20.30.40", True)
    assert (blocks["db"].content, blocks["db"].sensitive) == ("host 10.20.30.43", True)
    web = blocks["web"]
    assert (web.content, web.sensitive, web.priority) == ("host 10.20.30.44", True, 5)
    assert web.state is State.PINNED
    # An edit without the flag keeps the block as sensitive as it is.
    await ask(bot, dm(), "/pin edit db host 10.20.30.45")
    (db,) = [b for b in await bot.store.blocks(["console:direct:42"]) if b.label == "db"]
    assert db.sensitive and db.content == "host 10.20.30.45"


async def test_a_sensitive_flag_inside_the_content_is_refused(make_bot: BotFactory) -> None:
    bot = make_bot()
    for asked, usage in (
        ("/pin add ops host --sensitive 10.20.30.40", "/pin add <label> -- <content>"),
        ("/pin edit ops host --sensitive 10.20.30.40", "/pin edit <label> -- <content>"),
        ("/pin add ops --sensitiv host 10.20.30.40", "/pin add <label> -- <content>"),
        ("/pin add ops --sensitive --sensitive host", "/pin add <label> -- <content>"),
    ):
        reply = text_of(await ask(bot, dm(), asked))
        assert usage in reply, (asked, reply)
    first = text_of(await ask(bot, dm(), "/pin add ops host --sensitive 10.20.30.40"))
    assert first.startswith(
        "--sensitive is inside the content, where it is not read as a flag; put it right after "
        "the label or at the end."
    )
    assert await bot.store.blocks(["console:direct:42"]) == []
    # After --, everything is content, as written.
    await ask(bot, dm(), "/pin add doc -- grep --sensitive is not a flag")
    (doc,) = await bot.store.blocks(["console:direct:42"])
    assert doc.content == "grep --sensitive is not a flag" and not doc.sensitive


async def test_making_a_block_sensitive_says_what_is_masked_or_that_nothing_is(
    make_bot: BotFactory,
) -> None:
    bot = make_bot()
    nothing = "nothing in it looks like an address or a secret; the model reads it as written"
    assert text_of(await ask(bot, dm(), "/pin add plan ship on Friday --sensitive")) == (
        f"Saved strong block 'plan', sensitive (the model and listings see it redacted; {nothing})."
    )
    assert text_of(await ask(bot, dm(), "/pin add db my password is hunter2 --sensitive")) == (
        "Saved strong block 'db', sensitive (the model and listings see it redacted; masked: "
        "a password or secret)."
    )
    await ask(bot, dm(), "/pin add box ssh root@192.168.001.001 then curl -u admin:pw x")
    assert text_of(await ask(bot, dm(), "/pin sensitive box on")) == (
        "Block 'box' is now sensitive: kept whole, but the model, the tools and listings see it "
        "redacted (masked: an SSH target, a user:password pair). /pin sensitive box "
        "off undoes this."
    )
    await ask(bot, dm(), "/pin add note plain words")
    assert f"({nothing})" in text_of(await ask(bot, dm(), "/pin sensitive note"))
    listed = text_of(await ask(bot, dm(), "/pin list"))
    for hidden in ("hunter2", "192.168", "admin:pw"):
        assert hidden not in listed


@pytest.mark.usefixtures("api_key")
async def test_a_proposal_cannot_test_guesses_at_a_sensitive_shared_block(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    bot = await openai_bots(llm={"agent_tools": True}, pins=GROUPS)
    await ask(bot, group("7"), "/pin shared add ops server 10.20.30.40 --sensitive")
    # Kept from before the operator turned the credential check on (it refuses this add now).
    vpn = BlockState("password: letmein2", Level.CONTEXT, State.ACTIVE, sensitive=True)
    change = BlockChange(
        "console:group:-100123", (Wanted("vpn", vpn),), Author("7", Channel.IMPORT), {"vpn": ABSENT}
    )
    await bot.store.apply_change(change, now=clock(), limits=Limits(20))
    fake_openai.script = [
        tool_calls(
            ("pin_propose", {"label": "ops", "content": "server 10.20.30.40"}),  # right
            ("pin_propose", {"label": "ops", "content": "server 10.20.30.41"}),  # wrong
            ("pin_propose", {"label": "ops", "content": "server [ip]"}),  # as the group sees it
            ("pin_propose", {"label": "vpn", "content": "password: letmein2"}),  # right
            ("pin_propose", {"label": "vpn", "content": "password: letmein3"}),  # wrong
        ),
        completion("Tried."),
    ]
    assert text_of(await ask(bot, group("42"), "guess")) == "Tried."
    right, wrong, seen, right_vpn, wrong_vpn = tool_results(fake_openai.requests[1])
    assert right.startswith("Proposal #1 is posted") and wrong.startswith("Proposal #2 is posted")
    assert seen == "Refused: the shared block 'ops' already has this content."
    assert right_vpn.startswith("Refused: Not saved: this looks like a password")
    assert right_vpn == wrong_vpn
    assert len(await bot.store.decisions(PROPOSALS, "console:group:-100123")) == 2


async def test_a_sticky_file_with_impossible_times_or_too_large_is_refused(
    tmp_path: Path,
) -> None:
    far = "2999-01-01T00:00:00.000Z"
    document = {
        "version": 2,
        "slots": {
            "fine": slot("Fine."),
            "backwards": {**slot("Made after it changed."), "updated": "2026-01-01T00:00:00Z"},
            "future": {**slot("Not yet."), "created": far, "updated": far},
        },
    }
    out = await pinbot_import(tmp_path, document, "--scope", "console:direct:42")
    lines = out.splitlines()
    assert lines[0] == (
        "problem: slot 'backwards': updated is before created; a slot changes after it is made"
    )
    assert lines[1].startswith("problem: slot 'future': created is in the future (now is ")
    assert lines[2].startswith("problem: slot 'future': updated is in the future (now is ")
    assert lines[-1] == "3 problem(s); nothing was imported"
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing is written to disk
    config = tmp_path / "import.yaml"
    code, _, err = await run_pinbot_here(
        "import", str(huge), "--config", str(config), "--scope", "console:direct:42"
    )
    assert code == 1
    assert err.strip() == (
        f"pinbot: cannot read {huge}: it is {MAX_FILE_BYTES + 1:,} bytes, over the "
        f"{MAX_FILE_BYTES:,} an import reads; to copy a whole store, use pinbot transfer"
    )


async def test_web_search_fills_its_page_past_sensitive_blocks_found_only_by_what_they_hide(
    serve: Serve, clock: FakeClock
) -> None:
    bot, session, base = await serve()
    hidden = BlockState("API_KEY=needle42", Level.CONTEXT, State.ACTIVE, sensitive=True)
    for number in range(views.SEARCH_RESULTS + 1):
        label = f"s{number:03d}"
        change = BlockChange(
            GROUP, (Wanted(label, hidden),), Author("7", Channel.IMPORT), {label: ABSENT}
        )
        await bot.store.apply_change(change, now=clock(), limits=Limits(1000))
    clock.advance(minutes=1)
    plain = BlockState("a needle in the haystack", Level.CONTEXT, State.ACTIVE)
    change = BlockChange(
        GROUP, (Wanted("plain", plain),), Author("7", Channel.IMPORT), {"plain": ABSENT}
    )
    await bot.store.apply_change(change, now=clock(), limits=Limits(1000))
    await bot.store.catch_up_search()
    async with session.get(f"{base}/search?q=needle") as page:
        shown = await page.text()
    assert page.status == 200
    assert "a needle in the haystack" in shown and "needle42" not in shown


async def test_listings_say_shown_redacted_only_when_something_is_hidden_and_name_it(
    make_bot: BotFactory,
) -> None:
    """Issue 44: a sensitive block with nothing to hide is not labelled "shown redacted"."""
    bot = make_bot()
    await ask(bot, dm(), "/pin add plan ship on Friday --sensitive")
    await ask(bot, dm(), "/pin add box jump host 10.11.12.13 --sensitive")
    listing = text_of(await ask(bot, dm(), "/pin list"))
    assert "plan (strong, active, sensitive, nothing in it looks like a secret" in listing
    assert "box (strong, active, sensitive, shown redacted (hides an IP address))" in listing
    assert "jump host [ip]" in listing and "10.11.12.13" not in listing
    sticky = text_of(await ask(bot, dm(), "/sticky"))
    assert "shown redacted (hides an IP address)" in sticky and "10.11.12.13" not in sticky
