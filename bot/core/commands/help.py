"""The English help texts of pinbot's commands."""

from __future__ import annotations

from bot.core.blocks import PRIORITY_MAX, PRIORITY_MIN, default_level

_PERSONAL = """\
Pinned blocks are short rules (strong) or reference notes (context) sent to the model with every \
message, in this chat only.

/pin add <label> <content>           Add a block ({default} here)
/pin add-strong <label> <content>    Add a strong block (rules for the model){strong_note}
/pin add-context <label> <content>   Add a context block (reference material)
/pin add <label> <content> --pinned  Add a block kept until you remove it
/pin add <label> <content> --priority <n>  Add a block with a priority ({low} to {high})
/pin add <label> <content> --sensitive  Add a block the model and listings see redacted
/pin add <label> <content> --when deploy,"release notes"  Sent only when a message mentions one
/pin add <label> <content> --until 2026-12-24  (or --for 3d)  Not sent after then (UTC)
/pin add <label> -- <content>        Everything after -- is content, even a final --pinned
/pin add <label>  (as a reply)       Pin the message you reply to, or the part you quote
/pin level <label> strong|context    Change a block's level
/pin priority <label> <n>            Change a block's priority (higher is sent first)
/pin sensitive <label> [on|off]      Mask (or stop masking) addresses and secrets in it
/pin list                            Show your blocks
/pin status                          Each block sent, its characters and tokens; idle clean-up
/pin edit <label> <new content> [--sensitive]  Replace a block's content
/pin edit <label> --when <keywords>|-  --until <date>|-  --for <duration>  Change when it goes
/pin why                             Which blocks went with your last message, and why
/pin remove <label>                  Delete a block
/pin idle|activate|pin|unpin <label> Pause, resume, keep or release a block
/pin clear                           Count the blocks a clear would delete
/pin clear confirm                   Delete all your blocks here
/pin history <label>                 A block's versions, newest first (also of a removed one)
/pin undo                            Take back your last change here (again: the one before)
/pin restore <label> [version]       Bring back a version (default: the one before now)
{suggestion_lines}{shared_line}/pin help                            This text

Labels: up to {label_limit} characters, no spaces, matched ignoring case. Idle blocks are not sent \
and are deleted after a while; pinned blocks stay until you remove them. Every change is kept for \
a while: undo and restore bring blocks back, removed ones too. A sensitive block is kept whole, \
but the model, /pin list and /sticky see its addresses and secrets masked; /sticky raw <label> \
shows it as stored, in a private chat. /sticky lists your blocks with their first characters; \
/sticky delete <label> is /pin remove. A block with keywords (--when) goes only when your \
message, or one of your last few, mentions one (whole words; inside words in Chinese and \
Japanese); a block with an end stops then, you are told once, and it goes idle."""

_SUGGESTION_LINES = """\
/pin suggestions                     What the model suggests pinning (at compaction)
/pin accept|dismiss <n>              Pin a suggestion, or forget it for good
"""

_SHARED = """\
Shared blocks apply whenever anyone speaks in this group. Everyone may view them; only shared \
admins may change them.

/pin shared list                            Show the group's shared blocks
/pin shared status                          Each shared block sent, its characters and tokens
/pin shared add <label> <content>           Add a shared context block
/pin shared add-strong <label> <content>    Add a shared strong block
/pin shared add-context <label> <content>   Add a shared context block
/pin shared add <label>  (as a reply)       Pin the message you reply to as a shared block
/pin shared level <label> strong|context    Change a shared block's level
/pin shared priority <label> <n>            Change a shared block's priority
/pin shared sensitive <label> [on|off]      Mask (or stop masking) a shared block's secrets
/pin shared edit <label> <new content>      Replace a shared block's content
/pin shared add|edit <label> ... --when <keywords>  --until <date>  --for <duration>
/pin shared remove <label>                  Delete a shared block
/pin shared idle|activate|pin|unpin <label> Change a shared block's state
/pin shared clear  /  /pin shared clear confirm
/pin shared log [N]                         The latest changes to the shared blocks
/pin shared history <label>                 A shared block's versions, newest first
/pin shared undo                            Take back the last change to the shared blocks
/pin shared restore <label> [version]       Bring back a version of a shared block
/pin shared proposals                       The model's proposals waiting for a decision
/pin shared approve <n>  /  reject <n>      Decide one (shared admins; or tap its buttons)
/pin shared help                            This text

On Telegram, when the operator turns it on, a message a shared admin pins in the group becomes \
the shared block 'chat-pin' (idle again once nothing is pinned)."""

GENERAL_HELP = """\
Talk to me and I pass your message to the model, together with your pinned blocks.
/pin help   How to pin rules and reference notes the model always sees
/pin status What your pinned blocks cost every request (also /sticky)
/reset      Start a new conversation (also /new); pinned blocks stay
/whoami     Your ids here, and what you may do
/usage      Your model usage today and this month, and your budget
/group      In a group: its own settings (pins, admins, model, trigger, budget), for its admins
/export me  Everything I hold about you, as a file (in a direct chat)
/forget me  Remove everything I hold about you, for good (in a direct chat)
/start and /help show this text."""


def pin_help(*, shared: bool, group: bool, label_limit: int = 20) -> str:
    """Help for `/pin` (personal) or `/pin shared`, worded for a group or a private chat."""
    if shared:
        return _SHARED
    return _PERSONAL.format(
        default=default_level(group).value,
        strong_note="; needs permission in groups" if group else "",
        shared_line="/pin shared help                     Shared blocks of this group\n"
        if group
        else "",
        suggestion_lines="" if group else _SUGGESTION_LINES,
        label_limit=label_limit,
        low=PRIORITY_MIN,
        high=PRIORITY_MAX,
    )
