"""pinbot: an LLM chat bot for Telegram and Feishu whose users pin rules and notes the model
always sees."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Protocol

import storage
from bot.config import Config, ConfigError, StorageConfig, load_config, secret_from_env
from bot.core.bot import Pinbot
from bot.llm import ChatModel, build_model
from bot.logs import REDACTOR, setup_logging
from storage import Store
from storage.errors import SchemaTooNew, Unavailable

UNEXPECTED_DETAIL_CHARS = 300
PRIVATE_FILE_MODE = 0o600


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


_LLM_KEY = (
    "  OPENAI_API_KEY       the model server's key, with llm.backend: openai (llm.api_key_env)"
)
_HELP: dict[str, tuple[str, str, str]] = {
    # name: (what it does, the environment variables it reads, an example)
    "console": (
        "talk to the bot in this terminal, one message per line",
        _LLM_KEY,
        "pinbot console --config config.yaml --user 42 [--group -100123]",
    ),
    "telegram": (
        "run the bot on Telegram (polling, or webhook with telegram.mode: webhook)",
        "  TELEGRAM_BOT_TOKEN   the bot's token from @BotFather (telegram.token_env)\n"
        "  TELEGRAM_WEBHOOK_SECRET  webhook mode only (telegram.webhook_secret_env)\n" + _LLM_KEY,
        "TELEGRAM_BOT_TOKEN=123456:ABC... pinbot telegram --config config.yaml",
    ),
    "feishu": (
        "run the bot on Feishu (Lark): webhook or long connection",
        "  FEISHU_APP_SECRET    the app's secret (feishu.app_secret_env)\n"
        "  FEISHU_VERIFICATION_TOKEN  webhook mode only (feishu.verification_token_env)\n"
        "  the variable named by feishu.encrypt_key_env, if set\n" + _LLM_KEY,
        "FEISHU_APP_SECRET=... FEISHU_VERIFICATION_TOKEN=... pinbot feishu --config config.yaml",
    ),
    "check-config": (
        "validate the config file and the environment it needs (--online: ask the servers)",
        "  every variable the configured platforms and model need (see their --help)",
        "pinbot check-config --config config.yaml --online",
    ),
    "export": (
        "write every block of every scope as JSON",
        "  none",
        "pinbot export --config config.yaml -o blocks.json",
    ),
    "import": (
        "load blocks from a JSON file (all or nothing)",
        "  none",
        "pinbot import blocks.json --config config.yaml --dry-run",
    ),
    "usage": (
        "model token usage per user and per group, with the cache hit ratio",
        "  none",
        "pinbot usage --config config.yaml --days 7 --json",
    ),
    "migrate": (
        "apply pending schema migrations to the configured store and print its version",
        "  the variable named by storage.url_env, when set (a postgresql:// URL)",
        "PINBOT_DATABASE_URL=postgresql://... pinbot migrate --config config.yaml",
    ),
    "transfer": (
        "copy everything (blocks, audit log, usage, history, updates) to an empty store",
        "  the variables named by each config's storage.url_env, when set",
        "pinbot transfer --from-config sqlite.yaml --to-config postgres.yaml",
    ),
    "web": (
        "serve the operator's web page (web.host:web.port): browse, and change shared blocks",
        "  PINBOT_WEB_TOKEN     the sign-in token (web.token_env)\n"
        "  the variable named by storage.url_env, when set",
        "PINBOT_WEB_TOKEN=$(openssl rand -hex 24) pinbot web --config config.yaml",
    ),
    "init": (
        "write a short, commented config file to start from",
        "  none",
        "pinbot init --config config.yaml",
    ),
}


def _subcommand(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str
) -> argparse.ArgumentParser:
    summary, variables, example = _HELP[name]
    return commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"environment variables:\n{variables}\n\nexample:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pinbot",
        description=__doc__,
        epilog="Start with: pinbot init, then pinbot console --config config.yaml --user 42",
    )
    parser.add_argument("--version", action="version", version=f"pinbot {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    console = _subcommand(commands, "console")
    console.add_argument("--user", required=True, help="your sender id")
    console.add_argument("--group", help="speak in this group id instead of a DM")
    console.add_argument("--topic", help="forum topic id inside --group")
    _subcommand(commands, "telegram")
    _subcommand(commands, "feishu")
    check = _subcommand(commands, "check-config")
    check.add_argument(
        "--platform",
        action="append",
        choices=["telegram", "feishu"],
        default=[],
        help="also require this platform's secrets",
    )
    check.add_argument(
        "--online", action="store_true", help="also ask Telegram, Feishu and the model server"
    )
    export = _subcommand(commands, "export")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    load = _subcommand(commands, "import")
    load.add_argument("file", help="the JSON file to import")
    load.add_argument("--dry-run", action="store_true", help="report what would change")
    usage = _subcommand(commands, "usage")
    usage.add_argument(
        "--days", type=_positive, default=30, help="the last N UTC days, today included (30)"
    )
    usage.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _subcommand(commands, "migrate")
    _subcommand(commands, "web")
    transfer = _subcommand(commands, "transfer")
    transfer.add_argument("--from-config", required=True, help="the config of the store to copy")
    transfer.add_argument("--to-config", required=True, help="the config of the empty target")
    init = _subcommand(commands, "init")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    for name, sub in commands.choices.items():
        if name == "transfer":
            continue
        default = "./config.yaml" if name == "init" else "embedded defaults"
        sub.add_argument("--config", help=f"YAML config file (default: {default})")
    return parser


def write_private(path: Path, text: str) -> None:
    """Write text to path, readable by its owner only (exports hold DM blocks)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(descriptor, PRIVATE_FILE_MODE)  # also when the file was there before
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def database_url(config: Config) -> str | None:
    """The PostgreSQL URL when storage.url_env is set (ConfigError when its variable is unset or
    empty: never a silent fallback to SQLite); None for SQLite."""
    variable = config.storage.url_env
    if not variable:
        return None
    url = os.environ.get(variable, "")
    if not url:
        raise ConfigError(
            f"storage.url_env names {variable}, which is not set or empty; set it to a "
            "postgresql:// URL, or remove storage.url_env to use storage.path (SQLite)"
        )
    REDACTOR.add(url)
    password = urllib.parse.urlsplit(url).password
    if password:
        REDACTOR.add(password)
    return url


