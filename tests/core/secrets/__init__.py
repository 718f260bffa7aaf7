"""Tests of bot.core.secrets, the one recogniser of secrets."""
