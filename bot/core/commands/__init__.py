"""The commands people type: parsing `/pin` and `/sticky`, running them, their help and status."""

from bot.core.commands.help import GENERAL_HELP
from bot.core.commands.parse import ParseError, parse_pin, parse_sticky, split_command
from bot.core.commands.person import FORGET_TAP, PersonCommands, PersonData
from bot.core.commands.pins import PinService

__all__ = [
    "FORGET_TAP",
    "GENERAL_HELP",
    "ParseError",
    "PersonCommands",
    "PersonData",
    "PinService",
    "parse_pin",
    "parse_sticky",
    "split_command",
]
