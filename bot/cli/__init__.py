"""pinbot: an LLM chat bot for Telegram and Feishu whose users pin rules and notes the model
always sees."""

from __future__ import annotations

import argparse
import io
import logging
import sys
from collections.abc import Sequence

from bot import package_version
from bot.cli import (
    check_config,
    console,
    export,
    feishu,
    forget,
    importing,
    init,
    migrate,
    telegram,
    transfer,
    usage,
    web,
)
from bot.cli.command import Subcommand
from bot.config import ConfigError
from bot.logs import REDACTOR

UNEXPECTED_DETAIL_CHARS = 300
SUBCOMMANDS: list[Subcommand] = [
    module.COMMAND
    for module in (
        console,
        telegram,
        feishu,
        check_config,
        export,
        forget,
        importing,
        usage,
        migrate,
        web,
        transfer,
        init,
    )
]


def parser() -> argparse.ArgumentParser:
    """The command line of every subcommand, with its help, environment and an example."""
    top = argparse.ArgumentParser(
        prog="pinbot",
        description=__doc__,
        epilog="Start with: pinbot init, then pinbot console --config config.yaml --user 42",
    )
    top.add_argument("--version", action="version", version=f"pinbot {package_version()}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    for command in SUBCOMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.summary,
            description=command.summary,
            epilog=f"environment variables:\n{command.variables}\n\nexample:\n  {command.example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.arguments(sub)
        if command.config:
            default = "./config.yaml" if command.name == "init" else "embedded defaults"
            sub.add_argument("--config", help=f"YAML config file (default: {default})")
        sub.set_defaults(run=command.run)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run a pinbot subcommand; returns the process exit status."""
    # Whatever a reply or a problem holds, writing it never fails.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    command_line = parser()
    args = command_line.parse_args(argv)
    if args.command is None:
        command_line.print_help()
        return 0
    try:
        status: int = args.run(args)
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
    return status
