"""What a subcommand is: its name, help, environment, example, arguments and run, and the
loading of its configuration (logging set up and secrets made unprintable first)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bot.cli.store import register_secrets
from bot.config import Config, load_config
from bot.logs import setup_logging

LLM_KEY = (
    "  OPENAI_API_KEY       the model server's key, with llm.backend: openai (llm.api_key_env)"
)
URL_ENV = "  the variable named by storage.url_env, when set (a postgresql:// URL)"


@dataclass(frozen=True)
class Subcommand:
    """One `pinbot` subcommand. run gets the parsed arguments and returns the exit status;
    with config, the subcommand takes --config."""

    name: str
    summary: str
    variables: str
    example: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    config: bool = True


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A subcommand with no arguments of its own."""


def load(file: str | None, *, quiet: bool = False, serves_metrics: bool = False) -> Config:
    """The configuration in file (the embedded defaults without one), with logging set up and
    its secrets registered for redaction; quiet: only problems are logged unless the file
    sets logging.level. A command that serves no metrics says so when metrics.listen is set
    (serves_metrics: it does, or it only checks the file)."""
    config = load_config(file)
    logging_config = config.logging
    if quiet and "level" not in logging_config.model_fields_set:
        logging_config = logging_config.model_copy(update={"level": "warning"})
    setup_logging(logging_config)
    register_secrets(config)
    if config.metrics.address is not None and not serves_metrics:
        logging.getLogger("pinbot").warning(
            "metrics.listen is set, but this command serves no metrics: only pinbot telegram, "
            "pinbot feishu and pinbot web listen there"
        )
    return config


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)
