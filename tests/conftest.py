"""Shared fixtures: a fresh database per test, a fake clock, a bot wired to the offline model."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from _pytest.nodeid import NodeId
from playwright.async_api import Browser, async_playwright

from bot.config import Config, parse_config
from bot.core.entry.incoming import SILENT, Incoming, ReplySurface
from bot.core.entry.pinbot import Pinbot
from bot.core.people import ChatKind, Conversation
from bot.core.people.permissions import AdminLookup
from bot.core.replies import Reply, Result
from bot.llm.base import TextSink
from bot.llm.offline import OfflineChatModel
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from storage.models import (
    ABSENT,
    Author,
    BlockChange,
    BlockState,
    Channel,
    Limits,
    NewBlock,
    Wanted,
    label_key,
)
from tests.browser import ServedChromium
from tests.fakes.clock import FakeClock
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.forked import Forks, ForkServer
from tests.pg import PgCluster, fresh_database
from tests.process import logging_kept
from tests.templates import migrated_sqlite

# The suite starts many Python processes (parallel workers, `pinbot` commands, servers): where
# the environment says not to keep compiled bytecode, each would compile the package again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many parallel workers `-n auto` (pyproject.toml's default) starts: one more than
    this process may use cores, since the tests also wait on the processes, servers and
    browser they start, and a third worker keeps two cores busy meanwhile.
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Each test gets the logging set-up the one before it found: a test that configures
    logging would otherwise change what later tests on the same worker capture."""
    with logging_kept():
        yield


# lark-oapi, which pinbot imports once a Feishu frontend starts, takes ~3 s of CPU in each test
# process that imports it: the tests that start one in their own process run on one parallel
# worker (xdist_group) instead of paying that on each.
FEISHU_IN_PROCESS = pytest.mark.xdist_group("feishu-in-process")

# Modules whose tests take longest (whole groups of worker processes, generated replies): they
# are handed out first, so that no parallel worker is still running them when the others are
# done. The order of everything else is as collected. (`--dist loadgroup` hands out the groups of
# xdist_group first, the largest first, then the rest in this order.)
LONGEST_FIRST = (
    # the real model's group, one test after another on one worker: the longest chain of the run
    "tests/real_model/test_console.py",
    "tests/real_model/test_server.py",
    "tests/real_model/test_streamed.py",
    # two groups of tests that run clusters of pinbot processes
    "tests/integration/test_workers.py",
    # two tests that kill a bot fifty times each, the longest single tests
    "tests/integration/test_crash_loops.py",
    "tests/integration/test_metrics.py",
    "tests/adapters/test_markdown_properties.py",
    "tests/ops/test_crash_safety.py",
    "tests/integration/test_web_changes.py",
    "tests/integration/test_web_layout.py",
    "tests/integration/test_secret_doors.py",
    "tests/integration/test_web.py",
    "tests/integration/test_feishu.py",
)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the longest modules' tests first (a stable order, the same in every worker), and
    give each test marked xdist_group its group, as `--dist loadgroup` asks: pytest-xdist names
    the group in the test's node id (`...::test@group`; the controller sends a group to one
    worker) by setting `item._nodeid`, which pytest 9.2 no longer reads (a node's id is now
    `item._id`), and without this each group's tests were spread over every worker."""

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An empty store in this test's folder (pins.sqlite3), at the latest schema."""
    async with await Store.open(await migrated_sqlite(tmp_path / "pins.sqlite3")) as opened:
        yield opened


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL server for the whole run of each test process (every parallel worker starts
    its own, with its own folder and port), started the first time a test there needs it; a test
    that needs it fails (never skips) when it cannot start."""
    cluster = PgCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def pg_url(pg_cluster: PgCluster) -> str:
    """The URL of a fresh, empty database of its own."""
    return await fresh_database(pg_cluster)


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Telegram Bot API server on 127.0.0.1."""
    server = await FakeTelegram().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake_feishu() -> AsyncIterator[FakeFeishu]:
    """A fake Feishu OpenAPI server on 127.0.0.1."""
    server = await FakeFeishu().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    yield server
    await server.stop()


TEST_KEY_ENV = "PINBOT_TEST_KEY"


def agent_llm(base_url: str) -> dict[str, Any]:
    """llm settings for the real OpenAI client against a fake server, with the agent tools on
    (the key is read from TEST_KEY_ENV, which the test sets)."""
    return {
        "backend": "openai",
        "base_url": base_url,
        "api_key_env": TEST_KEY_ENV,
        "max_retries": 0,
        "agent_tools": True,
    }


NO_RATE_LIMITS = {"pin_commands_per_minute": 0, "model_turns_per_minute": 0}


def make_config(**sections: Any) -> Config:
    """A Config from keyword sections, e.g. make_config(pins={"enable_in_group": True}).

    Rate limits are off unless a test sets `limits`: tests send bursts on a clock that barely
    moves."""
    sections.setdefault("limits", NO_RATE_LIMITS)
    return parse_config(sections, "<test>")


BotFactory = Callable[..., Pinbot]
OpenAIBots = Callable[..., Awaitable[Pinbot]]
SYSTEM = "Be helpful."


