"""The layers hold: only storage talks to a database driver, the core knows no platform or model
SDK, adapters reach the store only through the core, and only keys.py writes a key's grammar."""

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
