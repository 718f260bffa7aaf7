"""A group's own settings and a forum topic's: the names `/group` sets, their values as stored
(JSON), and what applies to one message: a topic's value over its group's, a group's over the
config's, each with where it comes from. Lists of people (admins, strong users) add to the
config's lists, never replace them: the operator keeps the last word."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from bot.config import BudgetsConfig, Config, PinsConfig
from bot.core.commands import stored_value
from bot.core.people import Conversation, member_scope


class Name(StrEnum):
    """What a group (or a topic) may set for itself."""

    PINS = "pins"  # bool: pins on or off here
    ADMINS = "admins"  # list of sender ids: shared admins, beside pins.group_shared_admin_ids
    STRONG = "strong"  # list of sender ids: strong users, beside pins.group_strong_user_ids
    MODEL = "model"  # str: an entry of llm.models
    TRIGGER = "trigger"  # "mention" | "all"
    BUDGET_DAILY = "budget_daily"  # int: the group's daily tokens
    BUDGET_MONTHLY = "budget_monthly"  # int: the group's monthly tokens


class Source(StrEnum):
    """Where a value that applies comes from."""

    CONFIG = "config"
    GROUP = "group"
    TOPIC = "topic"


def encode(value: Any) -> str:
    """A value as stored."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Places:
    """Where a message's settings live: its group's key, and its topic's key in a forum topic
    (None: the group's general chat)."""

    group: str
    topic: str | None = None

    @classmethod
    def of(cls, conversation: Conversation) -> Places | None:
        """The places of a group message (None outside groups)."""
        group = conversation.group_session_key
        if group is None:
            return None
        topic = conversation.session_key if conversation.topic_id else None
        return cls(group, topic)

    @property
    def here(self) -> str:
        """The place a `/group` command sent here sets: the topic's, else the group's."""
        return self.topic or self.group

    @property
    def keys(self) -> tuple[str, ...]:
        """The places read for a message here."""
        return (self.group, self.topic) if self.topic else (self.group,)


@dataclass(frozen=True)
class GroupSettings:
    """The values a group and (in a topic) its topic set, as stored; what applies here."""

    places: Places
    group: Mapping[str, str]
    topic: Mapping[str, str]

    @property
    def empty(self) -> bool:
        """Whether neither place sets anything: the config applies as it is."""
        return not self.group and not self.topic

    def value(self, name: Name) -> tuple[Any, Source]:
        """What applies here for name, and where it comes from (None, CONFIG: the config's)."""
        for stored, source in ((self.topic, Source.TOPIC), (self.group, Source.GROUP)):
            value = stored_value(stored.get(name.value))
            if value is not None:
                return value, source
        return None, Source.CONFIG

    def own(self, name: Name) -> str | None:
        """The stored value the place a command here sets has for name (None: unset)."""
        stored = self.topic if self.places.topic else self.group
        return stored.get(name.value)

    @property
    def model(self) -> str | None:
        """The llm.models entry set here (None: the default model)."""
        value, _ = self.value(Name.MODEL)
        return value if isinstance(value, str) else None

    @property
    def trigger(self) -> Literal["mention", "all"] | None:
        """The group trigger set here (None: the platform's config)."""
        value, _ = self.value(Name.TRIGGER)
        if value == "mention":
            return "mention"
        return "all" if value == "all" else None

    def people(self, name: Name) -> list[str]:
        """The sender ids a list setting names here."""
        value, _ = self.value(name)
        return [str(v) for v in value] if isinstance(value, list) else []

    def applied(self, config: Config) -> Config:
        """config with what is set here: pins on or off, the admins and strong users added to
        the config's lists (for this group), the group's budgets. The same object when
        nothing is set."""
        if self.empty:
            return config
        pins: dict[str, Any] = {}
        on, _ = self.value(Name.PINS)
        if on is True:  # on here, whatever the whitelist says of other groups
            pins.update(enable_in_group=True, group_whitelist=[])
        elif on is False:
            pins.update(enable_in_group=False)
        group = self.places.group
        for name, key in (
            (Name.ADMINS, "group_shared_admin_ids"),
            (Name.STRONG, "group_strong_user_ids"),
        ):
            if added := self.people(name):
                listed = getattr(config.pins, key)
                pins[key] = [*listed, *(member_scope(group, sender) for sender in added)]
        budgets: dict[str, Any] = {}
        for name, key in (
            (Name.BUDGET_DAILY, "group_daily_tokens"),
            (Name.BUDGET_MONTHLY, "group_monthly_tokens"),
        ):
            tokens, _ = self.value(name)
            if isinstance(tokens, int):
                budgets[key] = tokens
        update: dict[str, Any] = {}
        if pins:
            update["pins"] = PinsConfig.model_validate({**config.pins.model_dump(), **pins})
        if budgets:
            update["budgets"] = BudgetsConfig.model_validate(
                {**config.budgets.model_dump(), **budgets}
            )
        return config.model_copy(update=update) if update else config


def configured_trigger(config: Config, group: str) -> str:
    """The group trigger the config gives a group's platform, as `/group show` says it."""
    platform = group.partition(":")[0]
    trigger = getattr(getattr(config, platform, None), "group_trigger", None)
    return f"{trigger} ({platform}.group_trigger)" if trigger else "all"
