"""Starts a real `aio serve` process on loopback: for the API tests and the benchmarks that drive a live server."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(process: subprocess.Popen, timeout: float = 30.0) -> int:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout`; returns its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


@dataclass
class LiveServer:
    process: subprocess.Popen
    base_url: str  # http://127.0.0.1:PORT
    admin_key: str
    database_url: str
    log_path: Path

    @property
    def api_url(self) -> str:
        return self.base_url + "/v1"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        return terminate(self.process, timeout)  # SIGTERM: uvicorn shuts down gracefully, the log writer flushes


def aio_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "aio.cli", *args]


TEST_ADMIN_KEY = "test-admin-key-0123456789abcdefghijklmnopqrstuvwxyz"  # long and varied enough for `aio serve`


def server_env(home: Path, database_url: str, admin_key: str, **extra: str) -> dict[str, str]:
    """The environment of an `aio serve` in `home`; open mode (no API keys on loopback) unless
    AIO_OPEN_ENDPOINT is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIO_")}
    env.update(AIO_HOME=str(home), AIO_DATABASE_URL=database_url, AIO_ADMIN_KEY=admin_key, HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", AIO_OPEN_ENDPOINT="true",
               AIO_PROBE_ON_START="false")  # a test that wants the background probe asks for it
    env.update(extra)
    if not admin_key:
        env.pop("AIO_ADMIN_KEY")  # `aio serve` generates one into $AIO_HOME/admin-key
    env.pop("TRITON_INTERPRET", None)
    return env


def start_server(config: Path | None, home: Path, database_url: str, admin_key: str = TEST_ADMIN_KEY,
                 timeout: float = 120.0, **extra_env: str) -> LiveServer:
    """`config` None: the embedded default (demo tiers built in `home`)."""
    port = free_port()
    log_path = home / f"server-{port}.log"
    log = open(log_path, "wb")
    config_args = ["--config", str(config)] if config is not None else []
    process = subprocess.Popen(aio_command("serve", "--port", str(port), *config_args, "--log-level", "warning"),
                               env=server_env(home, database_url, admin_key, **extra_env), stdout=log,
                               stderr=subprocess.STDOUT)
    server = LiveServer(process, f"http://127.0.0.1:{port}", admin_key, database_url, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"aio serve exited with {process.returncode}:\n{server.output()}")
        try:
            if httpx.get(server.base_url + "/health", timeout=1.0).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"aio serve did not come up in {timeout} s:\n{server.output()}")


def create_key(home: Path, database_url: str, name: str, *options: str) -> str:
    """`aio keys create --name NAME [options]` on this database; returns the key."""
    done = subprocess.run(aio_command("keys", "create", "--name", name, *options),
                          env=server_env(home, database_url, TEST_ADMIN_KEY), capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"aio keys create failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip().splitlines()[-1]
