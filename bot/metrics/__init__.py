"""What pinbot counts for Prometheus, under which names, and the one way each count is made.

Counting is on only in a process that serves the counts (`metrics.listen`, see
bot/metrics/listener.py): until `enable()`, every recording function below returns at once.
Every label is a small fixed set (platform, kind, outcome, reason, channel, currency, the
configured models: llm.model for the default and each llm.models entry by its name): a value
outside its set is counted as "other", so no user, chat, label or text can ever become a series
of its own."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.process_collector import ProcessCollector

from storage.dialect.base import unwatch as unwatch_store
from storage.dialect.base import watch as watch_store
from storage.models import Channel

OTHER = "other"
PLATFORMS = ("telegram", "feishu", "console")
UPDATE_KINDS = ("message", "edit", "tap")
HANDLING_KINDS = ("command", "turn", "tap")
MODEL_OUTCOMES = ("ok", "cut_off", "failed")
TOKEN_KINDS = ("prompt", "cached_prompt", "completion")
REFUSAL_REASONS = ("budget", "rate_limit", "access", "block_rules")
COMPACTIONS = ("summarized", "dropped")
CHANNELS = tuple(channel.value for channel in Channel)

# Seconds: a command takes milliseconds, a turn seconds to minutes.
HANDLING_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MODEL_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def _one_of(value: str, allowed: Iterable[str]) -> str:
    """value when it is one of allowed, else "other": a label never takes an unexpected value."""
    return value if value in allowed else OTHER


class Meters:
    """Every pinbot metric, in a registry of its own (the process's own figures included)."""

    def __init__(
        self, *, version: str, model: str, currency: str, models: Sequence[str] = ()
    ) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        self.model, self.currency = model, currency
        # The model labels: the default's (llm.model), then each llm.models entry's name.
        self.models = (model, *models)
        Info("pinbot_version", "The running pinbot's version", registry=registry).info(
            {"version": version}
        )
        Gauge(
            "pinbot_start_time_seconds",
            "When this process started, in seconds since the epoch",
            registry=registry,
        ).set(time.time())
        self.ready = Gauge(
            "pinbot_ready",
            "1 when /readyz would answer 200 at the last scrape, else 0",
            registry=registry,
        )
        self.updates = Counter(
            "pinbot_updates_received",
            "Updates received from the platform, by platform and kind (message, edit, tap, other)",
            ["platform", "kind"],
            registry=registry,
        )
        handling = Histogram(
            "pinbot_handling_seconds",
            "Time to handle one message, by kind (command, turn, tap)",
            ["kind"],
            buckets=HANDLING_BUCKETS,
            registry=registry,
        )
        self._handling_other = handling
        self._handling = {kind: handling.labels(kind) for kind in HANDLING_KINDS}
        self.model_calls = Counter(
            "pinbot_model_calls",
            "Calls to the model, by outcome (ok, cut_off, failed) and model (llm.model, or the "
            "llm.models entry's name)",
            ["outcome", "model"],
            registry=registry,
        )
        self.first_token = Histogram(
            "pinbot_model_first_token_seconds",
            "Time from a streamed model call's start to its first text",
            buckets=MODEL_BUCKETS,
            registry=registry,
        )
        self.call_seconds = Histogram(
            "pinbot_model_call_seconds",
            "Time one model call took, start to end",
            buckets=MODEL_BUCKETS,
            registry=registry,
        )
        tokens = Counter(
            "pinbot_model_tokens",
            "Tokens of model calls, by kind (prompt, cached_prompt: of the prompt tokens those "
            "the server served from its cache, completion) and model (llm.model, or the "
            "llm.models entry's name)",
            ["kind", "model"],
            registry=registry,
        )
        self._tokens_family = tokens
        self._tokens = {
            (kind, name): tokens.labels(kind, name) for kind in TOKEN_KINDS for name in self.models
        }
        self._cost = Counter(
            "pinbot_model_cost",
            "What model calls cost with pricing's prices (cache discount applied), by currency",
            ["currency"],
            registry=registry,
        ).labels(currency)
        self.refusals = Counter(
            "pinbot_refusals",
            "Messages refused, by reason (budget, rate_limit, access, block_rules)",
            ["reason"],
            registry=registry,
        )
        self.blocks = Counter(
            "pinbot_blocks_written",
            "Block changes committed (one per label changed), by channel",
            ["channel"],
            registry=registry,
        )
        self.proposals = Counter(
            "pinbot_proposals_written",
            "Proposals for shared blocks recorded, by channel",
            ["channel"],
            registry=registry,
        )
        self.compactions = Counter(
            "pinbot_history_compactions",
            "History compactions, by what became of the old turns (summarized, dropped)",
            ["outcome"],
            registry=registry,
        )
        self.replies_lost = Counter(
            "pinbot_replies_lost",
            "Answers that could not be sent to the platform after their retries, by platform",
            ["platform"],
            registry=registry,
        )
        self.waiting = Gauge(
            "pinbot_inbox_waiting_updates",
            "Updates waiting in the chats this webhook worker holds, at the last scrape",
            registry=registry,
        )
        self.oldest_wait = Gauge(
            "pinbot_inbox_oldest_wait_seconds",
            "How long the oldest update waiting in this worker's chats has waited (0: none)",
            registry=registry,
        )
        self._store_seconds = Histogram(
            "pinbot_store_transaction_seconds",
            "Time one store transaction took (a statement, a batch or a transaction block)",
            buckets=STORE_BUCKETS,
            registry=registry,
        )
        self._store_failures = Counter(
            "pinbot_store_failures",
            "Store transactions that failed because the database could not be reached",
            registry=registry,
        )

    def store_transaction(self, seconds: float, failed: bool) -> None:
        """One store transaction (a watcher of storage.dialect.base)."""
        self._store_seconds.observe(seconds)
        if failed:
            self._store_failures.inc()

    def handled(self, kind: str, seconds: float) -> None:
        """One message handled."""
        bound = self._handling.get(kind)
        (bound or self._handling_other.labels(OTHER)).observe(seconds)

    def model_label(self, model: str | None) -> str:
        """A call's model label: model when it is one of the configured ones, the default's
        when None, else "other"."""
        return self.model if model is None else _one_of(model, self.models)

    def tokens(
        self, prompt: int, cached: int, completion: int, cost: float | None, model: str | None
    ) -> None:
        """One model call's usage (of model: a label, None for the default), and its cost when
        priced."""
        name = self.model_label(model)
        for kind, count in (
            ("prompt", prompt),
            ("cached_prompt", cached),
            ("completion", completion),
        ):
            bound = self._tokens.get((kind, name))
            if bound is None:  # "other": bound the first time it is seen
                bound = self._tokens[kind, name] = self._tokens_family.labels(kind, name)
            bound.inc(count)
        if cost is not None:
            self._cost.inc(cost)


_active: Meters | None = None


def enable(*, version: str, model: str, currency: str, models: Sequence[str] = ()) -> Meters:
    """Start counting (in a fresh registry) and return the meters; the store's transactions are
    watched from now on. model: llm.model, the default's label; models: the llm.models
    entries' names, the other labels a model call may have."""
    global _active
    disable()
    # A counter's creation time doubles the series for nothing Prometheus reads.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    _active = Meters(version=version, model=model, currency=currency, models=models)
    watch_store(_active.store_transaction)
    return _active


def disable() -> None:
    """Stop counting."""
    global _active
    if _active is not None:
        unwatch_store(_active.store_transaction)
    _active = None


def active() -> Meters | None:
    """The meters counting now, if any."""
    return _active


# --- the recording functions: one line at each place that counts ---------------------------


def update_received(platform: str, kind: str) -> None:
    """An update came from the platform (kind: message, edit, tap; anything else is other)."""
    if (meters := _active) is not None:
        meters.updates.labels(_one_of(platform, PLATFORMS), _one_of(kind, UPDATE_KINDS)).inc()


def reply_lost(platform: str) -> None:
    """An answer could not be sent after its retries: its user did not get it."""
    if (meters := _active) is not None:
        meters.replies_lost.labels(_one_of(platform, PLATFORMS)).inc()


def handled(kind: str, seconds: float) -> None:
    """A message was handled in seconds (kind: command, turn, tap)."""
    if (meters := _active) is not None:
        meters.handled(kind, seconds)


def model_call(
    outcome: str, seconds: float, first_text_s: float | None, model: str | None = None
) -> None:
    """A model call ended (outcome: ok, cut_off, failed) after seconds; first_text_s: when a
    streamed answer's first text came, if it did; model: its label (None: the default's)."""
    if (meters := _active) is not None:
        label = meters.model_label(model)
        meters.model_calls.labels(_one_of(outcome, MODEL_OUTCOMES), label).inc()
        meters.call_seconds.observe(seconds)
        if first_text_s is not None:
            meters.first_token.observe(first_text_s)


def usage(
    prompt: int, cached: int, completion: int, cost: float | None, model: str | None = None
) -> None:
    """A model call's tokens (as the server reported them, or estimated) and cost (None: no
    price); model: its label (None: the default's)."""
    if (meters := _active) is not None:
        meters.tokens(prompt, cached, completion, cost, model)


def refused(reason: str) -> None:
    """A message or change was refused (reason: budget, rate_limit, access, block_rules)."""
    if (meters := _active) is not None:
        meters.refusals.labels(_one_of(reason, REFUSAL_REASONS)).inc()


def blocks_written(channel: str, count: int) -> None:
    """count labels' changes came through channel and were committed."""
    if (meters := _active) is not None and count:
        meters.blocks.labels(_one_of(channel, CHANNELS)).inc(count)


def proposal_written(channel: str) -> None:
    """A proposal was recorded."""
    if (meters := _active) is not None:
        meters.proposals.labels(_one_of(channel, CHANNELS)).inc()


def compacted(outcome: str) -> None:
    """A conversation's history was compacted (outcome: summarized, dropped)."""
    if (meters := _active) is not None:
        meters.compactions.labels(_one_of(outcome, COMPACTIONS)).inc()
