"""Logs never carry what is hidden: `pinbot console` at debug level, in text and in JSON, logs
each message and reply, and a sensitive block's address and password (and a `||marked||` part)
are masked in every line, whatever the call site logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.logs import RedactSecrets
from tests.integration.test_console import console

# the pinbot of this checkout, whichever one the virtual environment was installed from
ROOT = str(Path(__file__).resolve().parents[2])
ADDRESS, PASSWORD, MARKED = "10.11.12.13", "hunter2x", "doorcode-4471"


def write_config(tmp_path: Path, **logging_section: str) -> Path:
    path = tmp_path / "config.yaml"
    sections = {
        "storage": {"path": str(tmp_path / "pins.sqlite3")},
        "logging": {"level": "debug", **logging_section},
    }
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_sensitive_block_is_masked_in_debug_logs(tmp_path: Path, log_format: str) -> None:
    config = write_config(tmp_path, format=log_format)
    code, out, err = await console(
        config,
        [
            f"/pin add ops --sensitive jump host {ADDRESS} password: {PASSWORD}",
            f"/pin edit ops jump host {ADDRESS} password: {PASSWORD} door ||{MARKED}||",
            "/sticky raw ops",
        ],
        "--user",
        "1",
        env={"PYTHONPATH": ROOT},
    )
    assert code == 0, err
    # the owner sees the block whole in the console's replies; the log, never
    assert ADDRESS in out and PASSWORD in out
    lines = err.strip().splitlines()
    messages = [line for line in lines if "message session=" in line]
    assert len(messages) == 3, err
    if log_format == "json":
        events = [json.loads(line) for line in lines]
        messages = [e["event"] for e in events if e["event"].startswith("message session=")]
        assert len(messages) == 3
    assert all("[ip]" in line for line in messages)
    for hidden in (ADDRESS, PASSWORD, MARKED):
        assert hidden not in err


@pytest.fixture
def handler_log() -> Iterator[list[str]]:
    """Lines written by a handler with the redactor on it (as setup_logging installs it)."""
    written: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(self.format(record))

    handler = Keep()
    handler.addFilter(RedactSecrets(()))
    logger = logging.getLogger("pinbot.test.masking")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield written
    logger.removeHandler(handler)


def test_arguments_messages_and_tracebacks_are_masked(handler_log: list[str]) -> None:
    log = logging.getLogger("pinbot.test.masking")
    # a secret split by a line break: %r would show it as "\n", so arguments are masked first
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    log.debug("text=%r", key)
    log.debug("mapping %(text)s", {"text": f"password: {PASSWORD}"})
    log.info(f"an f-string with {ADDRESS}")
    try:
        raise RuntimeError(f"cannot reach {ADDRESS} with password: {PASSWORD}")
    except RuntimeError:
        log.exception("failed")
    written = "\n".join(handler_log)
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in written
    for hidden in (ADDRESS, PASSWORD):
        assert hidden not in written
    assert "Traceback" in written


def test_records_below_the_level_are_not_masked(handler_log: list[str]) -> None:
    """The redactor sits on the handler: a record the logger drops never reaches it."""
    log = logging.getLogger("pinbot.test.masking")
    log.setLevel(logging.INFO)
    calls: list[str] = []
    (redactor,) = [h.filters[0] for h in log.handlers if h.filters]
    assert isinstance(redactor, RedactSecrets)
    original = redactor.mask

    def counted(text: str) -> str:
        calls.append(text)
        return original(text)

    redactor.mask = counted  # type: ignore[method-assign]
    log.debug("dropped %s", PASSWORD)
    assert calls == [] and handler_log == []
    log.info("kept %s", ADDRESS)
    assert calls and handler_log == ["kept [ip]"]
