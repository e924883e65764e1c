"""The CLI says what it reads and what it did: the database on stderr, help without type noise, a header on
`aio classifier list`, why `aio monitor --once` verified nothing, and `aio serve` ending with status 0 on SIGTERM
without Alembic or progress-bar lines in its log."""
from __future__ import annotations

import subprocess
import time

import httpx
import pytest
import typer
from typer.testing import CliRunner

from aio.cli import app
from aio.routing import registry
from aio.db.database import make_engine
from tests.servers import TEST_ADMIN_KEY, aio_command, free_port, server_env, terminate


def _env(tmp_path, **extra) -> dict[str, str]:
    return {"AIO_HOME": str(tmp_path), "AIO_DATABASE_URL": "", **extra}


def _commands(group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (typer ships its own copy of click)
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


def test_help_shows_no_type_noise_on_options():
    runner = CliRunner()
    commands = list(_commands(typer.main.get_command(app)))
    assert ("retrain",) in commands and ("router", "thresholds") in commands
    for command in commands:
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        options = [line for line in result.output.splitlines() if line.strip().startswith("--")]
        assert options, command
        for line in options:
            assert "<bool>" not in line and "<str>" not in line and "<path>" not in line, (command, line)


def test_every_database_command_names_its_database_on_stderr(tmp_path, monkeypatch):
    monkeypatch.delenv("AIO_DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["keys", "list"], env={"AIO_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == f"database: sqlite:///{tmp_path / 'aio.db'} (SQLite under AIO_HOME)"
    assert "database:" not in result.stdout
    url = f"sqlite:///{tmp_path / 'other.db'}"
    result = runner.invoke(app, ["classifier", "list"], env={"AIO_HOME": str(tmp_path), "AIO_DATABASE_URL": url})
    assert result.stderr.splitlines()[0] == f"database: {url} (database_url)"


def test_classifier_list_has_a_header(tmp_path):
    url = f"sqlite:///{tmp_path / 'aio.db'}"
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"], env={"AIO_DATABASE_URL": url}).exit_code == 0
    engine = make_engine(url)
    registry.register(engine, version="v-one", kind="sklearn-head", path="/x", status="active",
                      metrics={"holdout": {"log_loss": 0.5123}}, num_train_examples=42)
    engine.dispose()
    lines = runner.invoke(app, ["classifier", "list"], env={"AIO_DATABASE_URL": url}).stdout.splitlines()
    assert lines[0].split() == ["VERSION", "STATUS", "KIND", "CREATED", "(UTC)", "EXAMPLES", "HELD-OUT", "LOSS"]
    assert lines[1].split()[:4] == ["*", "v-one", "active", "sklearn-head"] and lines[1].split()[-2:] == ["42", "0.5123"]


def test_monitor_once_says_why_it_verified_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'aio.db'}"
    result = CliRunner().invoke(app, ["monitor", "--once"], env={"AIO_DATABASE_URL": url, "AIO_HOME": str(tmp_path),
                                                                 "AIO_DEMO_MODEL": "random"})
    assert result.exit_code == 0, result.output
    assert "verified 0 answers: no unverified small/medium answers with a logged prompt in the last 1h" in result.stdout
    assert 'monitor_mode is "serve"' in result.stderr


def test_serve_exits_cleanly_on_sigterm_without_alembic_or_progress_lines(tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(aio_command("serve", "--port", str(port), "--log-level", "info"),
                                   env=server_env(tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", TEST_ADMIN_KEY,
                                                  AIO_DEMO_MODEL="random", AIO_MONITOR_MODE="off"),
                                   stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        terminate(process)
        pytest.fail(log.read_text())
    assert terminate(process) == 0
    text = log.read_text()
    assert "aio serve stopped (SIGTERM)" in text and "database: sqlite:///" in text
    for noise in ("Running upgrade", "Context impl", "Will assume", "Batches:", "Loading weights", "Traceback"):
        assert noise not in text, noise
