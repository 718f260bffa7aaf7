"""The `/pin` language: text after `/pin` becomes a typed command or a parse error."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from bot.core.blocks import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    Ends,
    parse_for,
    parse_keywords,
    parse_until,
    priority_problem,
)
from storage.models import Level


class Verb(StrEnum):
    """What a `/pin` command does."""

    ADD = "add"
    LEVEL = "level"
    LIST = "list"
    EDIT = "edit"
    REMOVE = "remove"
    IDLE = "idle"
    ACTIVATE = "activate"
    PIN = "pin"
    UNPIN = "unpin"
    CLEAR = "clear"
    HELP = "help"
    LOG = "log"
    PRIORITY = "priority"
    STATUS = "status"
    HISTORY = "history"
    UNDO = "undo"
    RESTORE = "restore"
    PROPOSALS = "proposals"
    APPROVE = "approve"
    REJECT = "reject"
    SENSITIVE = "sensitive"
    RAW = "raw"  # `/sticky raw <key>`: the stored text of a block, in a DM
    SUGGESTIONS = "suggestions"
    ACCEPT = "accept"
    DISMISS = "dismiss"
    WHY = "why"


@dataclass(frozen=True)
class PinCommand:
    """A parsed `/pin` command.

    For ADD, `level` is the level asked for, or None for the chat's default, and no `content`
    means the command replies to the message to pin. For LEVEL it is the
    target level; for PRIORITY and ADD `priority` the priority asked for (ADD: None means 0).
    `shared` says the command is about the group's shared blocks.
    """

    verb: Verb
    shared: bool = False
    label: str | None = None
    content: str | None = None
    level: Level | None = None
    pinned: bool = False
    confirm: bool = False
    count: int | None = None  # LOG: entries; RESTORE: the version (None: the one before)
    priority: int | None = None
    # ADD: add it sensitive; EDIT: make it sensitive too; SENSITIVE: what the block becomes
    sensitive: bool = False
    preview: bool = False  # STATUS: each block with its first characters (`/sticky`)
    # ADD, EDIT: the keywords the block waits for (None: not given; empty: `--when -`, sent
    # always) and its end (None: not given; Ends() for `--until -`, it no longer ends)
    when: tuple[str, ...] | None = None
    ends: Ends | None = None


@dataclass(frozen=True)
class ParseError:
    """A command that could not be understood, with the English text telling how to fix it."""

    message: str


_ENDS = "[--until <date> | --for <duration>]"
_ADD_OPTIONS = f"[--pinned] [--priority <n>] [--sensitive] [--when <keywords>] {_ENDS}"
_EDIT_OPTIONS = "[--sensitive] [--when <keywords>|-] [--until <date>|- | --for <duration>]"
USAGE: dict[str, str] = {
    "add": f"/pin add <label> <content> {_ADD_OPTIONS}",
    "add-strong": f"/pin add-strong <label> <content> {_ADD_OPTIONS}",
    "add-context": f"/pin add-context <label> <content> {_ADD_OPTIONS}",
    "level": "/pin level <label> strong|context",
    "priority": f"/pin priority <label> <n>  (n from {PRIORITY_MIN} to {PRIORITY_MAX})",
    "list": "/pin list",
    "status": "/pin status",
    "why": "/pin why",
    "edit": f"/pin edit <label> [<new content>] {_EDIT_OPTIONS}",
    "remove": "/pin remove <label>",
    "idle": "/pin idle <label>",
    "activate": "/pin activate <label>",
    "pin": "/pin pin <label>",
    "unpin": "/pin unpin <label>",
    "clear": "/pin clear  (then /pin clear confirm)",
    "help": "/pin help",
    "log": "/pin log [N]",
    "history": "/pin history <label>",
    "undo": "/pin undo",
    "restore": "/pin restore <label> [version]",
    "proposals": "/pin proposals",
    "approve": "/pin approve <n>",
    "reject": "/pin reject <n>",
    "sensitive": "/pin sensitive <label> [on|off]",
    "suggestions": "/pin suggestions",
    "accept": "/pin accept <n>",
    "dismiss": "/pin dismiss <n>",
}
_SHARED_ONLY = ("log", "proposals", "approve", "reject")
_PERSONAL_ONLY = ("suggestions", "accept", "dismiss")
LOG_DEFAULT = 10
LOG_MAX = 50

_ADD_LEVELS: dict[str, Level | None] = {
    "add": None,
    "add-strong": Level.STRONG,
    "add-context": Level.CONTEXT,
}
_LABEL_ONLY = {
    "remove": Verb.REMOVE,
    "idle": Verb.IDLE,
    "activate": Verb.ACTIVATE,
    "pin": Verb.PIN,
    "unpin": Verb.UNPIN,
}
_WHITESPACE = re.compile(r"\s+")
_COMMAND = re.compile(r"/(\S*)\s*(.*)", re.DOTALL)
PINNED_FLAG = "--pinned"
PRIORITY_FLAG = "--priority"
SENSITIVE_FLAG = "--sensitive"
WHEN_FLAG = "--when"
UNTIL_FLAG = "--until"
FOR_FLAG = "--for"
FLAGS = (PINNED_FLAG, PRIORITY_FLAG, SENSITIVE_FLAG, WHEN_FLAG, UNTIL_FLAG, FOR_FLAG)
EDIT_FLAGS = (SENSITIVE_FLAG, WHEN_FLAG, UNTIL_FLAG, FOR_FLAG)
_LONGEST_FLAG = max(len(flag) for flag in FLAGS)
# `--when=deploy` and a dash a phone made of `--` (`—when`): the flag as pinbot reads it.
_FLAG_FORMS = re.compile(
    r"(?<!\S)(?:--|[\u2012-\u2015\u2212])(pinned|priority|sensitive|when|until|for)\b(=?)",
    re.IGNORECASE,
)
# A date and a time given as two words to --until: read as a date, the time would be content.
_SPLIT_MOMENT = re.compile(r"(?<!\S)--until\s+(\d{4}-\d{2}-\d{2})\s+(\d{1,2}:\d{2})", re.I)
# Flags that take a value, with what the value looks like in an example.
_VALUED = {
    PRIORITY_FLAG: "--priority 5",
    WHEN_FLAG: '--when deploy,"release notes"',
    UNTIL_FLAG: "--until 2026-12-24",
    FOR_FLAG: "--for 3d",
}
# Flags that may not be left inside the content: it would be saved with them, as words.
_NOT_IN_CONTENT = (SENSITIVE_FLAG, WHEN_FLAG, UNTIL_FLAG, FOR_FLAG)
# A flag's value: one word, where double quotes keep spaces inside it (`"release notes",x`).
_VALUE = r'(?:"[^"]*"|[^\s"])+'
_LEADING_VALUE = re.compile(_VALUE)
_TRAILING_VALUE = re.compile(rf"(?:^|\s)(\S+)\s+({_VALUE})$")
LITERAL_MARK = "--"
# A word that reads as a flag: two dashes, then a letter.
_FLAG_LIKE = re.compile(r"--[^\W\d_][\w-]*")
_NUMBER_LIKE = re.compile(r"[+-]?[0-9]+")
_MAX_EDITS = 2  # a trailing --word this close to a flag is taken for a misspelling of it


def split_command(text: str) -> tuple[str, str | None, str]:
    """`/name@bot rest` → (name, bot or None, rest); name is case-folded."""
    match = _COMMAND.match(text)
    if match is None:
        return "", None, text
    name, _, bot = match.group(1).partition("@")
    return name.casefold(), bot or None, match.group(2)


def _split_first(text: str) -> tuple[str, str]:
    """The first whitespace-separated word and everything after the whitespace that follows it."""
    text = text.lstrip()
    match = _WHITESPACE.search(text)
    if match is None:
        return text, ""
    return text[: match.start()], text[match.end() :]


def _prefix(shared: bool, usage: str) -> str:
    return usage.replace("/pin ", "/pin shared ", 1) if shared else usage


def _usage_error(name: str, shared: bool, problem: str) -> ParseError:
    return ParseError(f"{problem}\nUsage: {_prefix(shared, USAGE[name])}")


def _split_last(text: str) -> tuple[str, str]:
    """Everything before the last whitespace-separated word (without the whitespace), and that
    word; text must hold a word."""
    text = text.rstrip()
    words = text.rsplit(maxsplit=1)  # not a search for `\S+$`: quadratic in a long word
    start = len(text) - len(words[-1]) if words else len(text)
    return text[:start].rstrip(), text[start:]


def _edits(a: str, b: str) -> int:
    """The Levenshtein distance between two short words."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


