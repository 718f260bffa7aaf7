"""Crash safety: the console bot is killed with SIGKILL at random moments while it applies /pin
commands; after each restart every acknowledged command is there, none is half-applied, and
SQLite's integrity check passes. SIGTERM stops the Telegram bot gracefully."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import yaml

from storage import Store
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user

PINBOT = str(Path(sys.executable).parent / "pinbot")
ROUNDS = 6
BURST = 40


def content(label: str, version: int) -> str:
    return f"{label} version {version} " + "·" * 200 + " end"


async def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "crash.sqlite3"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"path": str(db)},
                "pins": {"max_blocks_per_session": 1000},
                "limits": {"pin_commands_per_minute": 0},
            }
        )
    )
    rng = random.Random(2026)
    acknowledged: dict[str, int] = {}  # label → the version whose save was acknowledged
    removed: set[str] = set()
    for round_number in range(ROUNDS):
        process = await asyncio.create_subprocess_exec(
            PINBOT,
            "console",
            "--config",
            str(config),
            "--user",
            "1",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert process.stdin is not None and process.stdout is not None
        commands: list[tuple[str, str, int]] = []
        for i in range(BURST):
            label = f"r{round_number}b{i}"
            commands.append(("add", label, 1))
            if i % 5 == 4:
                commands.append(("edit", label, 2))
            if i % 9 == 8:
                commands.append(("remove", f"r{round_number}b{i - 8}", 0))
        lines = [
            f"/pin {verb} {label}" + (f" {content(label, v)}" if verb != "remove" else "")
            for verb, label, v in commands
        ]
        process.stdin.write("".join(f"{line}\n" for line in lines).encode())
        await process.stdin.drain()
        stop_after = rng.randrange(1, len(commands))
        for verb, label, version in commands[:stop_after]:
            reply = (await process.stdout.readline()).decode()
            assert reply.startswith(("Saved", "Removed")), reply
            if verb == "remove":
                removed.add(label)
                acknowledged.pop(label, None)
            else:
                acknowledged[label] = version
        process.send_signal(signal.SIGKILL)
        await process.wait()
        async with await Store.open(db) as store:
            assert await store.integrity_ok()
            stored = {b.label: b.content for b in await store.blocks(["console:direct:1"])}
        # The console may have run commands whose replies were not read before the kill: an
        # acknowledged block may be gone because such a remove ran.
        unread_removes = {label for verb, label, _ in commands[stop_after:] if verb == "remove"}
        for label in unread_removes - set(stored):
            acknowledged.pop(label, None)
            removed.add(label)
        for label, version in acknowledged.items():
            assert label in stored, f"acknowledged {label} lost after round {round_number}"
            assert stored[label] in (content(label, version), content(label, 2)), label
        for label, text in stored.items():
            assert text in (content(label, 1), content(label, 2)), "half-applied change"
        assert not removed & set(stored), "an acknowledged remove came back"


async def test_sigterm_stops_the_telegram_bot_gracefully(tmp_path: Path) -> None:
    server = await FakeTelegram().start()
    db = tmp_path / "tg.sqlite3"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"path": str(db)},
                "telegram": {"base_url": server.base_url, "poll_timeout_s": 1},
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        "telegram",
        "--config",
        str(config),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN},
    )
    try:
        await server.wait_for(lambda: bool(server.called("setMyCommands")), timeout=20)
        server.push(message(private_chat(5), "/pin add kept before stop", user(5)))
        await server.wait_for(lambda: bool(server.sent(5)), timeout=20)
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 20)
    finally:
        if process.returncode is None:
            process.kill()
        await server.stop()
    assert process.returncode == 0, err.decode()
    assert TOKEN not in err.decode()
    async with await Store.open(db) as store:
        assert [b.label for b in await store.blocks(["telegram:direct:5"])] == ["kept"]
        assert await store.integrity_ok()
