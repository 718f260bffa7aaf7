"""The commands people type: parsing `/pin` and `/sticky`, running them, their help and status;
`/export me` and `/forget me`; a group's setting changes in words."""

from bot.core.commands.help import GENERAL_HELP
from bot.core.commands.parse import ParseError, parse_pin, parse_sticky, split_command
from bot.core.commands.person import FORGET_TAP, PersonCommands, PersonData
from bot.core.commands.pins import PinService
from bot.core.commands.setting_words import setting_change, setting_value, stored_value

__all__ = [
    "FORGET_TAP",
    "GENERAL_HELP",
    "ParseError",
    "PersonCommands",
    "PersonData",
    "PinService",
    "parse_pin",
    "parse_sticky",
    "setting_change",
    "setting_value",
    "split_command",
    "stored_value",
]
