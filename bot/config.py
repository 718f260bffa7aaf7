"""The YAML configuration, validated by pydantic; secrets come from environment variables only."""

from __future__ import annotations

import difflib
import functools
import ipaddress
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)


class ConfigError(Exception):
    """A configuration problem a person must fix; the message names the key and the file."""


def _ids_as_strings(value: Any) -> Any:
    """Allowlist ids may be YAML integers or strings; both mean the same id."""
    if isinstance(value, list):
        return [
            str(item) if isinstance(item, int) and not isinstance(item, bool) else item
            for item in value
        ]
    return value


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_PREFIXES = ("sk-", "xox", "ghp_", "github_pat_", "AKIA", "AIza", "t-", "cli_")
MIN_KEY_LENGTH = 32


def looks_like_a_secret(value: str) -> bool:
    """Whether value looks like a key or token rather than the name of a variable holding one."""
    if value.startswith(_KEY_PREFIXES) or ":" in value:
        return True
    mixed = any(c.isalpha() for c in value) and any(c.isdigit() for c in value)
    return len(value) >= MIN_KEY_LENGTH and mixed and value.count("_") <= 1


def _variable_name(value: str) -> str:
    """An `*_env` value: the name of an environment variable, never the secret itself (which is
    not echoed back)."""
    if value and (looks_like_a_secret(value) or not _VARIABLE_NAME.fullmatch(value)):
        raise ValueError(
            "this looks like the secret itself; put it in an environment variable and name the "
            "variable here"
            if looks_like_a_secret(value)
            else "must be the name of an environment variable (letters, digits and _, not "
            "starting with a digit)"
        )
    return value


def _http_url(value: str) -> str:
    if not re.match(r"https?://[^/\s]+", value):
        raise ValueError("must be an http:// or https:// URL")
    return value


def _bot_api_url(value: str) -> str:
    _http_url(value)
    if not value.rstrip("/").endswith("/bot"):
        raise ValueError(
            "must end with /bot (pinbot appends the token), e.g. https://api.telegram.org/bot"
        )
    return value


HEADER_LABEL_MAX = 60
# Line and paragraph breaks, control and invisible characters: a title is one visible line.
_NOT_IN_A_LINE = ("Cc", "Cf", "Zl", "Zp")


