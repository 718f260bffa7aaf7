"""The core: people, blocks, decisions, the conversation and the commands, in layers from the
bottom up, reached by the platforms through one entry (`bot.core.entry`). It knows nothing of
Telegram or Feishu."""
