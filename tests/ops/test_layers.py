"""The layers hold: only storage talks to a database driver, the core knows no platform or model
SDK, adapters reach the store only through the core, only keys.py writes a key's grammar, and
each adapter hands a message to the core one way (`Pinbot.handle(incoming, surface)`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = {"sqlite3", "asyncpg", "aiosqlite"}
PLATFORMS = {"telegram", "lark_oapi", "openai", "aiohttp", "httpx", "bot.adapters", "bot.web"}


def imports(path: Path) -> set[str]:
    """The modules a file imports (top-level names and dotted ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


def test_adapters_reach_the_store_only_through_the_core() -> None:
    reach = re.compile(r"pinbot\.(store|clock|config\.storage)\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files("bot/adapters")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if reach.search(line)
    ]
    assert offenders == []


def test_only_keys_py_writes_the_scope_key_grammar() -> None:
    marks = r"(:direct:|:group:|::u:|:topic:|:sender:|\{(DIRECT|GROUP|[A-Z]+_MARK)\})"
    grammar = re.compile(rf"""f["'][^"']*{marks}""")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("bot", "storage")
        for path in files(folder)
        if path.name != "keys.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if grammar.search(line) or '"%:direct:%"' in line
    ]
    assert offenders == []


def calls_of(path: Path, method: str) -> list[int]:
    """The lines of path that call `<something>.method(...)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
    ]


def method_of(path: Path, cls: str, name: str) -> ast.AsyncFunctionDef | ast.FunctionDef:
    """The definition of cls.name in path."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef | ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{cls}.{name} not found in {path}")


def test_pinbot_handle_takes_the_incoming_message_and_its_surface() -> None:
    handle = method_of(ROOT / "bot/core/bot.py", "Pinbot", "handle")
    arguments = handle.args
    assert [a.arg for a in arguments.args] == ["self", "incoming", "surface"]
    assert [ast.unparse(a.annotation) for a in arguments.args[1:] if a.annotation] == [
        "Incoming",
        "Surface",
    ]
    assert not (arguments.kwonlyargs or arguments.defaults or arguments.vararg or arguments.kwarg)


def test_each_adapter_hands_a_message_to_the_core_one_way() -> None:
    adapters = ROOT / "bot/adapters"
    sites = {path.name: len(calls_of(path, "handle")) for path in files("bot/adapters")}
    assert {name: count for name, count in sites.items() if count} == {
        "console.py": 1,
        "feishu.py": 1,
        "telegram.py": 1,
    }
    # Both platforms with an inbox send after its commit one way: what kit.from_inbox returns.
    for name, frontend in (("telegram.py", "TelegramFrontend"), ("feishu.py", "FeishuFrontend")):
        process = method_of(adapters / name, frontend, "_process_recorded")
        returned = [
            ast.unparse(n.value) if n.value else "None"
            for n in ast.walk(process)
            if isinstance(n, ast.Return)
        ]
        assert len(returned) == 1 and returned[0].startswith("await from_inbox("), name
