"""The one way every subcommand gets its store: from the configuration, on the configured
backend, with what can go wrong said in one line that names what to fix."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from bot.config import Config, ConfigError
from bot.logs import REDACTOR
from storage import Store
from storage.dialect import url_problem
from storage.errors import SchemaTooNew, Unavailable

PRIVATE_FILE_MODE = 0o600


def database_url(config: Config) -> str | None:
    """The PostgreSQL URL when storage.url_env is set, None for SQLite. ConfigError naming the
    variable when it is unset or empty (never a silent fallback to SQLite) or holds no URL
    pinbot can read; no message shows the URL's user name or password."""
    variable = config.storage.url_env
    if not variable:
        return None
    url = os.environ.get(variable, "")
    if not url:
        raise ConfigError(
            f"storage.url_env names {variable}, which is not set or empty; set it to a "
            "postgresql:// URL, or remove storage.url_env to use storage.path (SQLite)"
        )
    hide_credentials(url)
    if problem := url_problem(url):
        raise ConfigError(f"${variable}: {problem}")
    return url


def hide_credentials(url: str) -> None:
    """Make the whole URL and everything between its :// and its last @ (user and password,
    however written) unprintable."""
    REDACTOR.add(url)
    rest = url.partition("://")[2]
    if "@" in rest:
        credentials = rest.rpartition("@")[0]
        REDACTOR.add(credentials)
        REDACTOR.add(credentials.partition(":")[2])
        REDACTOR.add(urllib.parse.unquote(credentials.partition(":")[2]))


async def open_store(config: Config, *, create: bool = True) -> Store:
    """The configured store, migrated; ConfigError naming what to fix when it cannot be opened.
    Without create, a SQLite file that does not exist yet is not made: an empty store in
    memory stands for it."""
    url = database_url(config)
    path = config.storage.path
    if not url and not create and not Path(path).exists():
        path = ":memory:"
    try:
        return await Store.open(path, url=url)
    except Unavailable as error:
        if url:
            raise ConfigError(
                f"cannot connect to the PostgreSQL server in ${config.storage.url_env} "
                f"({REDACTOR.redact(str(error))}){unreachable_hint(config)}"
            ) from None
        raise ConfigError(
            f"storage.path: cannot open the database {config.storage.path} ({error}); "
            "choose a path this user can write"
        ) from None
    except SchemaTooNew as error:
        raise ConfigError(str(error)) from None


def unreachable_hint(config: Config) -> str:
    """The next step when the configured PostgreSQL server cannot be reached ('' for SQLite)."""
    variable = config.storage.url_env
    if not variable:
        return ""
    return (
        f". Next: check that PostgreSQL runs and listens at the host and port in ${variable} "
        "(pg_isready -h HOST -p PORT says), that this machine may connect (pg_hba.conf, a "
        f"firewall), and the user, password and database name; or remove storage.url_env to "
        "use SQLite (storage.path)"
    )


def database_in_use(config: Config) -> str:
    """The database the bot uses, as it says at start: the SQLite file (absolute) or the
    PostgreSQL server's variable (never its URL)."""
    if config.storage.url_env:
        return f"PostgreSQL (${config.storage.url_env})"
    path = config.storage.path
    return "SQLite in memory" if path == ":memory:" else f"SQLite {Path(path).resolve()}"


def register_secrets(config: Config) -> None:
    """Make every secret the configuration names unprintable: logs and errors redact them."""
    feishu = config.feishu
    if config.storage.url_env and os.environ.get(config.storage.url_env):
        hide_credentials(os.environ[config.storage.url_env])
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


def write_private(path: Path, text: str) -> None:
    """Write text to path, readable by its owner only (exports hold DM blocks)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(descriptor, PRIVATE_FILE_MODE)  # also when the file was there before
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