def _header_label(value: str) -> str:
    """The strong section's title: one line of 1..60 characters, without the `[` and `]` that
    mark the section's boundaries (surrounding spaces are dropped)."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if any(unicodedata.category(char) in _NOT_IN_A_LINE for char in value):
        raise ValueError("must be one line, without line breaks or control characters")
    if len(value) > HEADER_LABEL_MAX:
        raise ValueError(f"is {len(value)} characters long; the limit is {HEADER_LABEL_MAX}")
    if "[" in value or "]" in value:
        raise ValueError("must not contain [ or ]: they mark where the section begins and ends")
    return value


EnvName = Annotated[str, AfterValidator(_variable_name)]
HeaderLabel = Annotated[str, AfterValidator(_header_label)]
HttpUrl = Annotated[str, AfterValidator(_http_url)]
BotApiUrl = Annotated[str, AfterValidator(_bot_api_url)]
IdList = Annotated[list[str], BeforeValidator(_ids_as_strings)]
# Integers have ranges: past them a value can only be a mistake, and could overflow the
# database or the arithmetic on it.
Days = Annotated[int, Field(ge=0, le=3650)]
Tokens = Annotated[int, Field(ge=0, le=10**12)]
PerMinute = Annotated[int, Field(ge=0, le=10_000)]
Seconds = Annotated[float, Field(gt=0, le=3600)]
Money = Annotated[float, Field(ge=0, le=10**9, allow_inf_nan=False)]


class _Section(BaseModel):
    # strict: a boolean is not a number and a number is not a boolean
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class StorageConfig(_Section):
    """Where the data lives: SQLite at path, or the PostgreSQL server whose postgresql:// URL is
    in the environment variable url_env names (then it must be set: no fallback to SQLite)."""

    path: str = "./pinbot.sqlite3"
    url_env: EnvName = ""
    # How often a webhook worker looks for chats whose updates wait while no live worker
    # holds them (their worker stopped or died).
    takeover_check_s: Annotated[float, Field(ge=0.05, le=3600)] = 2.0


ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")]


class ModelEntry(_Section):
    """One model a group or topic may pick with `/group model <name>`: its server, its model
    and where its key is (prices stay in pricing.models, by model)."""

    base_url: HttpUrl = "https://api.openai.com/v1"
    model: str = Field(min_length=1, max_length=200)
    api_key_env: EnvName = "OPENAI_API_KEY"


class LlmConfig(_Section):
    """The downstream model: the offline default or an OpenAI-compatible server."""

    backend: Literal["offline", "openai"] = "offline"
    base_url: HttpUrl = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: EnvName = "OPENAI_API_KEY"
    system_prompt: str = "You are a helpful assistant in a chat."
    timeout_s: Seconds = 60.0
    max_retries: Annotated[int, Field(ge=0, le=100)] = 1
    stream: bool = False
    # The longest one streamed answer may take, start to end (timeout_s bounds each read only).
    stream_timeout_s: Seconds = 300.0
    agent_tools: bool = False
    tool_names: Literal["pin", "sticky"] = "pin"
    max_tool_rounds: Annotated[int, Field(ge=1, le=100)] = 4
    max_completion_tokens: Annotated[int, Field(ge=1, le=100_000)] = 1024
    # Which request field carries max_completion_tokens; auto: OpenAI's, until the server shows
    # it rejects or ignores it, then max_tokens (bot/llm/server.py).
    completion_limit_param: Literal["auto", "max_completion_tokens", "max_tokens"] = "auto"
    probe_server: bool = False
    # The models a group or topic may pick (`/group model <name>`): name → server, model, key.
    models: dict[ModelName, ModelEntry] = {}

    @property
    def called(self) -> str:
        """The model a default call is made to, as usage and metrics name it: `offline` for
        the built-in backend (llm.model then names nothing that is called)."""
        return self.model if self.backend == "openai" else "offline"


class PinsConfig(_Section):
    """Limits, lifecycle and group permissions of pinned blocks."""

    max_blocks_per_session: Annotated[int, Field(ge=1, le=1000)] = 20
    max_label_length: Annotated[int, Field(ge=1, le=200)] = 20
    max_content_length: Annotated[int, Field(ge=1, le=100_000)] = 500
    idle_retention_days: Days = 7
    idle_retention_calls: Annotated[int, Field(ge=0, le=10**9)] = 10
    idle_hard_retention_days: Days = 30
    token_warning_threshold: Annotated[int, Field(ge=0, le=10_000_000)] = 1000
    max_total_chars: Annotated[int, Field(ge=0, le=10_000_000)] = 0
    enable_in_group: bool = False
    group_whitelist: IdList = []
    group_shared_admin_ids: IdList = []
    group_strong_user_ids: IdList = []
    allow_prompt_injection: bool = True
    inherit_platform_admins: bool = False
    refuse_secrets_in_groups: bool = True
    audit_retention_days: Annotated[int, Field(ge=1, le=3650)] = 180
    history_days: Annotated[int, Field(ge=1, le=3650)] = 30
    history_per_block: Annotated[int, Field(ge=1, le=10_000)] = 50
    proposal_ttl_hours: Annotated[int, Field(ge=1, le=720)] = 24
    max_pending_proposals: Annotated[int, Field(ge=1, le=100)] = 5
    # At each compaction the model may suggest facts worth a pin: in DMs (dm), also to a
    # group's shared admins as proposals (all), or never (off); at most suggest_max each time.
    suggest_on_compaction: Literal["off", "dm", "all"] = "dm"
    suggest_max: Annotated[int, Field(ge=1, le=10)] = 3
    header_label: HeaderLabel = "pinned rules"
    # Blocks with keywords (`--when`) go with a request whose message, or one of the user's
    # messages of the last trigger_turns turns, mentions one; together at most
    # triggered_budget_tokens (estimated), the lowest priority left out first.
    trigger_turns: Annotated[int, Field(ge=0, le=50)] = 2
    triggered_budget_tokens: Annotated[int, Field(ge=0, le=1_000_000)] = 1000


KeptDays = Annotated[int, Field(ge=1, le=3650)]
# Usage is kept at least as long as a budget reads it: this month's, up to 31 days back.
UsageDays = Annotated[int, Field(ge=31, le=3650)]


class RetentionConfig(_Section):
    """How long each kind of data is kept, in days; a daily job removes what is older. Block
    versions and the audit trail follow pins.history_days and pins.audit_retention_days (their
    older spellings) unless given here: a key given here wins."""

    conversation_days: KeptDays = 90  # conversation history: turns and summaries
    versions_days: KeptDays | None = None  # None: pins.history_days
    usage_days: UsageDays = 400
    audit_days: KeptDays | None = None  # None: pins.audit_retention_days
    inbox_days: KeptDays = 7  # processed platform updates (a repeated delivery is recognised)
    removed_group_days: KeptDays = 30  # a group's data after the bot was removed from it


@dataclass(frozen=True)
class Retention:
    """The retention in effect, in days, kind by kind (see RetentionConfig)."""

    conversation: int
    versions: int
    usage: int
    audit: int
    inbox: int
    removed_group: int


# The keys of pins that retention's replace where it gives them: (retention's, pins').
RETENTION_IN_PINS = (("versions_days", "history_days"), ("audit_days", "audit_retention_days"))


class TelegramConfig(_Section):
    """The Telegram adapter: where the Bot API is, how updates arrive, when groups trigger."""

    token_env: EnvName = "TELEGRAM_BOT_TOKEN"
    base_url: BotApiUrl = "https://api.telegram.org/bot"
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout_s: Annotated[int, Field(ge=1, le=600)] = 30
    webhook_listen: str = "127.0.0.1"
    webhook_port: Annotated[int, Field(ge=1, le=65535)] = 8443
    webhook_path: str = "telegram"
    webhook_url: str = ""
    webhook_secret_env: EnvName = "TELEGRAM_WEBHOOK_SECRET"
    group_trigger: Literal["mention", "all"] = "mention"
    reply_format: Literal["markdown", "plain"] = "markdown"
    admin_cache_ttl_s: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    sync_pinned_message: bool = False
    pinned_label: Annotated[str, Field(min_length=1, max_length=200)] = "chat-pin"
    pinned_check_s: Annotated[float, Field(ge=10, le=86_400)] = 600.0


class FeishuConfig(_Section):
    """The Feishu (Lark) adapter: the app, how events arrive, when groups trigger."""

    app_id: str = ""
    app_secret_env: EnvName = "FEISHU_APP_SECRET"
    verification_token_env: EnvName = "FEISHU_VERIFICATION_TOKEN"
    encrypt_key_env: EnvName = ""
    base_url: HttpUrl = "https://open.feishu.cn"
    mode: Literal["webhook", "websocket"] = "webhook"
    webhook_host: str = "127.0.0.1"
    webhook_port: Annotated[int, Field(ge=1, le=65535)] = 8080
    webhook_path: str = "/feishu/events"
    group_trigger: Literal["mention", "all"] = "mention"
    reply_format: Literal["markdown", "plain"] = "markdown"
    request_timeout_s: Seconds = 15.0
    # Signed webhook requests further than this from the bot's clock are refused (replays).
    request_max_age_s: Annotated[float, Field(ge=30, le=3600)] = 300.0
    # How long a group's owner and managers, as Feishu gave them, are trusted.
    admin_cache_ttl_s: Annotated[float, Field(ge=0, le=86_400)] = 60.0


class ChatConfig(_Section):
    """How much conversation history goes to the model."""

    history_max_chars: Annotated[int, Field(ge=0, le=10_000_000)] = 8000
    history_max_turns: Annotated[int, Field(ge=0, le=10_000)] = 20
    history_per_sender: bool = False
    compaction: Literal["summarize", "drop"] = "summarize"
    compaction_keep_turns: Annotated[int, Field(ge=0, le=1000)] = 4


class AccessConfig(_Section):
    """Who may use the bot at all (checked before anything else); empty lists mean everyone."""

    allowed_users: IdList = []
    allowed_groups: IdList = []


class LimitsConfig(_Section):
    """Abuse limits per sender; 0 turns a rate limit off."""

    pin_commands_per_minute: PerMinute = 30
    model_turns_per_minute: PerMinute = 10
    max_message_chars: Annotated[int, Field(ge=1, le=1_000_000)] = 8000


class BudgetsConfig(_Section):
    """Budgets in tokens (prompt + completion tokens as reported) and in money (in
    pricing.currency, the cache discount applied); 0 means no budget. Days and months are
    UTC."""

    user_daily_tokens: Tokens = 0
    user_monthly_tokens: Tokens = 0
    group_daily_tokens: Tokens = 0
    group_monthly_tokens: Tokens = 0
    user_daily_cost: Money = 0.0
    user_monthly_cost: Money = 0.0
    group_daily_cost: Money = 0.0
    group_monthly_cost: Money = 0.0

    @functools.cached_property  # read on every turn; the section never changes
    def any(self) -> bool:
        """Whether any budget is set."""
        return any(value for value in self.model_dump().values())

    @property
    def in_money(self) -> bool:
        """Whether a budget is set in money."""
        return any(
            (
                self.user_daily_cost,
                self.user_monthly_cost,
                self.group_daily_cost,
                self.group_monthly_cost,
            )
        )


class ModelPrice(_Section):
    """What a model costs per 1,000,000 tokens: prompt tokens, prompt tokens the server served
    from its cache, and completion tokens."""

    prompt: Money
    cached_prompt: Money | None = None  # as prompt when not given
    completion: Money


class PricingConfig(_Section):
    """Prices of the models named in llm.model, to show and budget usage in money."""

    currency: Annotated[str, Field(min_length=1, max_length=8)] = "USD"
    models: dict[str, ModelPrice] = {}


class WebConfig(_Section):
    """The operator's web page (`pinbot web`): where it listens, the variable holding its
    sign-in token, whether its cookie needs TLS, whether DM scopes are shown, and the name its
    changes are recorded under."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8090
    token_env: EnvName = "PINBOT_WEB_TOKEN"
    secure_cookie: bool = False
    show_direct: bool = False
    operator_name: str = ""  # recorded in the audit log with changes made on the page


