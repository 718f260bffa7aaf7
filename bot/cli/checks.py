"""`pinbot check-config`: the configuration and the environment it needs, problem by problem."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bot.config import Config, telegram_token_problem
from bot.core.people import (
    ANYONE,
    AllowEntry,
    ScopeKind,
    group_key_of,
    parse_scope,
    strip_agent_prefix,
    topic_of,
)
from storage.dialect import sqlite_write_problem, url_problem


def _secret(variable: str, key: str, needed_for: str) -> list[str]:
    if not variable:
        return [f"{key}: empty; name the environment variable that holds the secret"]
    if not os.environ.get(variable):
        return [f"{key}: the environment variable {variable} is not set ({needed_for})"]
    return []


def _store(config: Config) -> list[str]:
    """The configured store: PostgreSQL's variable set and its URL readable, or a SQLite file
    this user can create or write."""
    variable = config.storage.url_env
    if not variable:
        return _database(config.storage.path)
    url = os.environ.get(variable, "")
    if not url:
        return [f"storage.url_env: the environment variable {variable} is not set"]
    problem = url_problem(url)
    return [f"storage.url_env: ${variable}: {problem}"] if problem else []


def _database(path: str) -> list[str]:
    """Proved, not guessed from permission bits (root passes those even on /proc): the file
    opened and a write transaction begun, or a file made and removed where it would go."""
    if path == ":memory:":
        return []
    file = Path(path)
    folder = file.parent if str(file.parent) else Path(".")
    if file.is_dir():
        return [f"storage.path: {file} is a directory; name the database file inside it"]
    if file.exists():
        if problem := sqlite_write_problem(file):
            return [f"storage.path: {file} cannot be written by this user ({problem})"]
        return []
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"storage.path: cannot create {file}: {existing} is a file, not a folder"]
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".pinbot-check-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        return [f"storage.path: cannot create {file}: {existing} takes no new files ({reason})"]
    return []


def _allowlists(config: Config) -> list[str]:
    problems = []
    pins = config.pins
    for key in ("group_shared_admin_ids", "group_strong_user_ids"):
        for entry in getattr(pins, key):
            if AllowEntry.parse(entry) is None:
                problems.append(
                    f"pins.{key}: '{entry}' is neither a sender id nor "
                    "'<group session key>::u:<sender id>' "
                    "(e.g. telegram:group:-100123::u:42)"
                )
    for entry in pins.group_whitelist:
        if not _group_entry_ok(entry, topics=False):
            problems.append(
                f"pins.group_whitelist: '{entry}' is neither a group id nor a group "
                "session key (e.g. telegram:group:-100123)"
            )
    return problems + _access_entries(config)


def _bare_id_ok(text: str) -> bool:
    return bool(text) and ":" not in text and not any(c.isspace() for c in text)


def _group_entry_ok(entry: str, *, topics: bool) -> bool:
    """A group id, a group session key, or (where topics count) a topic's session key."""
    bare = strip_agent_prefix(entry)
    if ":" not in bare:
        return _bare_id_ok(bare)
    if any(c.isspace() for c in bare):
        return False
    if group_key_of(bare) == bare:
        return True
    topic = topic_of(bare)
    return topics and topic is not None and _bare_id_ok(topic)


def _user_entry_ok(entry: str) -> bool:
    """A sender id, or `<platform>:direct:<id>`."""
    parsed = parse_scope(entry)
    return _bare_id_ok(entry) or (parsed is not None and parsed.kind is ScopeKind.DIRECT)


def _access_entries(config: Config) -> list[str]:
    access = config.access
    problems = [
        f"access.allowed_users: '{entry}' is neither a sender id nor a DM key "
        "(e.g. 42 or telegram:direct:42)"
        for entry in access.allowed_users
        if entry != ANYONE and not _user_entry_ok(entry)
    ]
    problems += [
        f"access.allowed_groups: '{entry}' is neither a group id, a group session key nor a "
        "topic key (e.g. -100123, telegram:group:-100123, telegram:group:-100123:topic:7)"
        for entry in access.allowed_groups
        if entry != ANYONE and not _group_entry_ok(entry, topics=True)
    ]
    return problems


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


