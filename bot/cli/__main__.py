"""`python -m bot.cli`: the same as the `pinbot` command."""

import sys

from bot.cli import main

sys.exit(main())
