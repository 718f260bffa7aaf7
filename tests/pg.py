"""A throwaway PostgreSQL cluster for tests and the benchmark: initdb in a temporary folder, a
free port on 127.0.0.1, trust authentication on loopback, stopped afterwards. As root (CI, our
machines) it runs as the unprivileged `postgres` user, since initdb refuses root.

Each process that starts one gets its own folder (data and socket) and port, so the parallel
test workers each run their own cluster side by side."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

START_TIMEOUT_S = 60
START_TRIES = 3  # another process may take the free port before the server binds it
_databases = itertools.count(1)


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); "
            "apt-get install -y postgresql"
        )
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgCluster:
    """One running cluster; `url(database)` names a database in it."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pinbot-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self._bin = _bin_dir()
        self._as_postgres = os.geteuid() == 0

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        subprocess.run(
            [*prefix, *command],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )

    def start(self) -> PgCluster:
        """initdb and start the server; raises if it cannot start."""
        if self._as_postgres:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(
            str(self._bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )
        self.start_server(new_port_if_taken=True)
        return self

    def start_server(self, *, new_port_if_taken: bool = False) -> None:
        """Start (or start again) the server on its data and port; at first start, another
        port is tried when another process took this one first."""
        log = self.folder / "server.log"
        tries = 1
        while True:
            options = (
                f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            log.unlink(missing_ok=True)
            try:
                self._run(
                    str(self._bin / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-o",
                    options,
                    "-w",
                    "-l",
                    str(log),
                    "start",
                )
                return
            except subprocess.CalledProcessError:
                said = log.read_text(errors="replace") if log.exists() else ""
                retry = new_port_if_taken and "could not bind" in said
                if tries == START_TRIES or not retry:
                    raise RuntimeError(f"PostgreSQL did not start:\n{said}") from None
            tries += 1
            self.port = _free_port()

    def stop_server(self) -> None:
        """Stop the server, as an outage would (connections end), keeping its data."""
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        """A postgresql:// URL of a database in this cluster."""
        secret = f":{password}" if password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Stop the server and delete its files (in the background: a run's hundred databases
        are thousands of files, seconds to delete on a busy disk, and nothing waits for them)."""
        try:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            subprocess.Popen(
                ["rm", "-rf", str(self.folder)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )


async def fresh_database(cluster: PgCluster, template: str = "template1") -> str:
    """Create an empty database of its own in cluster (or a copy of the database template);
    returns its URL."""
    import asyncpg

    name = f"test_{os.getpid()}_{next(_databases)}"
    connection = await asyncpg.connect(cluster.url())
    try:
        # FILE_COPY copies the small template's files, twice as fast here as PostgreSQL 15's
        # default (WAL_LOG, which writes them through the log).
        await connection.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    finally:
        await connection.close()
    return cluster.url(name)
