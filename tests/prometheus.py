"""A throwaway Prometheus server for tests: Debian's /usr/bin/prometheus with a config and storage
of its own in a temporary folder, on a free port of 127.0.0.1, scraping its targets every
second; and promtool. A test that needs them fails (never skips) when they are not installed."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.fakes.http import free_port

START_TRIES = 3  # another process may take the free port before Prometheus binds it
WAIT_S = 60  # a safety net for a process on a busy machine, never a pause
INSTALL = "apt-get install -y prometheus (Debian's package has prometheus and promtool)"


def binary(name: str) -> str:
    """The path of prometheus or promtool; RuntimeError saying how to install it if missing."""
    found = shutil.which(name)
    if found is None and Path(f"/usr/bin/{name}").exists():
        found = f"/usr/bin/{name}"
    if found is None:
        raise RuntimeError(f"{name} is not installed: {INSTALL}")
    return found


def promtool(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """Run promtool with args (and stdin); its exit status and output."""
    return subprocess.run(
        [binary("promtool"), *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


class Prometheus:
    """One running Prometheus server scraping targets (host:port) every second."""

    def __init__(self, targets: list[str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pinbot-prometheus-"))
        self.targets = targets
        self.port = 0
        self.process: asyncio.subprocess.Process | None = None
        self.session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Prometheus:
        """Start the server and wait until it is ready; raises if it cannot start."""
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "pinbot", "static_configs": [{"targets": self.targets}]}
            ],
        }
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.session = aiohttp.ClientSession()
        for _ in range(START_TRIES):
            self.port = free_port()
            if await self._started():
                return self
        raise RuntimeError(
            "Prometheus did not start:\n" + (self.folder / "log").read_text(errors="replace")
        )

    async def _started(self) -> bool:
        log = (self.folder / "log").open("wb")
        self.process = await asyncio.create_subprocess_exec(
            binary("prometheus"),
            f"--config.file={self.folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                return False  # most likely the port was taken meanwhile: another one
            try:
                assert self.session is not None
                async with self.session.get(f"{self.url}/-/ready") as response:
                    if response.status == 200:
                        return True
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)  # polling an external process until it answers
        raise RuntimeError("Prometheus did not get ready in time")

    async def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant query's result vector (each: metric labels and value)."""
        assert self.session is not None
        async with self.session.get(
            f"{self.url}/api/v1/query", params={"query": expression}
        ) as response:
            answer = await response.json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    async def value(self, expression: str) -> float | None:
        """The single value of an instant query, None while it has none."""
        result = await self.query(expression)
        return float(result[0]["value"][1]) if result else None

    async def wait_for(self, expression: str, expected: float) -> float | None:
        """Poll the query until it gives expected (Prometheus scrapes once a second) or the
        safety net runs out; the last value seen."""
        deadline = time.monotonic() + WAIT_S
        seen = await self.value(expression)
        while seen != expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # polling an external process until it has scraped
            seen = await self.value(expression)
        return seen

    async def stop(self) -> None:
        """Stop the server and delete its files."""
        try:
            if self.process is not None and self.process.returncode is None:
                self.process.terminate()
                try:
                    await asyncio.wait_for(self.process.wait(), WAIT_S)
                except TimeoutError:
                    self.process.kill()
                    await self.process.wait()
            if self.session is not None:
                await self.session.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
