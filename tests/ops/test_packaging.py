"""Package hygiene: the dist checker passes a clean wheel and sdist and fails planted files;
`pinbot --version` prints the version."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = [sys.executable, str(ROOT / "tools" / "check_dist.py")]
DOCS = [
    "docs/user-guide.md",
    "docs/operator-guide.md",
    "docs/design.md",
    "docs/designs.md",
    "docs/performance.md",
    "docs/prometheus/alerts.yml",
]
GOOD_WHEEL = [
    "bot/__init__.py",
    "bot/cli/__init__.py",
    "storage/__init__.py",
    "bot/web/templates/base.html",
    "pinbot-0.1.0.dist-info/METADATA",
]


def wheel(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "x")
    return path


def sdist(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name in names:
            info = tarfile.TarInfo(f"pinbot-0.1.0/{name}")
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    return path


def check(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CHECK, *map(str, files)], capture_output=True, text=True)


def test_clean_distributions_pass(tmp_path: Path) -> None:
    result = check(
        wheel(tmp_path / "pinbot-0.1.0-py3-none-any.whl", GOOD_WHEEL),
        sdist(
            tmp_path / "pinbot-0.1.0.tar.gz",
            [*GOOD_WHEEL[:4], "README.md", "config.example.yaml", *DOCS, "pyproject.toml"],
        ),
    )
    assert result.returncode == 0, result.stdout
    assert "2 file(s) checked, 0 problem(s)" in result.stdout


@pytest.mark.parametrize(
    ("planted", "what"),
    [
        ("tests/test_bot.py", "a test file"),
        ("bot/conftest.py", "a test file"),
        ("pinbot.sqlite3", "a database"),
        (".env", "an .env file"),
        ("bot/server.pem", "a key or certificate"),
        ("bot/api_token.json", "a secret-looking file"),
    ],
)
def test_planted_files_fail_the_check(tmp_path: Path, planted: str, what: str) -> None:
    result = check(wheel(tmp_path / "p-0.1.0-py3-none-any.whl", [*GOOD_WHEEL, planted]))
    assert result.returncode == 1
    assert f"{planted} is {what}" in result.stdout


def test_missing_parts_fail_the_check(tmp_path: Path) -> None:
    result = check(sdist(tmp_path / "pinbot-0.1.0.tar.gz", ["bot/__init__.py"]))
    assert result.returncode == 1
    for missing in (
        "storage package is missing",
        "README.md is missing",
        "config.example.yaml is missing",
        "docs/user-guide.md is missing",
    ):
        assert missing in result.stdout


def test_version() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pinbot"), "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("pinbot 0.1.0")