def _flag(word: str) -> str | None:
    """The flag this word is (flags ignore case, like subcommands), or None."""
    folded = word.casefold()
    return folded if folded in FLAGS else None


def meant_flags(word: str, allowed: tuple[str, ...] = FLAGS) -> tuple[str, ...]:
    """The flags (of allowed) a `--word` that is none was probably meant to be: those it begins
    (`--prio`) or is within two edits of (`--pined`); empty for any other word (`--verbose` is
    content)."""
    if len(word) > _LONGEST_FLAG + _MAX_EDITS or not _FLAG_LIKE.fullmatch(word) or _flag(word):
        return ()
    folded = word.casefold()
    begun = tuple(flag for flag in allowed if flag.startswith(folded))
    return begun or tuple(flag for flag in allowed if _edits(folded, flag) <= _edits_allowed(flag))


def _edits_allowed(flag: str) -> int:
    """How far a word may be from flag to be taken for its misspelling: short flags are close
    to ordinary words (`--for` to `--fork`), so fewer edits for them."""
    letters = len(flag) - 2
    return _MAX_EDITS if letters >= 6 else 1 if letters >= 4 else 0


@dataclass(frozen=True)
class _Content:
    """An add command's content and its flags."""

    text: str
    pinned: bool = False
    priority: str | None = None  # as written; checked by the caller
    sensitive: bool = False
    values: dict[str, str] | None = None  # --when, --until, --for as written