async def open_store(config: Config) -> Store:
    """The configured store, or ConfigError naming what to fix when it cannot be opened."""
    url = database_url(config)
    try:
        return await storage.open_store(path=config.storage.path, url=url)
    except Unavailable as error:
        if url:
            raise ConfigError(
                f"cannot connect to the PostgreSQL server in ${config.storage.url_env} "
                f"({REDACTOR.redact(str(error))})"
            ) from None
        raise ConfigError(
            f"storage.path: cannot open the database {config.storage.path} ({error}); "
            "choose a path this user can write"
        ) from None
    except SchemaTooNew as error:
        raise ConfigError(str(error)) from None


@contextlib.asynccontextmanager
async def _running_core(config: Config) -> AsyncIterator[Pinbot]:
    model: ChatModel = build_model(config.llm)
    try:
        store = await open_store(config)
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
        starting = asyncio.ensure_future(frontend.start())
        stopping = asyncio.ensure_future(stop.wait())
        # A start that keeps retrying (the server cannot be reached yet) still ends on a signal.
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            return 0
        starting.result()  # a start that failed for good raises here
        try:
            await stopping
        finally:
            await frontend.stop()
    return 0


async def _web(config: Config) -> int:
    """Serve the web page until SIGINT or SIGTERM."""
    from bot.serving import serve_app
    from bot.web.app import WebPage

    token = secret_from_env(config.web.token_env, "The web page's sign-in token")
    stop = _stop_on_signals()
    async with await open_store(config) as store:
        page = WebPage(store, config, token)
        runner, port = await serve_app(
            page.app(), host=config.web.host, port=config.web.port, port_setting="web.port"
        )
        logging.getLogger("pinbot").info(
            "web page started (http://%s:%d/; sign in with $%s)",
            config.web.host,
            port,
            config.web.token_env,
        )
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
    return 0


def _check(config: Config, args: argparse.Namespace) -> int:
    from bot.checks import check_config, warnings_of

    problems = check_config(config, tuple(args.platform))
    source = args.config or "embedded defaults"
    for warning in warnings_of(config):
        print(f"warning: {warning}")
    for problem in problems:
        print(f"problem: {problem}")
    failed = 0
    if args.online:
        from bot.online import online_checks, passed

        for name, result in asyncio.run(online_checks(config)):
            print(f"{name}: {result}")
            failed += not passed(result)
    if problems or failed:
        print(f"{len(problems)} problem(s) and {failed} failed check(s) in {source}")
        return 1
    print(f"configuration ok ({source})")
    return 0


