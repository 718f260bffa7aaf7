"""`pinbot init`: a short, commented config to start from, and the next steps; `--preset sticky`
writes the Sticky Context preset of docs/designs.md instead."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bot.cli.command import Subcommand

_SECRETS = "# Secrets never go in this file: the *_env keys name environment variables.\n"
_HEADER = "# pinbot configuration. Every key and its default: config.example.yaml.\n" + _SECRETS

_STORAGE = """
storage:
  path: ./pinbot.sqlite3        # the SQLite database (created on first use)
"""

_LLM = """
llm:
  backend: offline              # offline: no key needed; openai: any OpenAI-compatible server
  # base_url: https://api.openai.com/v1
  # model: gpt-4o-mini
  # api_key_env: OPENAI_API_KEY
"""

_PINS = """
pins:
  enable_in_group: false        # true to let groups pin blocks
  group_shared_admin_ids: []    # who may change a group's shared blocks (/whoami shows ids)
"""

_REST = """
telegram:
  token_env: TELEGRAM_BOT_TOKEN # the variable holding the token from @BotFather

logging:
  level: warning                # quiet; info or debug for more
"""

STARTER_CONFIG = _HEADER + _STORAGE + _LLM + _PINS + _REST

# The Sticky Context preset (docs/designs.md#a-sticky-context-preset): the plugin's defaults.
_STICKY_HEADER = (
    """\
# pinbot configuration: the Sticky Context preset, the plugin's defaults with each key's
# Sticky Context name beside it (docs/designs.md#a-sticky-context-preset).
# Every key and its default: config.example.yaml.
"""
    + _SECRETS
)

_STICKY_LLM = """
llm:
  # The model keeps its slots with the sticky_* tools, and tools need a model that calls them:
  # the offline backend answers without any. Point it at an OpenAI-compatible server (OpenAI,
  # vLLM, Ollama, llama.cpp started with --jinja): set backend: openai and uncomment base_url,
  # model and api_key_env (a server without keys takes any value in that variable).
  backend: offline
  # base_url: http://127.0.0.1:8080/v1
  # model: gpt-4o-mini
  # api_key_env: OPENAI_API_KEY
  agent_tools: true             # tools.allow; pinbot's default false
  tool_names: sticky            # sticky_set, sticky_get, sticky_delete; pinbot's default pin
"""

_STICKY_PINS = """
pins:
  max_total_chars: 2000         # maxTotalChars, per scope; pinbot's default 0 is no budget
  max_blocks_per_session: 10    # maxSlots; pinbot's default 20
  max_label_length: 64          # keys [a-z0-9-_]{1,64}; pinbot's default 20
  max_content_length: 2000      # no per-slot limit but the budget; pinbot's default 500
  header_label: "STICKY CONTEXT (survives compaction)"  # headerLabel; pinbot's "pinned rules"
  enable_in_group: false        # true to let groups pin blocks
  group_shared_admin_ids: []    # who may change a group's shared blocks (/whoami shows ids)
"""

PRESETS = {
    "sticky": _STICKY_HEADER + _STORAGE + _STICKY_LLM + _STICKY_PINS + _REST,
}

NEXT_STEPS = """\
Wrote {path}. Next:
  1. Talk to the bot here:  {pinbot} console --config {path} --user 42
  2. For Telegram: export TELEGRAM_BOT_TOKEN=<token from @BotFather>, then
     {pinbot} check-config --config {path} --platform telegram --online
  3. Run it:                {pinbot} telegram --config {path}"""

STICKY_STEP = """
The model uses the sticky_* tools once llm points at an OpenAI-compatible server (see the
comment in llm); offline, it answers without them. Import a Sticky Context file with:
  {pinbot} import sticky-context.json --config {path} --scope console:direct:42"""


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


def write_starter_config(path: str, *, force: bool, preset: str | None = None) -> int:
    """Write the starter config (or preset's) to path (never over an existing file without
    force) and print the next steps; returns the exit status."""
    target = Path(path)
    if target.exists() and not force:
        print(f"pinbot: {target} exists; use --force to overwrite it", file=sys.stderr)
        return 2
    try:
        target.write_text(PRESETS[preset] if preset else STARTER_CONFIG, encoding="utf-8")
    except OSError as error:
        print(f"pinbot: cannot write {target}: {error.strerror}", file=sys.stderr)
        return 2
    steps = NEXT_STEPS + (STICKY_STEP if preset == "sticky" else "")
    print(steps.format(path=target, pinbot=invoked_as()))
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="sticky: the Sticky Context plugin's defaults (agent tools under the sticky_* "
        "names, a 2,000-character budget, 10 slots, its header, keys up to 64 characters)",
    )


def _run(args: argparse.Namespace) -> int:
    return write_starter_config(args.config or "config.yaml", force=args.force, preset=args.preset)


COMMAND = Subcommand(
    "init",
    "write a short, commented config file to start from (--preset sticky: Sticky Context's)",
    "  none",
    "pinbot init --config config.yaml",
    _arguments,
    _run,
)