class LoggingConfig(_Section):
    """Log level and format: text lines, or one JSON object a line (`json: true` is the older
    spelling of `format: json`)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"
    json_: bool = Field(default=False, alias="json")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def as_json(self) -> bool:
        """Whether lines are written as JSON objects."""
        return self.format == "json" or self.json_


_LISTEN_FORM = (
    'host:port with a port from 0 to 65535 (0: any free port), e.g. "127.0.0.1:9464" or '
    '"[::1]:9464" (an IPv6 address inside [ ]), or "" for off'
)
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")


def _listen_problem(value: str) -> str | None:
    """What is wrong with a host:port to listen on, or None."""
    if any(char.isspace() for char in value):
        return "holds a space"
    host, separator, port = value.rpartition(":")
    if not separator or not host:
        return "has no host before the port"
    if not _PORT.fullmatch(port) or int(port) > MAX_PORT:
        return f"the port {port!r} is not a number from 0 to 65535"
    if host.startswith("[") or host.endswith("]"):
        inside = host.removeprefix("[").removesuffix("]")
        if not (host.startswith("[") and host.endswith("]")):
            return "an IPv6 address needs both [ and ]"
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            return f"{inside!r} inside [ ] is not an IPv6 address"
        return None
    if ":" in host:
        return "an IPv6 address goes inside [ ], e.g. [::1]:9464"
    if not _HOST_NAME.fullmatch(host):
        return f"the host {host!r} is not a host name or address"
    return None


def _listen_address(value: str) -> str:
    """host:port, or empty; the port may be 0 (any free port)."""
    if value and (problem := _listen_problem(value)):
        raise ValueError(f"{problem}: write {_LISTEN_FORM}")
    return value


MAX_PORT = 65535
ListenAddress = Annotated[str, AfterValidator(_listen_address)]


class MetricsConfig(_Section):
    """The metrics and health listener (/metrics, /healthz, /readyz) of a long-running
    command; empty listen: off."""

    listen: ListenAddress = ""

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) to listen on, None when off; [::1] is given as ::1."""
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.removeprefix("[").removesuffix("]"), int(port)


