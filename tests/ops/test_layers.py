"""The layers hold: only storage talks to a database driver, and within it only the dialect (what
differs between SQLite and PostgreSQL) and the schema (every table); the core knows no platform
or model SDK, only keys.py writes a key's grammar, and adapters reach the core through one door:
they import only bot.core.entry, touch only Pinbot's public methods, and hand every platform
event to its one entry (`Pinbot.handle(event, surface)`)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = {"sqlite3", "asyncpg", "aiosqlite"}
# What only the dialect (a package) and the schema's steps may name: the drivers' modules (their
# exceptions, their versions) and a branch on the backend.
DIALECT = ("storage/dialect/", "storage/schema.py")
DIALECT_ONLY = re.compile(r"\bone_process\b|\b(sqlite3|aiosqlite|asyncpg)\.")
DEFINITION = re.compile(r"\bCREATE\s+(UNIQUE\s+)?(TABLE|INDEX|VIRTUAL\s+TABLE|TRIGGER)\b", re.I)
PLATFORMS = {"telegram", "lark_oapi", "openai", "aiohttp", "httpx", "bot.adapters", "bot.web"}


@functools.cache
def source(path: Path) -> str:
    """A file's text, read once for all the tests here."""
    return path.read_text(encoding="utf-8")


@functools.cache
def tree_of(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once for all the tests here (they only read it)."""
    return ast.parse(source(path))


def imports(path: Path) -> set[str]:
    """The modules a file imports (top-level names and dotted ones)."""
    found: set[str] = set()
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_only_storage_imports_a_database_driver() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imports(path) if name.split(".")[0] in DRIVERS
        )
        for path in files("bot")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def lines(*folders: str) -> list[tuple[str, int, str]]:
    """Each line of the Python files in folders: (path from the root, line number, text)."""
    return [
        (str(path.relative_to(ROOT)), number, line)
        for folder in folders
        for path in files(folder)
        for number, line in enumerate(source(path).splitlines(), start=1)
    ]


def test_within_storage_only_the_dialect_imports_a_database_driver() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imports(path) if name.split(".")[0] in DRIVERS
        )
        for path in files("storage")
        if not str(path.relative_to(ROOT)).startswith(DIALECT[0])
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_backend_differences_and_driver_exceptions_stay_in_the_dialect_and_the_schema() -> None:
    offenders = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line in lines("storage", "bot")
        if DIALECT_ONLY.search(line) and not path.startswith(DIALECT)
    ]
    assert offenders == []


def test_only_the_schema_writes_a_statement_per_dialect() -> None:
    offenders = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line in lines("storage", "bot")
        if ".pick(" in line and path != "storage/schema.py"
    ]
    assert offenders == []


def test_every_table_index_and_trigger_is_defined_in_the_schema() -> None:
    offenders = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line in lines("storage", "bot")
        if DEFINITION.search(line) and path != "storage/schema.py"
    ]
    assert offenders == []


def test_the_core_knows_no_platform_web_framework_or_model_sdk() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in imports(path)
            if any(name == p or name.startswith(f"{p}.") for p in PLATFORMS)
        )
        for path in files("bot/core")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_only_keys_py_writes_the_scope_key_grammar() -> None:
    marks = r"(:direct:|:group:|::u:|:topic:|:sender:|\{(DIRECT|GROUP|[A-Z]+_MARK)\})"
    grammar = re.compile(rf"""f["'][^"']*{marks}""")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("bot", "storage")
        for path in files(folder)
        if path.name != "keys.py"
        for number, line in enumerate(source(path).splitlines(), start=1)
        if grammar.search(line) or '"%:direct:%"' in line
    ]
    assert offenders == []


def calls_of(path: Path, method: str) -> list[int]:
    """The lines of path that call `<something>.method(...)`."""
    tree = tree_of(path)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
    ]


Function = ast.AsyncFunctionDef | ast.FunctionDef


def definitions_of(path: Path, cls: str, name: str) -> list[Function]:
    """The definitions of cls.name in path, in order (its overloads, then its body)."""
    tree = tree_of(path)
    return [
        item
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == cls
        for item in node.body
        if isinstance(item, Function) and item.name == name
    ]


def method_of(path: Path, cls: str, name: str) -> Function:
    """The definition of cls.name in path (with overloads, the one that is no overload)."""
    found = [
        item
        for item in definitions_of(path, cls, name)
        if not any(ast.unparse(d) == "overload" for d in item.decorator_list)
    ]
    assert len(found) == 1, f"{cls}.{name} in {path}: {len(found)} bodies"
    return found[0]


