"""New databases already at the latest schema, for the fixtures that open a store on an empty
database of their own: a copy of one migrated once per test process (SQLite: its file;
PostgreSQL: a template database), instead of every migration step again for each test (~20 ms
on SQLite, ~70 ms on PostgreSQL, more on a busy machine). Opening the copy still runs migrate,
which finds nothing to do; the steps themselves are tested on databases made from nothing
(tests/storage/test_schema.py, and every test that opens a path or URL of its own)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import weakref
from pathlib import Path

from storage import Store
from tests.pg import PgCluster, fresh_database

_sqlite: list[Path] = []  # the template file, once made
# each cluster's template database, once made
_postgres: weakref.WeakKeyDictionary[PgCluster, str] = weakref.WeakKeyDictionary()


async def migrated_sqlite(path: Path) -> Path:
    """A new SQLite database at latest schema at path (which does not exist yet); returns path."""
    if not _sqlite:
        folder = tempfile.mkdtemp(prefix="pinbot-template-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = Path(folder) / "template.sqlite3"
        await (await Store.open(template)).close()  # closing checkpoints the log into the file
        _sqlite.append(template)
    assert not path.exists(), path
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite[0], path)
    return path


async def migrated_database(cluster: PgCluster) -> str:
    """The URL of a new database of its own in cluster, at the latest schema."""
    template = _postgres.get(cluster)
    if template is None:
        url = await fresh_database(cluster)
        await (await Store.open(url=url)).close()
        template = _postgres[cluster] = url.rsplit("/", 1)[1]
    return await fresh_database(cluster, template)
