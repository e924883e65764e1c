"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary folder, served on 127.0.0.1 at a
free port.

As root, the cluster belongs to the `postgres` user (PostgreSQL refuses to run as root). `stop()` kills the server
(`-m immediate`, like a crash) and `start()` brings it back on the same port, so a test can stage an outage.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SERVICE_USER = "postgres"


def find_bin_dir() -> Path | None:
    """The folder with `initdb` and `pg_ctl`: the newest /usr/lib/postgresql/*/bin, else the PATH's."""
    def version(path: str) -> tuple[int, ...]:
        return tuple(int(part) for part in Path(path).parent.name.split(".") if part.isdigit())

    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(os.path.realpath(initdb)).parent
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="aio-pg-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_file = self.root / "server.log"
        self.port = _free_port()
        self._as_service_user = os.geteuid() == 0
        self.socket_dir.mkdir()
        if self._as_service_user:
            shutil.chown(self.root, SERVICE_USER, SERVICE_USER)
            shutil.chown(self.socket_dir, SERVICE_USER, SERVICE_USER)
        self._running = False
        try:
            self._pg("initdb", "-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                     "--locale=C", "--no-sync")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def url(self) -> str:
        """The default database (`postgres`)."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        # fsync=off is safe here: a killed server loses nothing the OS already has. (synchronous_commit=off
        # would lose the last commits in a `stop()`.)
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.socket_dir} -c fsync=off "
                   "-c full_page_writes=off -c max_connections=200")
        self._pg("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "30", "-o", options,
                 "start")
        self._running = True

    def stop(self) -> None:
        """Kill the server at once (no shutdown checkpoint; clients see their connections drop)."""
        if self._running:
            self._pg("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
            self._running = False

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"aio_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def close(self) -> None:
        """Stop the server and delete its files (idempotent)."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _pg(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self._as_service_user:
            command = ["runuser", "-u", SERVICE_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")