# What Pinbot offers: its one entry, and the process around it (no event among them).
PINBOT_METHODS = {
    "handle",  # every platform event, with its surface
    "inbox",
    "every",
    "use_messenger",
    "known_as",
    "probe",
}


def test_pinbot_handle_takes_every_event_and_its_surface() -> None:
    pinbot = ROOT / "bot/core/entry/pinbot.py"
    arguments = method_of(pinbot, "Pinbot", "handle").args
    assert [a.arg for a in arguments.args] == ["self", "event", "surface"]
    assert [ast.unparse(a.annotation) for a in arguments.args[1:] if a.annotation] == [
        "Event",
        "Surface",
    ]
    assert not (arguments.kwonlyargs or arguments.defaults or arguments.vararg or arguments.kwarg)
    # One overload per kind of event, each typing what the adapter gets back for it.
    overloads = definitions_of(pinbot, "Pinbot", "handle")[:-1]
    taken = sorted(ast.unparse(o.args.args[1].annotation or o) for o in overloads)
    entry = importlib.import_module("bot.core.entry")
    assert taken == sorted(kind.__name__ for kind in typing.get_args(entry.Event))
    assert all(o.returns is not None for o in overloads)


def test_pinbot_has_no_other_event_method() -> None:
    pinbot = importlib.import_module("bot.core.entry").Pinbot
    public = {name for name, _ in inspect.getmembers(pinbot, callable) if name[0] != "_"}
    assert public == PINBOT_METHODS


def pinbot_names(tree: ast.AST) -> set[str]:
    """The names a file gives the core: `pinbot`, and any parameter annotated `Pinbot`."""
    return {"pinbot"} | {
        node.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.arg)
        and node.annotation is not None
        and ast.unparse(node.annotation) == "Pinbot"
    }


