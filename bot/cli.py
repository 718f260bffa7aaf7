"""`pinbot`: the command line entry point."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Protocol

from bot.config import Config, ConfigError, load_config
from bot.core.bot import Pinbot
from bot.llm import ChatModel, build_model
from bot.logs import REDACTOR, setup_logging
from storage.sqlite import Store


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pinbot")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinbot", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pinbot {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    console = commands.add_parser("console", help="talk to the bot in this terminal")
    console.add_argument("--user", required=True, help="your sender id")
    console.add_argument("--group", help="speak in this group id instead of a DM")
    console.add_argument("--topic", help="forum topic id inside --group")
    commands.add_parser("telegram", help="run the bot on Telegram")
    commands.add_parser("feishu", help="run the bot on Feishu (Lark)")
    check = commands.add_parser(
        "check-config", help="validate the config file and the environment it needs"
    )
    check.add_argument(
        "--platform",
        action="append",
        choices=["telegram", "feishu"],
        default=[],
        help="also require this platform's secrets",
    )
    export = commands.add_parser("export", help="write every block of every scope as JSON")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    load = commands.add_parser("import", help="load blocks from an export (all or nothing)")
    load.add_argument("file", help="the JSON file to import")
    load.add_argument("--dry-run", action="store_true", help="report what would change")
    usage = commands.add_parser(
        "usage", help="model token usage per user and per group, with the cache hit ratio"
    )
    usage.add_argument(
        "--days", type=_positive, default=30, help="the last N UTC days, today included (30)"
    )
    usage.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for sub in commands.choices.values():
        sub.add_argument("--config", help="YAML config file (default: embedded defaults)")
    return parser


@contextlib.asynccontextmanager
async def _running_core(config: Config) -> AsyncIterator[Pinbot]:
    model: ChatModel = build_model(config.llm)
    try:
        store = await Store.open(config.storage.path)
        try:
            yield Pinbot(config, store, model)
        finally:
            await store.close()
    finally:
        await model.close()


async def _console(config: Config, args: argparse.Namespace) -> int:
    from bot.adapters.console import console_conversation, run_console

    if args.topic and not args.group:
        raise ConfigError("--topic needs --group: topics exist only inside groups")
    for flag, value in (("--user", args.user), ("--group", args.group), ("--topic", args.topic)):
        if value is not None and (not value or ":" in value or any(c.isspace() for c in value)):
            raise ConfigError(f"{flag} {value!r}: ids cannot be empty or contain ':' or spaces")
    async with _running_core(config) as pinbot:
        await run_console(pinbot, console_conversation(args.user, args.group, args.topic))
    return 0


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, for a graceful shutdown."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


class _Frontend(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def _serve(config: Config, platform: str) -> int:
    """Run a platform frontend until SIGINT or SIGTERM, then stop it gracefully."""
    stop = _stop_on_signals()
    async with _running_core(config) as pinbot:
        frontend: _Frontend
        if platform == "telegram":
            from bot.adapters.telegram import TelegramFrontend

            frontend = TelegramFrontend.from_config(pinbot, config.telegram)
        else:
            from bot.adapters.feishu import FeishuFrontend

            frontend = FeishuFrontend.from_config(pinbot, config.feishu)
        await frontend.start()
        try:
            await stop.wait()
        finally:
            await frontend.stop()
    return 0


def _check(config: Config, args: argparse.Namespace) -> int:
    from bot.checks import check_config

    problems = check_config(config, tuple(args.platform))
    source = args.config or "embedded defaults"
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print(f"{len(problems)} problem(s) in {source}")
        return 1
    print(f"configuration ok ({source})")
    return 0


async def _export(config: Config, output: str | None) -> int:
    import json

    from bot.core.clock import utc_now
    from bot.core.transfer import export_document

    async with await Store.open(config.storage.path) as store:
        document = await export_document(store, utc_now())
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if output:
        Path(output).write_text(text, encoding="utf-8")
        print(f"exported to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


async def _import(config: Config, file: str, dry_run: bool) -> int:
    import json

    from bot.core.clock import utc_now
    from bot.core.transfer import apply_import, describe_changes, plan_import

    try:
        document = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"pinbot: cannot read {file}: {error}", file=sys.stderr)
        return 1
    plan = plan_import(document, config.pins, utc_now())
    if plan.problems:
        for problem in plan.problems:
            print(f"problem: {problem}")
        print(f"{len(plan.problems)} problem(s); nothing was imported")
        return 1
    # A dry run against a database that does not exist yet compares with an empty one, so it
    # creates nothing.
    path = config.storage.path
    if dry_run and not Path(path).exists():
        path = ":memory:"
    async with await Store.open(path) as store:
        changes = await describe_changes(store, plan)
        for line in changes or ["no changes"]:
            print(line)
        if dry_run:
            print("dry run: nothing was written")
            return 0
        written = await apply_import(store, plan, utc_now())
    print(f"imported {written} block(s) in {len(plan.scopes)} scope(s)")
    return 0


async def _usage(config: Config, days: int, *, as_json: bool) -> int:
    import json

    from bot.core.clock import utc_now
    from bot.core.usage import usage_document, usage_table

    async with await Store.open(config.storage.path) as store:
        document = await usage_document(store, days, utc_now())
    if as_json:
        print(json.dumps(document, ensure_ascii=False, indent=2))
    else:
        print(usage_table(document))
    return 0


def _register_secrets(config: Config) -> None:
    import os

    feishu = config.feishu
    for variable in (
        config.llm.api_key_env,
        config.telegram.token_env,
        config.telegram.webhook_secret_env,
        feishu.app_secret_env,
        feishu.verification_token_env,
        feishu.encrypt_key_env,
    ):
        REDACTOR.add(os.environ.get(variable, ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a pinbot subcommand; returns the process exit status."""
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        logging_config = config.logging
        if args.command == "console" and "level" not in logging_config.model_fields_set:
            # The console shares the terminal with the conversation: only problems by default.
            logging_config = logging_config.model_copy(update={"level": "warning"})
        setup_logging(logging_config)
        _register_secrets(config)
        if args.command == "check-config":
            return _check(config, args)
        if args.command == "export":
            return asyncio.run(_export(config, args.output))
        if args.command == "import":
            return asyncio.run(_import(config, args.file, args.dry_run))
        if args.command == "usage":
            return asyncio.run(_usage(config, args.days, as_json=args.json))
        if args.command in ("telegram", "feishu"):
            return asyncio.run(_serve(config, args.command))
        return asyncio.run(_console(config, args))
    except ConfigError as error:
        print(f"pinbot: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
