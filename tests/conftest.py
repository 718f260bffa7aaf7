"""Shared fixtures: a fresh database per test, a fake clock, a bot wired to the offline model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import Config, parse_config
from bot.core.bot import Pinbot
from bot.core.conversation import ChatKind, Conversation
from bot.llm.offline import OfflineChatModel
from storage.sqlite import Store
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI
from tests.pg import PgCluster, fresh_database


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await Store.open(tmp_path / "pins.sqlite3") as opened:
        yield opened


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL server for the whole run, started the first time a test needs it; a test
    that needs it fails (never skips) when it cannot start."""
    cluster = PgCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def pg_url(pg_cluster: PgCluster) -> str:
    """The URL of a fresh, empty database of its own."""
    return await fresh_database(pg_cluster)


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    yield server
    await server.stop()


NO_RATE_LIMITS = {"pin_commands_per_minute": 0, "model_turns_per_minute": 0}


def make_config(**sections: Any) -> Config:
    """A Config from keyword sections, e.g. make_config(pins={"enable_in_group": True}).

    Rate limits are off unless a test sets `limits`: tests send bursts on a clock that barely
    moves."""
    sections.setdefault("limits", NO_RATE_LIMITS)
    return parse_config(sections, "<test>")


BotFactory = Callable[..., Pinbot]


@pytest.fixture
async def make_bot(store: Store, clock: FakeClock) -> AsyncIterator[BotFactory]:
    models: list[Any] = []

    def build(model: Any = None, **sections: Any) -> Pinbot:
        models.append(model or OfflineChatModel())
        return Pinbot(make_config(**sections), store, models[-1], clock=clock)

    yield build
    for model in models:
        await model.close()


def dm(user: str = "42", platform: str = "console") -> Conversation:
    return Conversation(platform, ChatKind.DIRECT, chat_id=user, sender_id=user)


def group(
    user: str | None = "42",
    chat: str | None = "-100123",
    topic: str | None = None,
    platform: str = "console",
) -> Conversation:
    return Conversation(platform, ChatKind.GROUP, chat_id=chat, sender_id=user, topic_id=topic)