async def _export(config: Config, output: str | None) -> int:
    import json

    from bot.core.clock import utc_now
    from bot.core.transfer import export_document

    async with await open_store(config) as store:
        document = await export_document(store, utc_now())
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if output:
        write_private(Path(output), text)
        print(f"exported to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


async def _import(config: Config, file: str, dry_run: bool) -> int:
    import json

    from bot.core.blocks import BlockOps
    from bot.core.clock import utc_now
    from bot.core.policy import BlockPolicy
    from bot.core.transfer import apply_import, describe_changes, plan_import

    try:
        document = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"pinbot: cannot read {file}: {error}", file=sys.stderr)
        return 1
    except RecursionError:
        print(f"pinbot: cannot read {file}: it is nested too deeply", file=sys.stderr)
        return 1
    plan = plan_import(document, BlockPolicy(config.pins), utc_now())
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
    async with await open_store(
        config.model_copy(update={"storage": StorageConfig(path=path)})
    ) as store:
        changes = await describe_changes(store, plan)
        for line in changes or ["no changes"]:
            print(line)
        if dry_run:
            print("dry run: nothing was written")
            return 0
        written = await apply_import(BlockOps(store, BlockPolicy(config.pins)), plan)
    print(f"imported {written} block(s) in {len(plan.scopes)} scope(s)")
    return 0


async def _migrate(config: Config) -> int:
    async with await open_store(config) as store:
        version = await store.schema_version()
    kind = "PostgreSQL" if config.storage.url_env else f"SQLite {config.storage.path}"
    print(f"{kind}: schema version {version}, up to date")
    return 0


async def _transfer(source_file: str, target_file: str) -> int:
    """Copy one store into another, empty one, whatever their backends."""
    source_config, target_config = load_config(source_file), load_config(target_file)
    setup_logging(source_config.logging)
    for config in (source_config, target_config):
        _register_secrets(config)
    async with await open_store(source_config) as source:
        dump = await source.dump()
    async with await open_store(target_config) as target:
        if not await target.is_empty():
            raise ConfigError(
                f"the store of {target_file} is not empty; transfer only fills an empty store"
            )
        await target.load(dump)
    counts = ", ".join(f"{len(rows)} {table}" for table, rows in dump.items())
    print(f"copied {counts}")
    return 0


async def _usage(config: Config, days: int, *, as_json: bool) -> int:
    import json

    from bot.core.clock import utc_now
    from bot.core.usage import usage_document, usage_table

    async with await open_store(config) as store:
        document = await usage_document(store, days, utc_now())
    if as_json:
        print(json.dumps(document, ensure_ascii=False, indent=2))
    else:
        print(usage_table(document))
    return 0


def _register_secrets(config: Config) -> None:
    feishu = config.feishu
    if config.storage.url_env and os.environ.get(config.storage.url_env):
        database_url(config)  # registers the URL and its password
    for variable in (
        config.llm.api_key_env,
        config.telegram.token_env,
        config.telegram.webhook_secret_env,
        feishu.app_secret_env,
        feishu.verification_token_env,
        feishu.encrypt_key_env,
        config.web.token_env,
    ):
        REDACTOR.add(os.environ.get(variable, ""))


def _run(args: argparse.Namespace) -> int:
    """Load the config, set up logging, and run the subcommand."""
    if args.command == "transfer":
        return asyncio.run(_transfer(args.from_config, args.to_config))
    config = load_config(args.config)
    logging_config = config.logging
    if args.command == "console" and "level" not in logging_config.model_fields_set:
        # The console shares the terminal with the conversation: only problems by default.
        logging_config = logging_config.model_copy(update={"level": "warning"})
    setup_logging(logging_config)
    _register_secrets(config)
    if args.command == "check-config":
        return _check(config, args)
    runs = {
        "export": lambda: _export(config, args.output),
        "import": lambda: _import(config, args.file, args.dry_run),
        "usage": lambda: _usage(config, args.days, as_json=args.json),
        "telegram": lambda: _serve(config, "telegram"),
        "feishu": lambda: _serve(config, "feishu"),
        "console": lambda: _console(config, args),
        "migrate": lambda: _migrate(config),
        "web": lambda: _web(config),
    }
    return asyncio.run(runs[args.command]())


def main(argv: Sequence[str] | None = None) -> int:
    """Run a pinbot subcommand; returns the process exit status."""
    # Whatever a reply or a problem holds, writing it never fails.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "init":
        from bot.init import write_starter_config

        return write_starter_config(args.config or "config.yaml", force=args.force)
    try:
        return _run(args)
    except ConfigError as error:
        print(f"pinbot: {REDACTOR.redact(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a fault, not an input problem: one line unless debugging
        logging.getLogger("pinbot").debug("unexpected failure", exc_info=True)
        message = REDACTOR.redact(str(error))[:UNEXPECTED_DETAIL_CHARS]
        print(
            f"pinbot: unexpected error ({type(error).__name__}: {message}); set "
            "logging.level: debug for the details",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
