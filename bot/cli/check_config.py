"""`pinbot check-config`: the configuration and the environment it needs, problem by problem;
with --online, the servers asked too."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.checks import check_config, retention_lines, warnings_of
from bot.cli.command import Subcommand, load


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--platform",
        action="append",
        choices=["telegram", "feishu"],
        default=[],
        help="also require this platform's secrets",
    )
    parser.add_argument(
        "--online", action="store_true", help="also ask Telegram, Feishu and the model server"
    )


def _run(args: argparse.Namespace) -> int:
    config = load(args.config, serves_metrics=True)
    problems = check_config(config, tuple(args.platform))
    source = args.config or "embedded defaults"
    print("retention in effect (a daily job removes what is older):")
    for line in retention_lines(config):
        print(line)
    for warning in warnings_of(config):
        print(f"warning: {warning}")
    for problem in problems:
        print(f"problem: {problem}")
    failed = 0
    if args.online:
        from bot.cli.online import online_checks, passed

        for name, result in asyncio.run(online_checks(config)):
            print(f"{name}: {result}")
            failed += not passed(result)
    if problems or failed:
        print(f"{len(problems)} problem(s) and {failed} failed check(s) in {source}")
        return 1
    print(f"configuration ok ({source})")
    return 0


COMMAND = Subcommand(
    "check-config",
    "validate the config file and the environment it needs (--online: ask the servers)",
    "  every variable the configured platforms and model need (see their --help)",
    "pinbot check-config --config config.yaml --online",
    _arguments,
    _run,
)
