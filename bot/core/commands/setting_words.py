"""A group's own settings (`/group`, bot.core.groups) as the audit trail records them, in words:
a value ("on", "5,000 tokens", "the config's"), and a change ("set trigger: mention → all",
"added 7 to admins (topic 12)"), as `/pin shared log` and the web page show them; and the
settings that name people, from which a forgotten person is taken out."""

from __future__ import annotations

import json
from typing import Any

from bot.core.people import topic_of
from storage.models import AuditEntry, Channel

CONFIGS = "the config's"  # a value unset: the config's applies
PEOPLE_SETTINGS = ("admins", "strong")  # the settings whose value is a list of sender ids
FORMER = "a former member"  # who a forgotten person is in what stays a group's


def stored_value(stored: str | None) -> Any:
    """A setting's value as stored (JSON; None: unset, or unreadable)."""
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except ValueError:
        return None


def setting_value(name: str, value: Any) -> str:
    """A setting's value in words (None: unset, the config's)."""
    if value is None:
        return CONFIGS
    if name == "pins":
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "nobody"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,} tokens" if value else "no budget"
    return str(value)


def setting_change(entry: AuditEntry) -> str:
    """A setting's change as its audit entry records it, in words. The entry's label is the
    setting's name, followed by the rest of a topic's key when a topic's; its contents are
    the values before and after as stored (None: unset)."""
    name, mark, rest = entry.label.partition(":")
    topic = topic_of(f"{entry.group_scope}{mark}{rest}") if mark else None
    where = f" (topic {topic or rest})" if mark else ""
    old, new = stored_value(entry.old_content), stored_value(entry.new_content)
    if name in PEOPLE_SETTINGS:
        was = [str(v) for v in old] if isinstance(old, list) else []
        now = [str(v) for v in new] if isinstance(new, list) else []
        added = [p for p in now if p not in was]
        gone = [p for p in was if p not in now]
        if added and not gone:
            return f"added {', '.join(added)} to {name}{where}"
        if gone and not added:
            return f"removed {', '.join(gone)} from {name}{where}"
        if not added and not gone:  # the one changed was forgotten since (their id went)
            if entry.channel is Channel.FORGET:
                return f"removed {FORMER} from {name}{where}"
            return f"added or removed {FORMER} in {name}{where}"
    return f"set {name}{where}: {setting_value(name, old)} → {setting_value(name, new)}"
