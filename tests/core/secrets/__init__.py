"""Tests of bot.secrets, the one recogniser of secrets."""
