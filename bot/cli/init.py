"""`pinbot init`: a short, commented config to start from, and the next steps."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bot.cli.command import Subcommand

STARTER_CONFIG = """\
# pinbot configuration. Every key and its default: config.example.yaml.
# Secrets never go in this file: the *_env keys name environment variables.

storage:
  path: ./pinbot.sqlite3        # the SQLite database (created on first use)

llm:
  backend: offline              # offline: no key needed; openai: any OpenAI-compatible server
  # base_url: https://api.openai.com/v1
  # model: gpt-4o-mini
  # api_key_env: OPENAI_API_KEY

pins:
  enable_in_group: false        # true to let groups pin blocks
  group_shared_admin_ids: []    # who may change a group's shared blocks (/whoami shows ids)

telegram:
  token_env: TELEGRAM_BOT_TOKEN # the variable holding the token from @BotFather

logging:
  level: warning                # quiet; info or debug for more
"""

NEXT_STEPS = """\
Wrote {path}. Next:
  1. Talk to the bot here:  {pinbot} console --config {path} --user 42
  2. For Telegram: export TELEGRAM_BOT_TOKEN=<token from @BotFather>, then
     {pinbot} check-config --config {path} --platform telegram --online
  3. Run it:                {pinbot} telegram --config {path}"""


def invoked_as() -> str:
    """How to run this pinbot again from here, as it was run: `pinbot` when that is what the
    shell finds, else the path that ran (`.venv/bin/pinbot` from a venv not activated)."""
    ran = sys.argv[0]
    if Path(ran).name != "pinbot":  # python -m bot.cli, or a test's main
        return "pinbot"
    found = shutil.which("pinbot")
    if found is not None and Path(found).resolve() == Path(ran).resolve():
        return "pinbot"
    return ran


def write_starter_config(path: str, *, force: bool) -> int:
    """Write the starter config to path (never over an existing file without force) and print
    the next steps; returns the exit status."""
    target = Path(path)
    if target.exists() and not force:
        print(f"pinbot: {target} exists; use --force to overwrite it", file=sys.stderr)
        return 2
    try:
        target.write_text(STARTER_CONFIG, encoding="utf-8")
    except OSError as error:
        print(f"pinbot: cannot write {target}: {error.strerror}", file=sys.stderr)
        return 2
    print(NEXT_STEPS.format(path=target, pinbot=invoked_as()))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def _run(args: argparse.Namespace) -> int:
    return write_starter_config(args.config or "config.yaml", force=args.force)


COMMAND = Subcommand(
    "init",
    "write a short, commented config file to start from",
    "  none",
    "pinbot init --config config.yaml",
    _arguments,
    _run,
)