def test_adapters_and_commands_touch_only_pinbots_public_methods() -> None:
    """Attribute access on the core (`pinbot.x`, `self.pinbot.x`, a parameter typed Pinbot) in
    bot/adapters and bot/cli is limited to PINBOT_METHODS: no store, clock, config or service
    of the core's is read or assigned there."""
    offenders = []
    for path in files("bot/adapters") + files("bot/cli"):
        tree = tree_of(path)
        names = pinbot_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr in PINBOT_METHODS:
                continue
            held = node.value
            if (isinstance(held, ast.Name) and held.id in names) or (
                isinstance(held, ast.Attribute) and held.attr == "pinbot"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


def test_adapters_import_from_the_core_only_its_entry() -> None:
    """bot.core.entry re-exports the core's values adapters use (replies, conversations): of
    bot/core an adapter imports bot.core.entry, and nothing else."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in imports(path)
            if name.startswith("bot.core") and name != "bot.core.entry"
        )
        for path in files("bot/adapters")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_each_adapter_hands_every_event_to_the_core_one_way() -> None:
    adapters = ROOT / "bot/adapters"
    sites = {path.name for path in files("bot/adapters") if calls_of(path, "handle")}
    assert sites == {"console.py", "feishu.py", "telegram.py"}
    # Both platforms answer through their inbox one way: what kit.from_inbox returns.
    for name, frontend in (("telegram.py", "TelegramFrontend"), ("feishu.py", "FeishuFrontend")):
        process = method_of(adapters / name, frontend, "_process_recorded")
        returned = [
            ast.unparse(n.value) if n.value else "None"
            for n in ast.walk(process)
            if isinstance(n, ast.Return)
        ]
        assert len(returned) == 1 and returned[0].startswith("await from_inbox("), name


# The house from the bottom up: a module may import its own layer's and lower layers' modules,
# never a higher one's. Within bot/core, the packages stand in this order too.
LAYERS: list[tuple[str, ...]] = [
    ("storage", "bot.clock", "bot.config", "bot.secrets", "bot.serving"),
    ("bot.llm", "bot.metrics", "bot.logs"),
    ("bot.core.replies", "bot.core.people"),
    ("bot.core.blocks",),
    ("bot.core.decisions",),
    ("bot.core.conversation",),
    ("bot.core.commands",),
    ("bot.core.groups",),
    ("bot.core.entry",),
    ("bot.adapters", "bot.web", "bot.cli"),
]
CORE_PACKAGES = ("people", "blocks", "decisions", "conversation", "commands", "groups", "entry")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer a module of ours belongs to (None: bot/__init__.py, or not ours)."""
    found = [
        (len(prefix), number)
        for number, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(found)[1] if found else None


def test_every_module_of_ours_has_a_layer() -> None:
    assert [
        module_name(path)
        for folder in ("bot", "storage")
        for path in files(folder)
        if layer_of(module_name(path)) is None and module_name(path) not in ("bot", "bot.core")
    ] == []


def test_imports_run_only_downward() -> None:
    offenders = [
        f"{module_name(path)} -> {name}"
        for folder in ("bot", "storage")
        for path in files(folder)
        for name in imports(path)
        if (mine := layer_of(module_name(path))) is not None
        and (theirs := layer_of(name)) is not None
        and theirs > mine
    ]
    assert offenders == []


def test_a_core_package_is_reached_from_outside_only_through_its_surface() -> None:
    """From outside bot/core/<package>/ code imports the package (its __all__), never one of
    its modules; and what it takes is in that __all__."""
    offenders = []
    for folder in ("bot", "storage"):
        for path in files(folder):
            here = module_name(path)
            tree = tree_of(path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or not node.module:
                    continue
                parts = node.module.split(".")
                if parts[:2] != ["bot", "core"] or len(parts) < 3:
                    continue
                package = ".".join(parts[:3])
                if parts[2] not in CORE_PACKAGES or here.startswith(package):
                    continue
                if len(parts) > 3:
                    offenders.append(f"{here} imports {node.module}")
                    continue
                surface = set(importlib.import_module(package).__all__)
                offenders += [
                    f"{here} takes {alias.name} from {package}, not in its __all__"
                    for alias in node.names
                    if alias.name not in surface
                ]
    assert offenders == []


# A statement that writes blocks or their versions, by name or (`{`) a table named by a value.
BLOCK_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(blocks\b|block_versions\b|\{)")
# Where else a statement may write them: the schema's steps migrate the tables.
BLOCK_WRITERS = {"storage/changes.py", "storage/schema.py"}
# Where a statement's table is a value, and why that is no write of a block: a transfer
# (`Store.load`) copies a whole database row for row into an empty store, a raw copy that
# changes no block (its docstring says so); a decision kind's table is its own; a forgotten
# person's usage is folded in either usage table, and their counts and notes deleted.
VALUES = {
    ("storage/__init__.py", "Store.load"),  # every table, copied raw
    ("storage/decisions.py", "DecisionStore"),  # a decision kind's: proposals, suggestions
    ("storage/people.py", "_fold_usage"),  # usage, usage_compaction
    ("storage/people.py", "PeopleStore.forget_person"),  # scope_calls, scope_notes
}


def statements(path: Path) -> list[tuple[str, str]]:
    """Each string literal and f-string of path, with the function (`Class.name`) it is in; in
    an f-string, a module's string constant stands as its text, any other value as `{...}`."""
    tree = tree_of(path)
    constants = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }

    def text(node: ast.JoinedStr) -> str:
        return "".join(
            str(part.value)
            if isinstance(part, ast.Constant)
            else constants.get(part.value.id, "{")
            if isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
            else "{"
            for part in node.values
        )

    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{where}.{child.name}".lstrip("."))
            elif isinstance(child, ast.JoinedStr):
                found.append((text(child), where))
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                found.append((child.value, where))
            else:
                visit(child, where)

    visit(tree, "")
    return found


def test_every_write_of_blocks_and_versions_is_in_the_change_module() -> None:
    """The one road: every INSERT, UPDATE and DELETE of `blocks` or `block_versions` in the bot
    and its storage is a statement of storage/changes.py."""
    offenders = [
        f"{name} ({where}): {text[:60]}"
        for folder in ("bot", "storage")
        for path in files(folder)
        if (name := str(path.relative_to(ROOT))) not in BLOCK_WRITERS
        for text, where in statements(path)
        if (found := BLOCK_WRITE.search(text))
        and not (found[2] == "{" and any(name == f and where.startswith(w) for f, w in VALUES))
    ]
    assert offenders == []


def test_only_the_block_operations_hand_a_change_to_the_store() -> None:
    """Every change reaches the store's one write through `BlockOps` (bot/core/blocks/ops.py),
    which reviews it first: the clean-up and imports included."""
    callers = {
        str(path.relative_to(ROOT))
        for path in files("bot")
        if calls_of(path, "apply_change") or calls_of(path, "apply_changes")
    }
    assert callers == {"bot/core/blocks/ops.py"}


def test_only_the_rules_build_a_refusal() -> None:
    """Every Refused comes from review.refusal (or a constant it made): it has a code, and its
    text is that code's one text."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in files("bot")
        if path != ROOT / "bot/core/blocks/review.py"
        for node in ast.walk(tree_of(path))
        if isinstance(node, ast.Call)
        and "Refused" in (getattr(node.func, "id", None), getattr(node.func, "attr", None))
    ]
    assert offenders == []
