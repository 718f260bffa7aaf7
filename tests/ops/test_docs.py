"""What the docs show still exists: `pinbot` commands, their flags, configuration keys, links.

README.md and docs/*.md show command lines and configuration keys. Each command line is parsed by
pinbot's own argparse parser and each key is looked up in (and YAML is validated against) the
pydantic schema, so a renamed subcommand, a misspelt flag or a key that does not exist fails here
instead of in a reader's terminal. Everything runs in-process, without network.

Where things are found (fenced blocks tagged `text` are prose laid out in columns, such as the
module map or the `/pin` summary, and are skipped):

- **Commands**: every `pinbot` word followed by a space or the end of the line, in a fenced code
  block (also in comments, as in the nginx example) or in inline code; the command runs to the
  end of the line or to `#`, `&&`, `;`, ` | ` or `)`. `pinbot` may follow a `…/bin/` path
  (`.venv/bin/pinbot`); what stands before it (`VAR=value`) is ignored.
- **Keys**: every ```yaml block is pinbot configuration: each top-level entry is validated with
  `parse_config`, as a config file would be (unknown keys, types, ranges). In inline code and in
  other code blocks, every dotted name whose first part is a config section (`pins.max_total_chars`,
  `storage.url_env`) must be a key of the schema, and inline code of the form `section.key: value`
  must also be a valid value. A dotted name whose first part is close to a section name but is
  not one (`pin.max_total_chars`) fails too. File names (`limits.py`) are not keys. Bare key names
  (`max_total_chars`) are not checked: they cannot be told apart from other identifiers.

How a shown command is normalised before it is parsed:

- `[` and `]` (optional parts) are dropped: what is shown optional is parsed as if given.
- `a|b` inside a word is a choice: each alternative is parsed.
- Placeholders: an ALL-CAPS word (`FILE`, `ID`, `N`) or `<...>` stands for a value and becomes
  `1`; `<...>` in the subcommand's place (`pinbot <command> --help`) stands for every subcommand.
- Required options and arguments are made optional, so a command named in passing
  (`pinbot console`) parses; every flag and value that is shown is still checked.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from bot.config import Config, ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Keys the docs show on purpose as mistakes; each must stay unknown to the schema.
SHOWN_AS_WRONG = {"telegram.token"}  # the "did you mean telegram.token_env" example


def cli_parser() -> argparse.ArgumentParser:
    """pinbot's command-line parser: the one place this test reaches into the CLI."""
    from bot.cli import parser as _parser

    return _parser()


# --- reading Markdown ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A piece of code shown in a document: where, the fence's info string (None for inline
    code), and the text."""

    where: str
    info: str | None
    text: str


_FENCE = re.compile(
    r"^(?P<indent>[ ]*)(?P<fence>`{3,})(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ ]*$",
    re.MULTILINE | re.DOTALL,
)
# A code span: a run of backticks, then anything but a blank line, then the same run.
_SPAN = re.compile(
    r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>(?:(?!\n[ \t]*\n).)+?)(?<!`)(?P=ticks)(?!`)", re.DOTALL
)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def shown_code(path: Path) -> list[Shown]:
    """Every fenced block and every inline code span of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(ROOT).as_posix()
    found: list[Shown] = []
    for match in _FENCE.finditer(text):
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines())
        where = f"{name}:{_line(text, match.start()) + 1}"
        found.append(Shown(where, match["info"].strip(), body))
    # Blank the fenced blocks out (keeping line numbers) before looking for inline code.
    prose = _FENCE.sub(lambda match: "\n" * match[0].count("\n"), text)
    for match in _SPAN.finditer(prose):
        code = " ".join(match["code"].split())
        found.append(Shown(f"{name}:{_line(prose, match.start())}", None, code))
    return found


def all_shown() -> list[Shown]:
    """The code shown in README.md and docs/*.md, columns of prose (```text) left out."""
    return [shown for path in DOCUMENTS for shown in shown_code(path) if shown.info != "text"]


# --- commands -----------------------------------------------------------------------------------

_PINBOT = re.compile(r"(?:^|(?<=[\s(]))(?:[\w.-]*/bin/)?pinbot(?=\s|$)")
_COMMAND_END = re.compile(r"\s#|&&|\|\||;|\s\|\s|\)")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*|<[^>]*>")


