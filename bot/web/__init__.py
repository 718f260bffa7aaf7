"""The operator's web page (`pinbot web`): every scope, block, change and token at a glance,
read from the same store the bot uses."""
