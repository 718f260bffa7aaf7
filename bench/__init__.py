"""pinbot's benchmark: the bot's own cost per message against the floor and the seeds' approach."""
