"""`python -m benchmarks.loadtest --replicas 2 [--kill-one]`: replicas of `aio serve` on one throwaway PostgreSQL
behind a small round-robin TCP proxy, and (with --kill-one) the failures an operator scaling out meets.

With --kill-one, during the run: one replica is SIGKILLed (its open streams are cut) and restarted on the same
AIO_HOME, as an orchestrator would; then PostgreSQL is stopped for --outage-s seconds. Afterwards every answered
request must be in the log exactly once, and every stream the kill cut must have a row too (status interrupted,
written from the killed replica's journal when it restarts).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.postgres import PostgresServer, find_bin_dir


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Replica:
    name: str
    home: Path
    port: int
    env: dict[str, str]
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0) -> None:
        log = open(self.home / "server.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "aio.cli", "serve", "--port", str(self.port), "--log-level", "warning"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"replica {self.name} exited: see {self.home / 'server.log'}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.3)
        raise SystemExit(f"replica {self.name} did not start within {timeout:g} s")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


class RoundRobinProxy:
    """Hands each new client connection to the next replica that accepts one (a dead replica is skipped)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._next = 0
        self.server: asyncio.Server | None = None
        self.port = free_port()
        self._pipes: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def close(self) -> None:
        self.server.close()
        for task in self._pipes:
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self.server.wait_closed()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._pipes.add(task)
        try:
            await self._connect(client_reader, client_writer)
        except asyncio.CancelledError:
            pass
        finally:
            self._pipes.discard(task)

    async def _connect(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        backend = None
        first, self._next = self._next, self._next + 1
        for k in range(len(self.ports)):  # each replica once, from this connection's turn on
            port = self.ports[(first + k) % len(self.ports)]
            with contextlib.suppress(OSError):
                backend = await asyncio.open_connection("127.0.0.1", port)
                break
        if backend is None:
            client_writer.close()
            return
        backend_reader, backend_writer = backend
        await asyncio.gather(_pipe(client_reader, backend_writer), _pipe(backend_reader, client_writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


@dataclass
class Cluster:
    postgres: PostgresServer
    database_url: str
    replicas: list[Replica]
    tmp: tempfile.TemporaryDirectory
    events: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, num_replicas: int) -> "Cluster":
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise SystemExit("--replicas needs PostgreSQL installed (initdb and pg_ctl)")
        tmp = tempfile.TemporaryDirectory(prefix="aio-replicas-")
        postgres = PostgresServer(bin_dir)
        postgres.start()
        database_url = postgres.create_database("aio_loadtest")
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIO_")}
        base.update(AIO_DATABASE_URL=database_url, AIO_DEMO_MODEL="random", AIO_OPEN_ENDPOINT="true",
                    AIO_MONITOR_MODE="off", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        upgrade = subprocess.run([sys.executable, "-m", "aio.cli", "db", "upgrade"], env=base, capture_output=True,
                                 text=True, timeout=120)
        if upgrade.returncode != 0:
            raise SystemExit(f"aio db upgrade failed: {upgrade.stderr}")
        replicas = []
        for i in range(num_replicas):
            home = Path(tmp.name) / f"replica-{i}"
            home.mkdir()
            port = free_port()
            env = {**base, "AIO_HOME": str(home), "AIO_REPLICA": f"replica-{i}",
                   "AIO_ADMIN_KEY": f"loadtest-admin-key-{i}-0123456789abcdefghijklmnop"}
            replicas.append(Replica(f"replica-{i}", home, port, env))
        cluster = cls(postgres, database_url, replicas, tmp)
        for replica in replicas:
            replica.start()
        return cluster

    async def chaos(self, duration: float, outage_s: float) -> None:
        """SIGKILL replica 0 at 20% of the run and restart it; stop PostgreSQL at 45% for `outage_s`."""
        started = time.monotonic()
        victim = self.replicas[0]
        await asyncio.sleep(0.2 * duration)
        await asyncio.to_thread(victim.kill)
        self.events.append(f"{time.monotonic() - started:.1f} s: SIGKILL {victim.name}")
        await asyncio.to_thread(victim.start)
        self.events.append(f"{time.monotonic() - started:.1f} s: {victim.name} back")
        await asyncio.sleep(max(0.0, 0.45 * duration - (time.monotonic() - started)))
        await asyncio.to_thread(self.postgres.stop)
        self.events.append(f"{time.monotonic() - started:.1f} s: PostgreSQL stopped")
        try:
            await asyncio.sleep(outage_s)
        finally:
            await asyncio.to_thread(self.postgres.start)
        self.events.append(f"{time.monotonic() - started:.1f} s: PostgreSQL back")

    def close(self) -> Path:
        """Stops everything; returns a folder with the replicas' logs."""
        for replica in self.replicas:
            replica.stop()
        self.postgres.close()
        logs = Path(tempfile.mkdtemp(prefix="aio-replicas-logs-"))
        for replica in self.replicas:
            shutil.copy(replica.home / "server.log", logs / f"{replica.name}.log")
        self.tmp.cleanup()
        return logs