@dataclass(frozen=True)
class Command:
    """A `pinbot` command line shown in the docs, and the argument lists it stands for."""

    where: str
    shown: str
    variants: tuple[tuple[str, ...], ...]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _variants(words: list[str], names: list[str]) -> list[tuple[str, ...]]:
    """The argument lists a shown command stands for (see the module docstring)."""
    choices: list[list[str]] = []
    for position, word in enumerate(words):
        if position == 0 and re.fullmatch(r"<[^>]*>", word):
            choices.append(names)
        elif "|" in word:
            choices.append(word.split("|"))
        else:
            choices.append(["1" if _PLACEHOLDER.fullmatch(word) else word])
    return list(itertools.product(*choices))


def shown_commands() -> list[Command]:
    """Every `pinbot` command line in the docs."""
    names = sorted(subcommands(cli_parser()))
    commands = []
    for shown in all_shown():
        for line in shown.text.splitlines():
            for start in _PINBOT.finditer(line):
                rest = line[start.end() :]
                end = _COMMAND_END.search(rest)
                command = rest[: end.start()] if end else rest
                words = shlex.split(command.replace("[", " ").replace("]", " "))
                text = f"pinbot{command}".strip()
                commands.append(Command(shown.where, text, tuple(_variants(words, names))))
    return commands


def relaxed(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with every required option and argument of its subcommands made optional."""
    for sub in subcommands(parser).values():
        for action in sub._actions:
            if action.required:
                action.required = False
                if not action.option_strings:
                    action.nargs = "?"
    return parser


def parse_error(argv: tuple[str, ...]) -> str | None:
    """Why pinbot's parser refuses argv, or None when it accepts it (`--help` included)."""
    parser = relaxed(cli_parser())
    messages = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(messages):
            parser.parse_args(list(argv))
    except SystemExit as stop:
        if stop.code not in (0, None):
            return messages.getvalue().strip() or f"exit status {stop.code}"
    return None


COMMANDS = shown_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where} {c.shown}" for c in COMMANDS])
def test_shown_command_parses(command: Command) -> None:
    for argv in command.variants:
        error = parse_error(argv)
        assert error is None, f"{command.where}: `{command.shown}` ({' '.join(argv)}): {error}"


def test_every_subcommand_is_shown() -> None:
    # Named ones only: `pinbot <command> --help` stands for every subcommand but shows none.
    named = {
        argv[0]
        for command in COMMANDS
        if "<" not in command.shown
        for argv in command.variants
        if argv
    }
    missing = sorted(set(subcommands(cli_parser())) - named)
    assert not missing, f"subcommands the docs never show: {missing}"


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (("console", "--usr", "42"), "unrecognized arguments: --usr"),
        (("check-configs",), "invalid choice: 'check-configs'"),
        (("check-config", "--platform", "slack"), "invalid choice: 'slack'"),
        (("usage", "--days", "0"), "is not a whole number"),
    ],
)
def test_a_wrong_command_is_refused(argv: tuple[str, ...], refused: str) -> None:
    error = parse_error(argv)
    assert error is not None and refused in error


def test_placeholders_are_normalised() -> None:
    names = ["console", "web"]
    assert _variants(["<command>", "--help"], names) == [("console", "--help"), ("web", "--help")]
    assert _variants(["check-config", "--platform", "telegram|feishu"], names) == [
        ("check-config", "--platform", "telegram"),
        ("check-config", "--platform", "feishu"),
    ]
    assert _variants(["usage", "--days", "N"], names) == [("usage", "--days", "1")]


# --- configuration keys -------------------------------------------------------------------------

SECTIONS = [field.alias or name for name, field in Config.model_fields.items()]
_DOTTED = re.compile(r"(?<![\w./:$-])[a-z][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+(?![\w/(-]|\.\w)")
_SETTING = re.compile(r"(?P<key>[a-z][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+):\s+(?P<value>.+)")
_FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "toml", "png", "html", "txt", "sqlite3"}


def schema_keys(model: type[BaseModel] = Config, prefix: str = "") -> set[str]:
    """Every key of the configuration schema, dotted (`pins.max_total_chars`), sections too."""
    keys = set()
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        keys.add(key)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= schema_keys(field.annotation, key + ".")
    return keys


KEYS = schema_keys()