class GroupsConfig(_Section):
    """What groups may set for themselves from the chat (`/group`), and the operator's caps."""

    self_service: bool = True  # false: only pins.group_shared_admin_ids may change settings
    max_daily_tokens: Tokens = 0  # the most a group's daily budget may be set to; 0: no cap
    max_monthly_tokens: Tokens = 0  # likewise for the monthly budget


class Config(_Section):
    """The whole configuration; every key has a default, so an empty file is valid."""

    storage: StorageConfig = StorageConfig()
    llm: LlmConfig = LlmConfig()
    pins: PinsConfig = PinsConfig()
    chat: ChatConfig = ChatConfig()
    telegram: TelegramConfig = TelegramConfig()
    feishu: FeishuConfig = FeishuConfig()
    access: AccessConfig = AccessConfig()
    limits: LimitsConfig = LimitsConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    pricing: PricingConfig = PricingConfig()
    web: WebConfig = WebConfig()
    logging: LoggingConfig = LoggingConfig()
    metrics: MetricsConfig = MetricsConfig()
    retention: RetentionConfig = RetentionConfig()
    groups: GroupsConfig = GroupsConfig()
    # pins' keys that retention's replaced, with the values they were given (check-config warns)
    _replaced: dict[str, int] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _retention_in_pins(self) -> Config:
        """Where retention gives block versions' or the audit trail's days, pins' older keys
        take them too: whatever reads pins.history_days or pins.audit_retention_days reads
        the retention in effect."""
        update = {
            old: days
            for new, old in RETENTION_IN_PINS
            if (days := getattr(self.retention, new)) is not None
        }
        for old, days in update.items():
            given = getattr(self.pins, old)
            if old in self.pins.model_fields_set and given != days:
                self._replaced[old] = given
        if update:  # frozen: the section is replaced once, here, while the model is made
            object.__setattr__(self, "pins", self.pins.model_copy(update=update))
        return self

    @property
    def retention_in_effect(self) -> Retention:
        """How many days each kind of data is kept."""
        kept = self.retention
        return Retention(
            conversation=kept.conversation_days,
            versions=self.pins.history_days,
            usage=kept.usage_days,
            audit=self.pins.audit_retention_days,
            inbox=kept.inbox_days,
            removed_group=kept.removed_group_days,
        )

    @property
    def replaced_pins_keys(self) -> dict[str, int]:
        """pins' retention keys given a value that retention's replaced: key → the value."""
        return dict(self._replaced)


