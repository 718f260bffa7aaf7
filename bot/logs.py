"""Logging set-up: one line per event, plain or JSON, and secrets never written: whatever the
recogniser hides (`bot.secrets.redact`) is masked on the handler, for every line written."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime

from bot import secrets
from bot.config import LoggingConfig

REDACTED = "[redacted]"


class RedactSecrets(logging.Filter):
    """Masks, in each record a handler is about to write, every known secret (the bot token,
    the storage password: `add`) with [redacted], and everything the one recogniser hides
    (`bot.secrets.redact`: detected secrets, `||marked||` parts, addresses) with its
    placeholder: in the arguments, the final message and the exception text. Installed on the
    handler, not a logger, so only records that are written pay for it."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = [secret for secret in secrets if secret]
        self._busy = threading.local()

    def add(self, secret: str) -> None:
        """Start hiding one more secret."""
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def redact(self, text: str) -> str:
        """text with every known secret replaced by [redacted]."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def mask(self, text: str) -> str:
        """text with every known secret and everything the recogniser hides masked."""
        text = self.redact(text)
        if getattr(self._busy, "on", False):
            # The recogniser itself logged (building its rules): known secrets only, no loop.
            return text
        self._busy.on = True
        try:
            return secrets.redact(text, keep_local=True)
        finally:
            self._busy.on = False

    def _masked_args(self, args: object) -> object:
        """A record's arguments with each string masked before it is formatted (%r would
        escape a secret's line breaks or invisible characters and hide it from the recogniser)."""
        if isinstance(args, tuple):
            return tuple(self.mask(a) if isinstance(a, str) else a for a in args)
        if isinstance(args, Mapping):
            return {k: self.mask(v) if isinstance(v, str) else v for k, v in args.items()}
        return args

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.args = self._masked_args(record.args)  # type: ignore[assignment]
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = self.mask(message), None
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


# The fixed fields a line may carry besides its event (a handled message's, see handled_fields).
FIELDS = ("platform", "kind", "outcome", "duration_ms")


def handled_fields(platform: str, kind: str, outcome: str, seconds: float) -> dict[str, object]:
    """The fixed fields of a handled message's line (logging's `extra`): its platform, kind
    (command, turn), outcome (done, refused, failed) and how long it took."""
    return {
        "platform": platform,
        "kind": kind,
        "outcome": str(outcome),
        "duration_ms": round(seconds * 1000, 1),
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event (the line as the text log has it,
    secrets redacted), the fixed fields the record carries (FIELDS), and the exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            # ISO 8601 with the offset, to the millisecond: what log tools parse as it is.
            "time": datetime.fromtimestamp(record.created)
            .astimezone()
            .isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for name in FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


class WithoutTracebacks(logging.Filter):
    """Keeps a record's message and drops its traceback (outside debug level): the line says what
    failed, and whoever needs the traceback sets logging.level: debug."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg, record.args = (
                f"{record.getMessage()} ({type(error).__name__}: {error})",
                None,
            )
        record.exc_info, record.exc_text = None, None
        return True


REDACTOR = RedactSecrets(())


def setup_logging(config: LoggingConfig) -> None:
    """Send logs to stderr at the configured level and format, through the secret redactor."""
    handler = logging.StreamHandler(sys.stderr)
    if config.level != "debug":
        handler.addFilter(WithoutTracebacks())
    handler.addFilter(REDACTOR)
    if config.as_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level.upper())
    # HTTP libraries log request URLs at INFO, and Telegram's carry the bot token.
    for noisy in (
        "httpx",
        "httpx2",
        "httpcore",
        "openai",
        "telegram",
        "apscheduler",
        "Lark",
        "aiosqlite",
        "aiohttp.access",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # python-telegram-bot logs each failed request and then raises it to us; we log what it means.
    if config.level != "debug":
        logging.getLogger("telegram.request").setLevel(logging.CRITICAL)
