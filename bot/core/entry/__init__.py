"""The core's one entry: `Pinbot` takes every platform event with its surface; the values
adapters hand it and get back."""

from bot.core.entry.inbox import Deliver
from bot.core.entry.incoming import SILENT, Incoming, Surface
from bot.core.entry.pinbot import Pinbot

__all__ = [
    "SILENT",
    "Deliver",
    "Incoming",
    "Pinbot",
    "Surface",
]
