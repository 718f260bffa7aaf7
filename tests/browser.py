"""Driving Debian's Chromium with Playwright (never a downloaded browser), for the web page's
tests: launch settings, one browser process per test process that each test connects to,
signing in, and screenshots kept as test artifacts."""

from __future__ import annotations

import os
import shutil
import subprocess
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
# What Playwright's own launch adds that matters to pages: no throttled timers or renderers.
SERVED_ARGS = [
    "--headless",
    "--remote-debugging-port=0",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
    "--hide-scrollbars",
    "--mute-audio",
    "--no-default-browser-check",
]
LISTENING = "DevTools listening on "
# Screenshots are kept only when asked for (PINBOT_TEST_ARTIFACTS names the folder, e.g.
# test-artifacts): a full page's PNG is about a sixth of a browser test's time.
KEPT = os.environ.get("PINBOT_TEST_ARTIFACTS")
ARTIFACTS = Path(KEPT or "test-artifacts") / "web"
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
    """Keep a screenshot of the whole page as a test artifact, when PINBOT_TEST_ARTIFACTS names
    a folder for them (else nothing). Written whole under a name of its own and then renamed,
    so tests running in parallel that keep the same name (one test's parameters) never leave a
    mixed file."""
    if not KEPT:
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = await page.screenshot(full_page=True)
    with tempfile.NamedTemporaryFile(dir=ARTIFACTS, suffix=".part", delete=False) as part:
        part.write(png)
    os.chmod(part.name, 0o644)  # as a file written directly would be
    os.replace(part.name, ARTIFACTS / f"{name}.png")


class ServedChromium:
    """Chromium running headless with its DevTools endpoint open, for tests to connect to with
    Playwright (`connect_over_cdp`): one launch per test process instead of one per test. Each
    test uses contexts of its own, which share no cookies or storage."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="pinbot-chromium-")
        self.process = subprocess.Popen(
            [CHROMIUM, *SERVED_ARGS, *CHROMIUM_ARGS, f"--user-data-dir={self.profile}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        said: list[str] = []
        assert self.process.stderr is not None
        for line in self.process.stderr:  # it says where it listens once it does
            said.append(line)
            if line.startswith(LISTENING):
                self.endpoint = line.removeprefix(LISTENING).strip()
                break
        else:
            self.stop()
            raise RuntimeError("Chromium did not start:\n" + "".join(said))
        self.process.stderr.close()  # nothing reads its further chatter

    def stop(self) -> None:
        """End the browser and delete its profile."""
        self.process.terminate()
        try:
            self.process.wait(timeout=WAIT_MS / 1000)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
