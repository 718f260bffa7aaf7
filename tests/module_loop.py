"""Fixtures for a test module whose tests share one event loop, the module's (`pytestmark =
pytest.mark.asyncio(loop_scope="module")`): the browser tests, so that one Playwright driver
(a node process, ~0.3 s of CPU to start) serves the module's tests on each parallel worker
instead of one per test. Every test still has its own Chromium connection (its contexts close
with it), fake model server, bots, store and folder, as tests/conftest.py's fixtures of the
same names give; those run in each test's own loop, which these tests do not have, so such a
module imports these instead (in_module_X is fixture X: imported, it overrides the conftest's
X). A module fixture of its own that is async says loop_scope="module" too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Playwright, async_playwright

from storage import Store
from tests.browser import ServedChromium
from tests.conftest import OpenAIBots, bots_on
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI
from tests.templates import migrated_sqlite

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", name="playwright")
async def in_module_playwright() -> AsyncIterator[Playwright]:
    """The Playwright driver of this module's tests (on this parallel worker)."""
    async with async_playwright() as driver:
        yield driver


@pytest_asyncio.fixture(loop_scope="module", name="browser")
async def in_module_browser(
    served_chromium: ServedChromium, playwright: Playwright
) -> AsyncIterator[Browser]:
    """Debian's Chromium, driven by Playwright; the contexts a test opens close with it."""
    connected = await playwright.chromium.connect_over_cdp(served_chromium.endpoint)
    yield connected
    await connected.close()


@pytest_asyncio.fixture(loop_scope="module", name="fake_openai")
async def in_module_fake_openai() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(loop_scope="module", name="openai_bots")
async def in_module_openai_bots(
    tmp_path: Path, fake_openai: FakeOpenAI, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[OpenAIBots]:
    """As tests/conftest.py's openai_bots."""
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    async with bots_on(tmp_path, fake_openai, clock) as open_bot:
        yield open_bot


@pytest_asyncio.fixture(loop_scope="module", name="store")
async def in_module_store(tmp_path: Path) -> AsyncIterator[Store]:
    """As tests/conftest.py's store."""
    async with await Store.open(await migrated_sqlite(tmp_path / "pins.sqlite3")) as opened:
        yield opened
