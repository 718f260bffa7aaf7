"""The platform adapters: console, Telegram, Feishu. Each translates its platform's events into
core calls and the core's replies into platform messages."""

CONSOLE, FEISHU, TELEGRAM = "console", "feishu", "telegram"
PLATFORMS = (CONSOLE, FEISHU, TELEGRAM)  # the platforms whose keys the bot reads