@contextlib.asynccontextmanager
async def bots_on(
    tmp_path: Path, fake_openai: FakeOpenAI, clock: FakeClock
) -> AsyncIterator[OpenAIBots]:
    """openai_bots' opener (the key in PINBOT_TEST_KEY is the caller's to set); what it opened
    is closed at the end."""
    opened: list[tuple[Store, OpenAIChatModel]] = []

    async def open_bot(**sections: Any) -> Pinbot:
        llm = {
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "api_key_env": "PINBOT_TEST_KEY",
            "system_prompt": SYSTEM,
            "max_retries": 0,
            **sections.pop("llm", {}),
        }
        config = make_config(llm=llm, **sections)
        path = tmp_path / "bot.sqlite3"
        store = await Store.open(path if path.exists() else await migrated_sqlite(path))
        model = OpenAIChatModel.from_config(config.llm)
        opened.append((store, model))
        return Pinbot(config, store, model, clock=clock)

    yield open_bot
    for store, model in opened:
        await store.close()
        await model.close()


@pytest.fixture
async def openai_bots(
    tmp_path: Path, fake_openai: FakeOpenAI, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[OpenAIBots]:
    """Opens bots on one database that talk to the fake OpenAI server through the real SDK
    (system prompt SYSTEM, no retries); keyword sections as for make_config."""
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    async with bots_on(tmp_path, fake_openai, clock) as open_bot:
        yield open_bot


@pytest.fixture
async def make_bot(store: Store, clock: FakeClock) -> AsyncIterator[BotFactory]:
    models: list[Any] = []

    def build(model: Any = None, **sections: Any) -> Pinbot:
        models.append(model or OfflineChatModel())
        return Pinbot(make_config(**sections), store, models[-1], clock=clock)

    yield build
    for model in models:
        await model.close()


async def put_block(
    store: Store, new: NewBlock, now: datetime, *, actor: str = "", audited: bool = False
) -> None:
    """Insert a block straight into the store (as a command of actor would), committed."""
    state = BlockState(new.content, new.level, new.state, new.priority)
    change = BlockChange(
        new.scope,
        (Wanted(new.label, state),),
        Author(actor, Channel.COMMAND),
        {label_key(new.label): ABSENT},
        audited,
    )
    await store.apply_change(change, now=now, limits=Limits(20))


def text_of(reply: Reply | None) -> str:
    """A reply's text ('' when the bot did not answer)."""
    return "" if reply is None else reply.text


def outcome_of(reply: Reply | None) -> Result | None:
    """How a message went (None when the bot did not answer)."""
    return None if reply is None else reply.outcome


class Previewed(ReplySurface):
    """A surface that shows a streamed answer's previews to on_text, and nothing else."""

    def __init__(self, on_text: TextSink) -> None:
        super().__init__()
        self._on_text = on_text

    @property
    def on_text(self) -> TextSink | None:
        """Where the previews go."""
        return self._on_text


async def ask(
    bot: Pinbot,
    conversation: Conversation,
    text: str | None,
    *,
    mentioned: bool = False,
    replied_to_bot: bool = False,
    platform_admin: AdminLookup | None = None,
    on_text: TextSink | None = None,
) -> Reply | None:
    """bot.handle of one message (text in conversation, with those facts), on a surface that
    sends nothing (the reply is returned) and shows a streamed answer's previews to on_text."""
    incoming = Incoming(
        conversation,
        text,
        mentioned=mentioned,
        replied_to_bot=replied_to_bot,
        platform_admin=platform_admin,
    )
    return await bot.handle(incoming, SILENT if on_text is None else Previewed(on_text))


def dm(user: str = "42", platform: str = "console") -> Conversation:
    return Conversation(platform, ChatKind.DIRECT, chat_id=user, sender_id=user)


def group(
    user: str | None = "42",
    chat: str | None = "-100123",
    topic: str | None = None,
    platform: str = "console",
) -> Conversation:
    return Conversation(platform, ChatKind.GROUP, chat_id=chat, sender_id=user, topic_id=topic)


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    """The forking process of tests/forked.py, started the first time a test of this process
    needs it."""
    server = ForkServer()
    yield server
    server.stop()


@pytest.fixture
async def forks(fork_server: ForkServer) -> AsyncIterator[Forks]:
    """pinbot processes forked for this test; those still running are killed at its end."""
    lent = await Forks.attach(fork_server)
    yield lent
    await lent.detach()


@pytest.fixture(scope="session")
def served_chromium() -> Iterator[ServedChromium]:
    """Debian's Chromium, headless, started the first time a test of this process needs it."""
    chromium = ServedChromium()
    yield chromium
    chromium.stop()


@pytest.fixture
async def browser(served_chromium: ServedChromium) -> AsyncIterator[Browser]:
    """Debian's Chromium, driven by Playwright; the contexts a test opens close with it."""
    async with async_playwright() as playwright:
        connected = await playwright.chromium.connect_over_cdp(served_chromium.endpoint)
        yield connected
        await connected.close()
