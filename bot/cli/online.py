"""`pinbot check-config --online`: ask the servers the config sets up whether they accept it.

One line per service: `ok`, `not configured` (its credentials are not set), or `failed: <status>
<the server's own message>`; after the model server's `ok`, one line for each thing it supports
or not (bot/llm/server.py); the same for each `llm.models` entry's server, named
`llm.models.<name>`. Secrets never appear in a line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from bot.config import Config
from bot.llm.server import ServerTraits, listed_window, probe
from bot.logs import REDACTOR

TIMEOUT_S = 10.0
LISTED_MODELS_SHOWN = 5


def _message(response: httpx.Response) -> str:
    """The server's own error message, from the usual JSON shapes, else the body's start."""
    try:
        body: Any = response.json()
    except ValueError:
        return response.text[:200].strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("message", error))
        for key in ("description", "msg", "message", "detail"):
            if key in body:
                return str(body[key])
    return str(body)[:200]


def _failed(response: httpx.Response) -> str:
    return f"failed: {response.status_code} {_message(response)}".strip()


async def _telegram(client: httpx.AsyncClient, config: Config) -> str:
    token = os.environ.get(config.telegram.token_env, "")
    if not token:
        return "not configured"
    response = await client.get(f"{config.telegram.base_url.rstrip('/')}{token}/getMe")
    if response.status_code == httpx.codes.OK:
        username = response.json().get("result", {}).get("username", "?")
        return f"ok (@{username})"
    return _failed(response)


@dataclass(frozen=True)
class _ModelServer:
    """One model server the config calls: llm's own, or an `llm.models` entry's."""

    name: str  # how its lines and messages name its settings: llm, llm.models.<name>
    base_url: str
    model: str
    api_key_env: str


def _model_servers(config: Config) -> list[_ModelServer]:
    """llm's server (when it is not the offline model), then each llm.models entry's."""
    llm = config.llm
    servers = [_ModelServer("llm", llm.base_url, llm.model, llm.api_key_env)]
    servers = servers if llm.backend == "openai" else []
    return servers + [
        _ModelServer(f"llm.models.{name}", entry.base_url, entry.model, entry.api_key_env)
        for name, entry in llm.models.items()
    ]


async def _llm(client: httpx.AsyncClient, config: Config) -> list[tuple[str, str]]:
    """Each model server's line, and when it answers, what it supports (bot/llm/server.py)."""
    found = []
    if config.llm.backend != "openai":
        found.append(("llm", "not configured (the offline model needs no server)"))
    for server in _model_servers(config):
        try:
            found += await _model_server(client, config, server)
        except httpx.HTTPError as error:
            found.append((server.name, _unreachable(error)))
    return found


async def _model_server(
    client: httpx.AsyncClient, config: Config, server: _ModelServer
) -> list[tuple[str, str]]:
    """One model server's line and what it supports: its model listed, its key taken."""
    key = os.environ.get(server.api_key_env, "")
    if not key:
        return [(server.name, "not configured")]
    headers = {"Authorization": f"Bearer {key}"}
    response = await client.get(f"{server.base_url.rstrip('/')}/models", headers=headers)
    window = None
    if response.status_code == httpx.codes.OK:
        entries = [m for m in response.json().get("data", []) if isinstance(m, dict)]
        listed = [m.get("id") for m in entries]
        if server.model not in listed:
            shown = ", ".join(str(m) for m in listed[:LISTED_MODELS_SHOWN]) or "none"
            return [
                (
                    server.name,
                    f"failed: the server does not list {server.name}.model '{server.model}' "
                    f"(it lists: {shown})",
                )
            ]
        window = listed_window(entries[listed.index(server.model)])
    elif response.status_code not in (httpx.codes.NOT_FOUND, httpx.codes.METHOD_NOT_ALLOWED):
        return [(server.name, _failed(response))]
    return [(server.name, "ok"), *await _supports(config, server, key, window)]


async def _supports(
    config: Config, server: _ModelServer, key: str, window: int | None
) -> list[tuple[str, str]]:
    """What the server makes of pinbot's requests, asked through the client pinbot uses."""
    traits = ServerTraits.configured(config.llm.completion_limit_param)
    async with openai.AsyncOpenAI(
        api_key=key, base_url=server.base_url, timeout=TIMEOUT_S, max_retries=0
    ) as model_client:
        try:
            report = await probe(model_client, server.model, traits, window)
        except openai.APIStatusError as error:
            return [(server.name, f"failed: {error.status_code} {error.message}")]
        except openai.OpenAIError as error:
            return [(server.name, f"failed: {type(error).__name__}: {error}")]
    return [(f"{server.name} {what}", finding) for what, finding in report.lines()]


def _unreachable(error: httpx.HTTPError) -> str:
    return f"failed: cannot reach the server ({type(error).__name__}: {error})"


async def _feishu(client: httpx.AsyncClient, config: Config) -> str:
    feishu = config.feishu
    secret = os.environ.get(feishu.app_secret_env, "")
    if not feishu.app_id or not secret:
        return "not configured"
    response = await client.post(
        f"{feishu.base_url.rstrip('/')}/open-apis/auth/v3/tenant_access_token/internal",
        json={"app_id": feishu.app_id, "app_secret": secret},
    )
    try:
        code = response.json().get("code")
    except ValueError:
        code = None
    if response.status_code == httpx.codes.OK and code == 0:
        return "ok"
    return _failed(response)


async def _storage(config: Config) -> str:
    """The configured store reached and its schema read, without migrating or creating it."""
    from bot.cli.store import database_url, unreachable_hint
    from bot.config import ConfigError
    from storage.dialect import inspect
    from storage.errors import Unavailable
    from storage.schema import LATEST

    try:
        kind, version = await inspect(path=config.storage.path, url=database_url(config))
    except (ConfigError, Unavailable) as error:
        return f"failed: {REDACTOR.redact(str(error))}{unreachable_hint(config)}"
    if version is None:
        return f"ok ({kind} does not exist yet; pinbot creates it on first use)"
    if version < LATEST:
        return f"schema {version}, this release expects {LATEST}: run pinbot migrate"
    if version > LATEST:
        return f"failed: schema {version} is newer than this release's ({LATEST}): upgrade pinbot"
    return f"ok ({kind}, schema {version})"


async def online_checks(config: Config) -> list[tuple[str, str]]:
    """(service, result) for the store, Telegram, the model server and Feishu."""
    results = [("storage", await _storage(config))]
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        for name, check in (("telegram", _telegram), ("llm", _llm), ("feishu", _feishu)):
            try:
                found = await check(client, config)
            except httpx.HTTPError as error:
                found = _unreachable(error)
            lines = [(name, found)] if isinstance(found, str) else found
            results += [(what, REDACTOR.redact(result)) for what, result in lines]
    return results


def passed(result: str) -> bool:
    """Whether a check's result lets check-config exit 0: a failure, or a schema to migrate,
    does not; what a server supports is a finding, not a failure."""
    return not result.startswith(("failed", "schema"))
