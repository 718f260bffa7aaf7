"""Check built packages before publishing: `python tools/check_dist.py DIST_FILE...`.

A wheel must hold the `bot` and `storage` packages and the web page's templates; an sdist
also README.md, config.example.yaml, the guides in docs/ that README.md links to and the
alerting rules the operator guide ships. Neither may hold tests, databases, .env files or
anything that looks like a secret (keys, certificates, credential files). Exit status 0 when
every file passes."""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

SDIST_FILES = (
    "README.md",
    "config.example.yaml",
    "docs/user-guide.md",
    "docs/operator-guide.md",
    "docs/design.md",
    "docs/designs.md",
    "docs/performance.md",
    "docs/prometheus/alerts.yml",
)
FORBIDDEN = [
    (re.compile(r"(^|/)tests?/"), "a test file"),
    (re.compile(r"(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$"), "a test file"),
    (re.compile(r"\.(sqlite3?|db)(-wal|-shm|-journal)?$"), "a database"),
    (re.compile(r"(^|/)\.env(\.[^/]*)?$"), "an .env file"),
    (re.compile(r"\.(pem|key|p12|pfx|crt)$|(^|/)id_(rsa|ed25519|ecdsa)"), "a key or certificate"),
    (
        re.compile(r"(^|/)[^/]*(secret|credential|token)[^/]*\.(json|ya?ml|txt|ini|cfg)$", re.I),
        "a secret-looking file",
    ),
]


def _names(path: Path) -> tuple[str, list[str]]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as archive:
            return "wheel", archive.namelist()
    with tarfile.open(path) as archive:
        # An sdist's members sit under "<name>-<version>/"; judge them from the project root.
        return "sdist", [
            name.split("/", 1)[1] if "/" in name else name for name in archive.getnames()
        ]


def problems_of(path: Path) -> list[str]:
    """Every problem with one built distribution file."""
    kind, names = _names(path)
    found = []
    for package in ("bot", "storage"):
        if f"{package}/__init__.py" not in names:
            found.append(f"{path.name}: the {package} package is missing")
    if "bot/web/templates/base.html" not in names:
        found.append(f"{path.name}: the web page's templates are missing")
    if kind == "sdist":
        for required in SDIST_FILES:
            if required not in names:
                found.append(f"{path.name}: {required} is missing")
    for name in names:
        for pattern, what in FORBIDDEN:
            if pattern.search(name):
                found.append(f"{path.name}: {name} is {what} and must not be shipped")
                break
    return found


def main(argv: list[str]) -> int:
    """Check each file named; print every problem."""
    if not argv:
        print("usage: python tools/check_dist.py DIST_FILE...", file=sys.stderr)
        return 2
    found = [problem for name in argv for problem in problems_of(Path(name))]
    for problem in found:
        print(problem)
    print(f"{len(argv)} file(s) checked, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