def _nested(key: str, value: object) -> dict[str, object]:
    """`a.b` and a value → {"a": {"b": value}}."""
    data: dict[str, object] = {}
    node = data
    *parents, last = key.split(".")
    for part in parents:
        child: dict[str, object] = {}
        node[part] = child
        node = child
    node[last] = value
    return data


def key_problems(shown: Shown) -> list[str]:
    """What is wrong with the configuration keys in one piece of shown code."""
    if shown.info in ("yaml", "yml"):
        return _yaml_problems(shown)
    problems = []
    for match in _DOTTED.finditer(shown.text):
        key = match[0]
        section, suffix = key.split(".", 1)[0], key.rsplit(".", 1)[-1]
        if suffix in _FILE_SUFFIXES or key in SHOWN_AS_WRONG:
            continue
        if section in SECTIONS and key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{shown.where}: `{key}` is not a configuration key{hint}")
        elif section not in SECTIONS and difflib.get_close_matches(section, SECTIONS, cutoff=0.8):
            problems.append(f"{shown.where}: `{key}`: {section!r} is not a configuration section")
    setting = _SETTING.fullmatch(shown.text) if shown.info is None else None
    if setting and setting["key"] in KEYS:
        try:
            value = yaml.safe_load(setting["value"])
            parse_config(_nested(setting["key"], value), shown.where)
        except (ConfigError, yaml.YAMLError) as error:
            problems.append(str(error))
    return problems


def _yaml_problems(shown: Shown) -> list[str]:
    """Validate each top-level entry of a YAML block as a config file holding only it."""
    problems = []
    chunks: list[tuple[int, list[str]]] = []
    for number, line in enumerate(shown.text.splitlines()):
        if line[:1] not in ("", " ", "#"):
            chunks.append((number, []))
        if chunks:
            chunks[-1][1].append(line)
    file, first = shown.where.rsplit(":", 1)
    for number, lines in chunks:
        where = f"{file}:{int(first) + number}"
        try:
            parse_config(yaml.safe_load("\n".join(lines)), where)
        except (ConfigError, yaml.YAMLError) as error:
            problems.append(str(error))
    return problems


def test_shown_config_keys_exist() -> None:
    problems = [problem for shown in all_shown() for problem in key_problems(shown)]
    assert not problems, "\n".join(problems)


def test_the_docs_show_config_keys() -> None:
    shown = {match[0] for code in all_shown() for match in _DOTTED.finditer(code.text)}
    # A sample the docs must keep showing, so that the key check above is not checking nothing.
    assert {"pins.max_total_chars", "storage.url_env", "web.token_env", "llm.backend"} <= shown
    assert any(code.info == "yaml" for code in all_shown())


def test_keys_shown_as_mistakes_stay_mistakes() -> None:
    assert not SHOWN_AS_WRONG & KEYS


@pytest.mark.parametrize(
    ("code", "info", "refused"),
    [
        ("`pins.max_total_char`", None, "pins.max_total_char` is not a configuration key"),
        ("`pin.max_total_chars`", None, "'pin' is not a configuration section"),
        ("`telegram.mode: hook`", None, "telegram.mode"),
        ("llm:\n  modle: gpt-4o-mini\n", "yaml", "llm.modle: unknown key"),
        ("# storage.url: here\npinbot migrate\n", "sh", "storage.url` is not"),
    ],
)
def test_a_wrong_key_is_found(code: str, info: str | None, refused: str) -> None:
    text = code.strip("`") if info is None else code
    problems = key_problems(Shown("doc.md:1", info, text))
    assert any(refused in problem for problem in problems), problems


def test_file_names_and_other_dotted_names_are_not_keys() -> None:
    for text in (
        "bot/core/people/permissions.py",
        "context.is_addressed",
        "usage.prompt_tokens_details",
    ):
        assert key_problems(Shown("doc.md:1", None, text)) == []


# --- links --------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_links_between_the_docs_resolve() -> None:
    problems = []
    for path in DOCUMENTS:
        text = _FENCE.sub("", path.read_text(encoding="utf-8"))
        text = _SPAN.sub("", text)
        for match in _LINK.finditer(text):
            target = match["target"]
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}: {target}"
            if not linked.exists():
                problems.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{where}: no such heading")
    assert not problems, "\n".join(problems)
