"""`/group`: a group's own settings (or, sent in a forum topic, the topic's), set from the chat
by the group's owner and admins (asked of the platform) and the configured shared admins, within
what the operator allows (`groups.*`, `llm.models`). Each change is a value: reviewed, written
once with its version and its entry in the group's audit trail, undoable with `/group undo`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bot.clock import Clock, utc_now
from bot.config import Config
from bot.core.commands import setting_value, stored_value
from bot.core.groups.settings import (
    GroupSettings,
    Name,
    Places,
    Source,
    configured_trigger,
    encode,
)
from bot.core.people import (
    AdminLookup,
    Conversation,
    MessageContext,
    QuotedLookup,
    member_scope,
)
from bot.core.replies import Reply
from storage import Store
from storage.errors import Conflict
from storage.models import Author, Channel
from storage.settings import SettingChange

USAGE = """\
/group show                            Each setting here and where it comes from
/group pins on|off                     Turn pins on or off here
/group admins add|remove <user>        Shared admins (by a reply to them, a mention or an id)
/group strong add|remove <user>        Strong users, who may pin strong blocks
/group model <name>|default            The model this chat's turns go to (llm.models)
/group trigger mention|all             Answer only when mentioned, or every message
/group budget daily|monthly <tokens>|default   This chat's token budget
/group reset                           Every setting here back to the config's
/group undo                            Take back the last change here
Sent in a forum topic, a command sets the topic's value; in the general chat, the group's."""
HELP = (
    "Group settings, for the group's owner and admins (and the bot's configured shared "
    f"admins):\n{USAGE}"
)
_ATTEMPTS = 5
_USER = re.compile(r"[A-Za-z0-9_:.@-]{1,64}")
_LISTS = {"admins": Name.ADMINS, "strong": Name.STRONG}
_SPANS = {"daily": Name.BUDGET_DAILY, "monthly": Name.BUDGET_MONTHLY}
UNDO = Author("undo", Channel.UNDO)


@dataclass(frozen=True)
class GroupCommand:
    """A parsed `/group` command: what it does, the setting, the value asked for (None: back
    to the config's), and for a list the person (or None: the one replied to)."""

    verb: str  # help, show, set, add, remove, reset, undo
    name: Name | None = None
    value: object = None
    person: str | None = None


def parse_group(text: str) -> GroupCommand | str:
    """The command `/group <text>` asks for, or what is wrong with it and how to write it."""
    words = text.split()
    folded = [w.casefold() for w in words]
    if not words or folded == ["help"]:
        return GroupCommand("help")
    if folded in (["show"], ["reset"], ["undo"]):
        return GroupCommand(folded[0])
    head = folded[0]
    if head == "pins" and folded[1:] in (["on"], ["off"]):
        return GroupCommand("set", Name.PINS, folded[1] == "on")
    if head in _LISTS and len(words) >= 2 and folded[1] in ("add", "remove"):
        # The person as written (a mention's text may hold spaces): _change makes it an id.
        return GroupCommand(folded[1], _LISTS[head], person=" ".join(words[2:]) or None)
    if head == "model" and len(words) == 2:
        return GroupCommand("set", Name.MODEL, None if folded[1] == "default" else words[1])
    if head == "trigger" and folded[1:] in (["mention"], ["all"]):
        return GroupCommand("set", Name.TRIGGER, folded[1])
    if head == "budget" and len(words) == 3 and folded[1] in _SPANS:
        amount = folded[2].replace(",", "").replace("_", "")
        if amount == "default":
            return GroupCommand("set", _SPANS[folded[1]], None)
        if not (amount.isascii() and amount.isdigit()) or len(amount) > 13:
            return f"The budget is a whole number of tokens (0: none), not {words[2]!r}.\n{USAGE}"
        return GroupCommand("set", _SPANS[folded[1]], int(amount))
    return f"I did not understand '/group {text.strip()}'.\n{USAGE}"


class GroupCommands:
    """Runs `/group` for one message's sender."""

    def __init__(self, store: Store, config: Config, clock: Clock = utc_now) -> None:
        self._store, self._config, self._clock = store, config, clock

    async def settings_of(self, conversation: Conversation) -> GroupSettings | None:
        """What a group message's group and topic set (None: not a group's message)."""
        places = Places.of(conversation)
        return await self.settings(places) if places else None

    async def settings(self, places: Places) -> GroupSettings:
        """What a group and its topic set, read now (every worker sees a change at once)."""
        found = await self._store.settings_of(places.keys)
        return GroupSettings(places, found.get(places.group, {}), found.get(places.topic or "", {}))

    async def execute(
        self,
        context: MessageContext,
        text: str,
        platform_admin: AdminLookup | None,
        mentioned_users: Sequence[tuple[str, str]] = (),
    ) -> Reply:
        """The reply to `/group <text>` from this message's sender; mentioned_users: the people
        the message mentions, (the mention's text, their id), as `Incoming` has them."""
        places = Places.of(context.conversation)
        if places is None:
            return Reply.refused("/group is for group chats: send it in the group to set up.")
        command = parse_group(text)
        if isinstance(command, str):
            return Reply.refused(command)
        if command.verb == "help":
            return Reply(HELP)
        settings = await self.settings(places)
        if command.verb == "show":
            return Reply(self._show(settings))
        if refusal := await self._may_manage(context, platform_admin):
            return Reply.refused(refusal)
        if command.verb == "undo":
            return await self._undo(context, places)
        return await self._change(context, places, command, mentioned_users)

    async def _may_manage(
        self, context: MessageContext, platform_admin: AdminLookup | None
    ) -> str | None:
        """Why the sender may not change this group's settings, or None: the configured
        shared admins may; with groups.self_service, so may the group's owner and admins."""
        conversation = context.conversation
        group = conversation.group_session_key or ""
        listed = self._config.pins.group_shared_admin_ids
        for sender in conversation.sender_ids:
            if sender in listed or member_scope(group, sender) in listed:
                return None
        if not self._config.groups.self_service:
            return (
                "The bot's operator manages this group's settings (groups.self_service is "
                "off). /group show tells what applies here."
            )
        if platform_admin is not None and await platform_admin():
            return None
        return (
            "Only this group's owner and admins (and the bot's configured shared admins) may "
            "change its settings. /group show tells what applies here."
        )

    def _show(self, settings: GroupSettings) -> str:
        where = "this topic" if settings.places.topic else "this group"
        lines = [f"Settings for {where} (and where each comes from):"]
        config = self._config
        for name, configured in (
            (Name.PINS, "on" if config.pins.enable_in_group else "off"),
            (Name.MODEL, config.llm.called),
            (Name.TRIGGER, configured_trigger(config, settings.places.group)),
            (
                Name.BUDGET_DAILY,
                setting_value(Name.BUDGET_DAILY.value, config.budgets.group_daily_tokens),
            ),
            (
                Name.BUDGET_MONTHLY,
                setting_value(Name.BUDGET_MONTHLY.value, config.budgets.group_monthly_tokens),
            ),
        ):
            value, source = settings.value(name)
            shown = configured if source is Source.CONFIG else setting_value(name.value, value)
            lines.append(f"- {name.value}: {shown} (from the {source.value})")
        for name, listed in (
            (Name.ADMINS, config.pins.group_shared_admin_ids),
            (Name.STRONG, config.pins.group_strong_user_ids),
        ):
            value, source = settings.value(name)
            own = setting_value(name.value, value) if source is not Source.CONFIG else "nobody"
            lines.append(
                f"- {name.value}: {own} (from the {source.value}), and from the config: "
                f"{', '.join(listed) or 'nobody'}"
            )
        return "\n".join(lines)

    async def _change(
        self,
        context: MessageContext,
        places: Places,
        command: GroupCommand,
        mentioned_users: Sequence[tuple[str, str]] = (),
    ) -> Reply:
        person = shown = command.person
        if command.verb in ("add", "remove") and command.person is not None:
            named = _named(command.person, mentioned_users)
            if isinstance(named, Reply):
                return named
            person, shown = named
        if command.verb in ("add", "remove") and person is None:
            person = shown = await _replied_author(context.replied)
            if person is None:
                return Reply.refused(
                    "Whom? Reply to their message with the command, mention them, or give "
                    "their id (they can see it with /whoami)."
                )
        return await self.change(
            places,
            replace(command, person=person),
            Author(context.actor, Channel.COMMAND),
            shown=shown,
        )

    async def change(
        self, places: Places, command: GroupCommand, author: Author, *, shown: str | None = None
    ) -> Reply:
        """Make command's change (set, add, remove, reset; a list's person given) at places
        for author, reviewed as every change is (a model of llm.models, budgets within the
        operator's caps), written once with its version and audit entry: `/group` from the
        chat, and the web page. The reply says what was done, or why nothing was."""
        person = command.person
        if command.verb in ("add", "remove") and person is None:
            return Reply.refused("Whom? Give their id (they can see it with /whoami).")
        if command.verb in ("add", "remove") and not _USER.fullmatch(person or ""):
            return Reply.refused(
                f"'{person}' is not a user id. Give their id (they can see it with /whoami)."
            )
        shown = shown or person
        for _ in range(_ATTEMPTS):
            settings = await self.settings(places)
            wanted = self._wanted(settings, command, person)
            if isinstance(wanted, Reply):
                return wanted
            if problem := self._review(wanted):
                return Reply.refused(problem)
            change = SettingChange(
                places.here,
                places.group,
                wanted,
                author,
                {name: settings.own(Name(name)) for name in wanted},
                uuid.uuid4().hex,
            )
            try:
                changed = await self._store.apply_settings(change, now=self._clock())
            except Conflict:
                continue
            return Reply(self._done(places, command, wanted, changed, shown))
        return Reply.failed("The settings changed while saving; nothing was saved. Try again.")

    def _wanted(
        self, settings: GroupSettings, command: GroupCommand, person: str | None
    ) -> dict[str, str | None] | Reply:
        if command.verb == "reset":
            stored = settings.topic if settings.places.topic else settings.group
            return {name: None for name in stored}
        name = command.name
        assert name is not None
        if command.verb in ("add", "remove"):
            now = stored_value(settings.own(name))
            people = [str(p) for p in now] if isinstance(now, list) else []
            if command.verb == "add" and person not in people:
                people.append(person or "")
            elif command.verb == "remove":
                if person not in people:
                    return Reply.refused(f"{person} is not among this chat's {name.value} here.")
                people.remove(person or "")
            return {name.value: encode(sorted(people)) if people else None}
        return {name.value: None if command.value is None else encode(command.value)}

    def _review(self, wanted: dict[str, str | None]) -> str | None:
        """What the operator does not allow in wanted (a model not in llm.models, a budget
        over the cap), or None."""
        config = self._config
        for name, stored in wanted.items():
            value = stored_value(stored)
            if value is None:
                continue
            if name == Name.MODEL and value not in config.llm.models:
                known = ", ".join(sorted(config.llm.models)) or "none (llm.models is empty)"
                return f"There is no model '{value}' here. The operator's models: {known}."
            cap = {
                Name.BUDGET_DAILY: config.groups.max_daily_tokens,
                Name.BUDGET_MONTHLY: config.groups.max_monthly_tokens,
            }.get(Name(name))
            if cap and (value == 0 or value > cap):
                key = "max_daily_tokens" if name == Name.BUDGET_DAILY else "max_monthly_tokens"
                return (
                    f"The operator allows a budget of at most {cap:,} tokens here "
                    f"(groups.{key}); ask for {cap:,} or less."
                )
        return None

    @staticmethod
    def _done(
        places: Places,
        command: GroupCommand,
        wanted: dict[str, str | None],
        changed: list[str],
        person: str | None,
    ) -> str:
        where = "this topic" if places.topic else "this group"
        if not changed:
            return f"Nothing to change: {where} is already set so."
        if command.verb == "reset":
            return f"Every setting of {where} is back to the config's. /group undo takes it back."
        name = command.name
        assert name is not None
        if command.verb == "add":
            return f"{person} is now among the {name.value} of {where}. /group undo takes it back."
        if command.verb == "remove":
            return f"{person} is no longer among the {name.value} of {where}."
        value = stored_value(wanted[name.value])
        shown = setting_value(name.value, value)
        return f"{name.value} for {where}: {shown}. /group undo takes it back."

    async def _undo(self, context: MessageContext, places: Places) -> Reply:
        return await self.undo(places, context.actor)

    async def undo(self, places: Places, actor: str) -> Reply:
        """Take back the last change at places (not an undo, not undone) as actor: `/group
        undo` from the chat, and the web page's Undo."""
        for _ in range(_ATTEMPTS):
            versions = await self._store.last_setting_operation(places.here)
            if not versions:
                return Reply.refused("There is nothing to undo here.")
            settings = await self.settings(places)
            wanted = {v.name: v.before for v in versions}
            seen = {v.name: settings.own(Name(v.name)) for v in versions}
            change = SettingChange(
                places.here,
                places.group,
                wanted,
                Author(actor, Channel.UNDO),
                seen,
                uuid.uuid4().hex,
            )
            try:
                await self._store.undo_settings(change, versions[0].op, now=self._clock())
            except Conflict:
                continue
            names = ", ".join(sorted(wanted))
            return Reply(
                f"Undone: {names} back as before. /group undo again takes back the one before."
            )
        return Reply.failed("The settings changed while saving; nothing was saved. Try again.")


def _named(written: str, mentioned_users: Sequence[tuple[str, str]]) -> tuple[str, str] | Reply:
    """The id of the person a command names, and how the reply shows them: the one mentioned
    by that text (with or without a leading @), else the id as written (a leading @ dropped);
    a Reply refusing a text that is neither."""
    bare = " ".join(written.removeprefix("@").split())
    ids = sorted(
        {user for text, user in mentioned_users if " ".join(text.removeprefix("@").split()) == bare}
    )
    if len(ids) == 1:
        return ids[0], f"{written} ({ids[0]})"
    if ids:
        return Reply.refused(
            f"Several people mentioned here are called {written} ({', '.join(ids)}); give the "
            "id of the one you mean."
        )
    if written.startswith("@"):  # a username (or a name) that carries no id here
        return Reply.refused(
            f"I cannot tell who {written} is: a username does not give me their id. Reply to "
            "one of their messages with the command, or give their id (they can see it with "
            "/whoami)."
        )
    if not _USER.fullmatch(bare):
        return Reply.refused(f"'{written}' is not a user id.\n{USAGE}")
    return bare, bare


async def _replied_author(replied: QuotedLookup | None) -> str | None:
    """The author of the message a command replies to, if the platform gives one."""
    quoted = await replied() if replied else None
    return quoted.author if quoted is not None and quoted.author else None
