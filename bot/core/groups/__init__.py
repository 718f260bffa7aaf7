"""Groups that run themselves: the settings a group (or a forum topic) gives itself with
`/group`, what applies to one message there, and who may change them."""

from bot.core.groups.commands import GroupCommands, parse_group
from bot.core.groups.settings import GroupSettings, Name, Places, Source, configured_trigger

__all__ = [
    "GroupCommands",
    "GroupSettings",
    "Name",
    "Places",
    "Source",
    "configured_trigger",
    "parse_group",
]