@dataclass(frozen=True)
class _FlagProblem:
    """Flags that cannot be read: missing a value, repeated, misspelled, or inside the content."""

    problem: str


def _misspelled(word: str, meant: tuple[str, ...]) -> _FlagProblem:
    return _FlagProblem(f"'{word}' is not a flag. Did you mean {' or '.join(meant)}?")


def _twice(flag: str) -> _FlagProblem:
    return _FlagProblem(f"{flag} is given twice; give each flag once.")


class _Flags:
    """The flags read so far from either end of a command's content, each at most once."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed
        self.pinned = False
        self.sensitive = False
        self.values: dict[str, str] = {}

    def flag(self, word: str) -> str | None:
        """The allowed flag this word is, or None."""
        flag = _flag(word)
        return flag if flag in self.allowed else None

    def take(self, flag: str, value: str | None = None) -> _FlagProblem | None:
        """Record flag (a valued one with its value), or the problem of giving it twice."""
        if flag == PINNED_FLAG:
            if self.pinned:
                return _twice(flag)
            self.pinned = True
        elif flag == SENSITIVE_FLAG:
            if self.sensitive:
                return _twice(flag)
            self.sensitive = True
        else:
            if flag in self.values:
                return _twice(flag)
            self.values[flag] = value or ""
        return None


def _needs_value(flag: str) -> _FlagProblem:
    what = "a number" if flag == PRIORITY_FLAG else "a value"
    return _FlagProblem(f"{flag} needs {what} after it, e.g. {_VALUED[flag]}.")


def _leading_flags(content: str, flags: _Flags) -> str | _FlagProblem:
    """Take the flags off the start of content (right after the label), as _trailing_flags
    does off its end: what is left, or the problem."""
    while content:
        first, after = _split_first(content)
        flag, value = flags.flag(first), None
        if flag in _VALUED:
            found = _LEADING_VALUE.match(after)
            value = found.group() if found else ""
            after = after[len(value) :].lstrip()
            if not value or (flag == PRIORITY_FLAG and not _NUMBER_LIKE.fullmatch(value)):
                return _needs_value(flag)
        elif flag is None:
            if meant := meant_flags(first, flags.allowed):
                return _misspelled(first, meant)
            break
        if problem := flags.take(flag, value):
            return problem
        content = after
    return content


def _trailing_flags(content: str, flags: _Flags) -> str | _FlagProblem:
    """Take the flags off the end of content, last first: `--pinned`, `--sensitive` and the
    valued ones with their value (those allowed) in any order, each at most once. A valued
    flag without its value, a repeated flag and a misspelled one (see meant_flags) are
    problems; anything else ends the flags and is content."""
    while content:
        valued = _TRAILING_VALUE.search(content)
        if valued and (flag := flags.flag(valued.group(1))) in _VALUED:
            value = valued.group(2)
            if flag == PRIORITY_FLAG and not _NUMBER_LIKE.fullmatch(value):
                return _needs_value(flag)
            if problem := flags.take(flag, value):
                return problem
            content = content[: valued.start()].rstrip()
            continue
        head, last = _split_last(content)
        flag = flags.flag(last)
        if flag in (PINNED_FLAG, SENSITIVE_FLAG):
            if problem := flags.take(flag):
                return problem
            content = head
            continue
        if flag in _VALUED:
            return _needs_value(flag)
        if meant := meant_flags(last, flags.allowed):
            return _misspelled(last, meant)
        if not head:
            break
        _rest, before = _split_last(head)
        meant = tuple(flag for flag in meant_flags(before, flags.allowed) if flag in _VALUED)
        if meant and (meant != (PRIORITY_FLAG,) or _NUMBER_LIKE.fullmatch(last)):
            return _misspelled(before, meant)
        break
    return content


def _parse_content(rest: str, allowed: tuple[str, ...] = FLAGS) -> _Content | _FlagProblem:
    """Split content from its flags (those allowed), right after the label or at the end,
    honouring a leading `--` literal marker after which everything is content. A
    `--sensitive` left inside the content is a problem: the user meant the block to be masked,
    and it would be saved as it is, with the word."""
    first, after = _split_first(rest)
    if first == LITERAL_MARK:
        return _Content(after.strip())
    rest = _FLAG_FORMS.sub(lambda m: f"--{m.group(1)}{' ' if m.group(2) else ''}", rest)
    if split := _SPLIT_MOMENT.search(rest):
        day, time = split.groups()
        return _FlagProblem(
            f"--until {day} {time}: write the date and the time as one word, "
            f"--until {day}T{time} (UTC; add an offset such as +08:00 for another zone)."
        )
    flags = _Flags(allowed)
    content = _leading_flags(rest.strip(), flags)
    if isinstance(content, str):
        content = _trailing_flags(content.strip(), flags)
    if isinstance(content, _FlagProblem):
        return content
    inside = [w for w in content.split() if w.casefold() in _NOT_IN_CONTENT and flags.flag(w)]
    if inside:
        quotes = ' Keywords with spaces go in double quotes: --when "release notes",deploy.'
        return _FlagProblem(
            f"{inside[0]} is inside the content, where it is not read as a flag; put it "
            "right after the label or at the end."
            + (quotes if inside[0].casefold() == WHEN_FLAG else "")
        )
    values = flags.values
    return _Content(
        content.strip(), flags.pinned, values.get(PRIORITY_FLAG), flags.sensitive, values
    )


def _priority(text: str) -> int | ParseError:
    """A priority as written by a user, or the error naming the allowed range."""
    value = int(text) if re.fullmatch(r"[+-]?[0-9]{1,7}", text) else None
    problem = priority_problem(value)
    if problem is not None or value is None:
        return ParseError(problem.reason if problem else "")
    return value


def _flag_error(name: str, shared: bool, flags: _FlagProblem) -> ParseError:
    literal = _prefix(shared, f"/pin {name} <label> -- <content>")
    return _usage_error(
        name,
        shared,
        f"{flags.problem}\nTo save text like this as it is, put -- after the label: {literal}",
    )


def _when_and_ends(
    values: dict[str, str], *, clearing: bool
) -> tuple[tuple[str, ...] | None, Ends | None] | str:
    """The keywords and the end the flags ask for (None: not given), or what is wrong with
    them; clearing: `-` may take either back (an edit)."""
    when: tuple[str, ...] | None = None
    if (keywords := values.get(WHEN_FLAG)) is not None:
        if keywords == "-" and clearing:
            when = ()
        else:
            parsed = parse_keywords(keywords)
            if isinstance(parsed, str):
                return f"{WHEN_FLAG}: {parsed}."
            when = tuple(parsed)
    until, for_ = values.get(UNTIL_FLAG), values.get(FOR_FLAG)
    if until is not None and for_ is not None:
        return f"Give {UNTIL_FLAG} or {FOR_FLAG}, not both."
    ends: Ends | str | None = None
    if until is not None:
        if until == "-" and not clearing:
            return f"{UNTIL_FLAG} - takes an end back: it is for /pin edit."
        ends = parse_until(until.strip('"'))
    elif for_ is not None:
        ends = parse_for(for_.strip('"'))
    if isinstance(ends, str):
        return f"{UNTIL_FLAG if until is not None else FOR_FLAG}: {ends}."
    return when, ends


def _parse_add(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    if not label:
        return _usage_error(name, shared, "The block needs a label and content.")
    content = _parse_content(after)
    if isinstance(content, _FlagProblem):
        return _flag_error(name, shared, content)
    priority = _priority(content.priority) if content.priority is not None else None
    if isinstance(priority, ParseError):
        return _usage_error(name, shared, priority.message)
    timing = _when_and_ends(content.values or {}, clearing=False)
    if isinstance(timing, str):
        return _usage_error(name, shared, timing)
    return PinCommand(
        Verb.ADD,
        shared=shared,
        label=label,
        content=content.text or None,  # none: the content is the message replied to
        level=_ADD_LEVELS[name],
        pinned=content.pinned,
        priority=priority,
        sensitive=content.sensitive,
        when=timing[0],
        ends=timing[1],
    )


def _parse_sensitive(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    value, extra = _split_first(after)
    if not label or value.casefold() not in ("", "on", "off") or extra.strip():
        problem = "sensitive needs a label, then 'on' (the default) or 'off'."
        return _usage_error(name, shared, problem)
    sensitive = value.casefold() != "off"
    return PinCommand(Verb.SENSITIVE, shared=shared, label=label, sensitive=sensitive)


def _parse_priority(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    value, extra = _split_first(after)
    if not label or not value or extra.strip():
        return _usage_error(name, shared, "priority needs a label and a whole number.")
    priority = _priority(value)
    if isinstance(priority, ParseError):
        return _usage_error(name, shared, priority.message)
    return PinCommand(Verb.PRIORITY, shared=shared, label=label, priority=priority)


def _parse_list(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    if rest.strip():
        return _usage_error(name, shared, f"{name} takes no arguments.")
    return PinCommand(Verb(name), shared=shared)


def _parse_clear(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    extra = rest.strip()
    if not extra:
        return PinCommand(Verb.CLEAR, shared=shared)
    if extra.casefold() == "confirm":
        return PinCommand(Verb.CLEAR, shared=shared, confirm=True)
    return _usage_error(name, shared, "clear takes only the word 'confirm'.")


def _parse_label_only(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    if not label:
        return _usage_error(name, shared, "Which block? Give its label.")
    if after.strip():
        return _usage_error(name, shared, f"{name} takes only a label.")
    return PinCommand(_LABEL_ONLY[name], shared=shared, label=label)


def _parse_edit(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    parsed = _parse_content(after, EDIT_FLAGS)
    if label and isinstance(parsed, _FlagProblem):
        return _flag_error(name, shared, parsed)
    content = parsed.text if isinstance(parsed, _Content) else ""
    values = (parsed.values if isinstance(parsed, _Content) else None) or {}
    if not label or not (content or values):
        return _usage_error(
            name, shared, "edit needs a label and the new content, or --when, --until or --for."
        )
    timing = _when_and_ends(values, clearing=True)
    if isinstance(timing, str):
        return _usage_error(name, shared, timing)
    sensitive = isinstance(parsed, _Content) and parsed.sensitive
    return PinCommand(
        Verb.EDIT,
        shared=shared,
        label=label,
        content=content or None,  # none: the content stays as it is
        sensitive=sensitive,
        when=timing[0],
        ends=timing[1],
    )


def _parse_level(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    target, extra = _split_first(after)
    if not label or target.casefold() not in set(Level) or extra.strip():
        return _usage_error(name, shared, "level needs a label and 'strong' or 'context'.")
    return PinCommand(Verb.LEVEL, shared=shared, label=label, level=Level(target.casefold()))


def _parse_history(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    if not label or after.strip():
        return _usage_error(name, shared, "history needs the label of one block.")
    return PinCommand(Verb.HISTORY, shared=shared, label=label)


def _parse_restore(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    label, after = _split_first(rest)
    version, extra = _split_first(after)
    if not label or extra.strip():
        return _usage_error(name, shared, "restore needs a label, and may take a version number.")
    if version and not (version.isascii() and version.isdigit() and 1 <= int(version) <= 10**6):
        return _usage_error(
            name, shared, f"The version is a number /pin history {label} shows, not {version!r}."
        )
    return PinCommand(
        Verb.RESTORE, shared=shared, label=label, count=int(version) if version else None
    )


def _parse_proposals(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    if not shared:
        usage = _prefix(True, USAGE[name])
        return ParseError(f"Proposals are for a group's shared blocks.\nUsage: {usage}")
    if name == "proposals":
        if rest.strip():
            return _usage_error(name, shared, "proposals takes nothing after it.")
        return PinCommand(Verb.PROPOSALS, shared=True)
    number = rest.strip()
    if not (number.isascii() and number.isdigit() and 1 <= int(number) <= 10**9):
        return _usage_error(
            name, shared, f"{name} needs the number of a proposal (/pin shared proposals)."
        )
    return PinCommand(Verb(name), shared=True, count=int(number))


def _parse_suggestions(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    if shared:
        return ParseError(
            "Pin suggestions are for your own blocks in a DM; a group's become proposals.\n"
            "Usage: /pin shared proposals"
        )
    if name == "suggestions":
        if rest.strip():
            return _usage_error(name, shared, "suggestions takes nothing after it.")
        return PinCommand(Verb.SUGGESTIONS)
    number = rest.strip()
    if not (number.isascii() and number.isdigit() and 1 <= int(number) <= 10**9):
        return _usage_error(
            name, shared, f"{name} needs the number of a suggestion (/pin suggestions)."
        )
    return PinCommand(Verb(name), count=int(number))


def _parse_help(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    return PinCommand(Verb.HELP, shared=shared)


def _parse_log_command(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    return _parse_log(rest, shared)


_Parser = Callable[[str, str, bool], PinCommand | ParseError]
_PARSERS: dict[str, _Parser] = {
    **dict.fromkeys(_ADD_LEVELS, _parse_add),
    **dict.fromkeys(_LABEL_ONLY, _parse_label_only),
    "help": _parse_help,
    "log": _parse_log_command,
    "list": _parse_list,
    "status": _parse_list,
    "why": _parse_list,
    "undo": _parse_list,
    "history": _parse_history,
    "restore": _parse_restore,
    **dict.fromkeys(("proposals", "approve", "reject"), _parse_proposals),
    **dict.fromkeys(("suggestions", "accept", "dismiss"), _parse_suggestions),
    "priority": _parse_priority,
    "sensitive": _parse_sensitive,
    "clear": _parse_clear,
    "edit": _parse_edit,
    "level": _parse_level,
}


def _parse_sub(name: str, rest: str, shared: bool) -> PinCommand | ParseError:
    parser = _PARSERS.get(name)
    return _unknown(name, shared) if parser is None else parser(name, rest, shared)


def _parse_log(rest: str, shared: bool) -> PinCommand | ParseError:
    if not shared:
        return ParseError(
            "The change log is kept for shared blocks only.\nUsage: /pin shared log [N]"
        )
    count = rest.strip()
    if not count:
        return PinCommand(Verb.LOG, shared=True, count=LOG_DEFAULT)
    if not count.isascii() or not count.isdigit() or not 1 <= int(count) <= LOG_MAX:
        return _usage_error("log", shared, f"N must be a whole number from 1 to {LOG_MAX}.")
    return PinCommand(Verb.LOG, shared=True, count=int(count))


# Words people reach for that are not subcommands, and the subcommand that does what they mean.
SYNONYMS: dict[str, str] = {
    **dict.fromkeys(("delete", "del", "rm"), "remove"),
    **dict.fromkeys(("show", "ls"), "list"),
    "on": "activate",
    "off": "idle",
    **dict.fromkeys(("info", "stats"), "status"),
    "create": "add",
    "update": "edit",
}


def _unknown(name: str, shared: bool) -> ParseError:
    only = _PERSONAL_ONLY if shared else _SHARED_ONLY
    known = [name for name in USAGE if name not in only]
    known += [] if shared else ["shared"]
    # A typo of a synonym counts too ("delet"), but not of the two-letter ones ("of" is not "off").
    words = [*known, *(word for word in SYNONYMS if len(word) > 3)]
    close = difflib.get_close_matches(name, words, n=1)
    guess = SYNONYMS.get(name) or next((SYNONYMS.get(word, word) for word in close), None)
    hint = ""
    if guess is not None:
        hint = f" Did you mean '{guess}'?"
        if guess in USAGE:
            hint += f" Usage: {_prefix(shared, USAGE[guess])}."
    where = "/pin shared help" if shared else "/pin help"
    return ParseError(f"Unknown subcommand '{name}'.{hint} Send {where} for the list.")


def parse_pin(arguments: str) -> PinCommand | ParseError:
    """Parse the text that follows `/pin`; never raises."""
    name, rest = _split_first(arguments)
    if not name:
        return PinCommand(Verb.HELP)
    shared = name.casefold() == "shared"
    if shared:
        name, rest = _split_first(rest)
        if not name:
            return PinCommand(Verb.HELP, shared=True)
        if name.casefold() == "shared":
            return ParseError("'shared' appears twice. Usage: /pin shared <subcommand>")
    return _parse_sub(name.casefold(), rest, shared)


STICKY_USAGE = (
    "Usage: /sticky  (your blocks, each with its first characters, and what they cost), "
    "/sticky shared (this group's shared blocks), /sticky raw <key> (a block as stored, in a "
    "DM), /sticky delete <key> (remove a block, as /pin remove)"
)


def parse_sticky(arguments: str) -> PinCommand | ParseError:
    """The Sticky Context design's commands: `/sticky` (the status view of `/pin status`, each
    block with a preview), `/sticky shared` (`/pin shared status`, likewise), `/sticky raw <key>`
    (a block's stored text) and `/sticky delete <key>` (`/pin remove <key>`)."""
    words = arguments.split()
    folded = [word.casefold() for word in words]
    if not words:
        return PinCommand(Verb.STATUS, preview=True)
    if folded == ["shared"]:
        return PinCommand(Verb.STATUS, shared=True, preview=True)
    if folded[0] in ("raw", "delete") and len(words) == 2:
        verb = Verb.RAW if folded[0] == "raw" else Verb.REMOVE
        return PinCommand(verb, label=words[1])
    if folded[0] in ("raw", "delete"):
        return ParseError(f"/sticky {folded[0]} needs the key of one block.\n{STICKY_USAGE}")
    return ParseError(STICKY_USAGE)