def _known_keys(location: tuple[int | str, ...]) -> list[str]:
    """The keys allowed in the section at location (the top level for an empty one)."""
    model: type[BaseModel] = Config
    for part in location:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return [field.alias or name for name, field in model.model_fields.items()]


def _unknown_key_message(location: tuple[int | str, ...]) -> str:
    guess = difflib.get_close_matches(str(location[-1]), _known_keys(location[:-1]), n=1)
    hint = f"; did you mean {'.'.join([*map(str, location[:-1]), guess[0]])}?" if guess else ""
    return f"unknown key{hint} (check its spelling against config.example.yaml)"


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = _unknown_key_message(tuple(item["loc"]))
        lines.append(f"  {key}: {message}")
    if len(lines) == 2:  # one problem: one line
        return f"{lines[0]} {lines[1].strip()}"
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>") -> Config:
    """Validate already-loaded YAML data; raise ConfigError naming each bad key and the source."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: the top level must be a mapping")
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_describe(error, source)) from None


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load the config file, or the embedded defaults when no path is given."""
    if path is None:
        return Config()
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config file {file}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"config file {file} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at "
            f"position {error.start}); save it as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {file} is not valid YAML: {error}") from None
    config = parse_config(data, str(file))
    path = config.storage.path
    if path != ":memory:" and not Path(path).expanduser().is_absolute():
        # A relative storage.path is the config file's neighbour, wherever pinbot runs from:
        # started from another folder it would otherwise open a new, empty database.
        storage = config.storage.model_copy(update={"path": str(file.parent.resolve() / path)})
        config = config.model_copy(update={"storage": storage})
    return config


TELEGRAM_TOKEN_FORM = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{1,200}")


def telegram_token_problem(variable: str, token: str) -> str | None:
    """Why token (from variable) cannot be a Telegram bot token, without echoing it; None if it
    looks like one (digits, a colon, then letters, digits, - and _)."""
    if TELEGRAM_TOKEN_FORM.fullmatch(token):
        return None
    what = "a line break" if "\n" in token or "\r" in token else "characters a token never has"
    return (
        f"${variable} holds {what}; a Telegram bot token is digits, a colon, then letters, "
        "digits, - and _: copy it again from @BotFather"
    )


def secret_from_env(variable: str, what: str) -> str:
    """Read a secret from the environment, or raise ConfigError naming the variable."""
    value = os.environ.get(variable, "")
    if not value:
        raise ConfigError(f"{what} is missing: set the environment variable {variable}")
    return value
