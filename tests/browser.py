"""Driving Debian's Chromium with Playwright (never a downloaded browser), for the web page's
tests: launch settings, signing in, and screenshots kept as test artifacts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from playwright.async_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",  # as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("PINBOT_TEST_ARTIFACTS", "test-artifacts")) / "web"
WAIT_MS = 10_000  # a safety net for a page that never comes, not a pause


async def sign_in(page: Page, base: str, token: str) -> int:
    """Sign in with token through the form; the status of the page it leads to."""
    await page.goto(f"{base}/signin")
    await page.fill("input[name=token]", token)
    async with page.expect_navigation() as navigation:
        await page.click("button[type=submit]")
    response = await navigation.value
    assert response is not None
    return response.status


async def shot(page: Page, name: str) -> None:
    """Keep a screenshot of the whole page as a test artifact. Written whole under a name of
    its own and then renamed, so tests running in parallel that keep the same name (one test's
    parameters) never leave a mixed file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = await page.screenshot(full_page=True)
    with tempfile.NamedTemporaryFile(dir=ARTIFACTS, suffix=".part", delete=False) as part:
        part.write(png)
    os.chmod(part.name, 0o644)  # as a file written directly would be
    os.replace(part.name, ARTIFACTS / f"{name}.png")