# Each kind of data retention keeps: what it is, and its key in retention: (and in pins:, its
# older spelling, where there is one).
_RETAINED = (
    ("conversation history", "conversation", "conversation_days", None),
    ("block versions", "versions", "versions_days", "history_days"),
    ("usage", "usage", "usage_days", None),
    ("audit trail of shared blocks", "audit", "audit_days", "audit_retention_days"),
    ("processed updates (inbox)", "inbox", "inbox_days", None),
    ("a removed group's data", "removed_group", "removed_group_days", None),
)


def retention_lines(config: Config) -> list[str]:
    """The retention in effect, one line per kind of data: its days, and the key they come from
    (marked "default" where none is given)."""
    kept = config.retention_in_effect
    lines = []
    for what, field, key, older in _RETAINED:
        if older is None or getattr(config.retention, key) is not None:
            source, given = f"retention.{key}", key in config.retention.model_fields_set
        else:
            source, given = f"pins.{older}", older in config.pins.model_fields_set
        after = " after the bot was removed" if field == "removed_group" else ""
        default = "" if given else " (default)"
        lines.append(f"  {what:<30} {getattr(kept, field):>5} days{after}: {source}{default}")
    return lines


def warnings_of(config: Config) -> list[str]:
    """Settings that work but probably do not mean what the operator wants."""
    access = config.access
    found = [
        f"pins.{older} ({days}) is replaced by retention.{key} "
        f"({getattr(config.retention, key)}): remove one of the two"
        for _, _, key, older in _RETAINED
        if older is not None and (days := config.replaced_pins_keys.get(older)) is not None
    ]
    if (
        access.allowed_users
        and ANYONE not in access.allowed_users
        and (ANYONE in access.allowed_groups)
    ):
        found.append(
            "access.allowed_users is set, but access.allowed_groups lists '*': anyone can add "
            "the bot to a group and use it there"
        )
    web = config.web
    if web.host not in LOOPBACK_HOSTS and not web.secure_cookie:
        found.append(
            f"web.host is {web.host}, reachable from other machines, and web.secure_cookie is "
            "false: serve the page behind TLS and set web.secure_cookie: true"
        )
    if config.budgets.in_money and config.llm.model not in config.pricing.models:
        found.append(
            f"a budget is set in money but llm.model ({config.llm.model}) has no price in "
            "pricing.models: its calls cost nothing against it; add the model's prices"
        )
    unpriced = [
        f"{name} ({entry.model})"
        for name, entry in config.llm.models.items()
        if entry.model not in config.pricing.models
    ]
    if config.budgets.in_money and unpriced:
        found.append(
            "a budget is set in money but these llm.models have no price in pricing.models: "
            f"{', '.join(unpriced)}; the calls of groups that pick them cost nothing against it"
        )
    return found


def check_config(config: Config, platforms: tuple[str, ...] = ()) -> list[str]:
    """Every problem found, each naming its config key; empty when all is well.

    Secrets of a platform are required when it is named in platforms or configured."""
    problems = _store(config) + _allowlists(config)
    if config.llm.backend == "openai":
        problems += _secret(config.llm.api_key_env, "llm.api_key_env", "llm.backend is openai")
    for name, entry in config.llm.models.items():  # each entry's client is made at startup
        problems += _secret(
            entry.api_key_env, f"llm.models.{name}.api_key_env", "a group may pick this model"
        )
    telegram = config.telegram
    if "telegram" in platforms:
        problems += _secret(telegram.token_env, "telegram.token_env", "needed by pinbot telegram")
        token = os.environ.get(telegram.token_env, "")
        if token and (problem := telegram_token_problem(telegram.token_env, token)):
            problems.append(f"telegram.token_env: {problem}")
        if telegram.mode == "webhook":
            if not telegram.webhook_url:
                problems.append("telegram.webhook_url: required when telegram.mode is webhook")
            problems += _secret(
                telegram.webhook_secret_env,
                "telegram.webhook_secret_env",
                "telegram.mode is webhook",
            )
    feishu = config.feishu
    if "feishu" in platforms or feishu.app_id:
        if not feishu.app_id:
            problems.append("feishu.app_id: required to run on Feishu")
        problems += _secret(
            feishu.app_secret_env, "feishu.app_secret_env", "needed by pinbot feishu"
        )
        if feishu.mode == "webhook":
            problems += _secret(
                feishu.verification_token_env,
                "feishu.verification_token_env",
                "feishu.mode is webhook",
            )
        if feishu.encrypt_key_env:
            problems += _secret(
                feishu.encrypt_key_env, "feishu.encrypt_key_env", "an encrypt key is configured"
            )
    return problems
