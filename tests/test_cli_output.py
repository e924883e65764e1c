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
from benchmarks.live_server import TEST_ADMIN_KEY, aio_command, free_port, server_env, terminate


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


def _keys(tmp_path, *args: str):
    env = {"AIO_HOME": str(tmp_path), "AIO_DATABASE_URL": f"sqlite:///{tmp_path / 'aio.db'}"}
    return CliRunner().invoke(app, ["keys", *args], env=env)


def test_key_names_are_printable_and_listings_escape_what_is_stored(tmp_path):
    forged = "evil\r\n   9  forged  admin"
    result = _keys(tmp_path, "create", "--name", forged)
    assert result.exit_code == 1 and "printable" in result.stderr and "'evil\\r\\n" in result.stderr
    assert _keys(tmp_path, "create", "--name", "fine").exit_code == 0
    import sqlalchemy as sa

    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    with engine.begin() as connection:  # a row from before names were checked
        connection.execute(sa.text("UPDATE api_keys SET name = :name"), {"name": "\x1b[2J\x1b[31mred\r\n 77 x \x85"})
    engine.dispose()
    listing = _keys(tmp_path, "list")
    assert listing.exit_code == 0, listing.output
    assert "\x1b" not in listing.stdout and "\r" not in listing.stdout and "\x85" not in listing.stdout
    assert "\\x1b[2J\\x1b[31mred\\r\\n 77 x \\x85" in listing.stdout
    assert len(listing.stdout.splitlines()) == 2  # the header and the one key: no forged row


def test_revoke_and_update_say_which_key_and_refuse_an_ambiguous_id(tmp_path):
    for name in ("first", "1", "other"):
        assert _keys(tmp_path, "create", "--name", name).exit_code == 0
    ambiguous = _keys(tmp_path, "revoke", "1")
    assert ambiguous.exit_code == 1
    assert "'1' is the id of key 1 'first' and the name of key 2: say --id 1 or --name 1" in ambiguous.stderr
    assert _keys(tmp_path, "update", "1", "--rpm", "5").exit_code == 1
    assert [line.split()[1] for line in _keys(tmp_path, "list").stdout.splitlines()[1:]] == ["first", "1", "other"]
    assert _keys(tmp_path, "update", "--id", "1", "--rpm", "5").stdout.strip() == "key 1 'first': 5 rpm"
    assert _keys(tmp_path, "revoke", "--name", "1").stdout.strip() == "revoked key 2 '1'"
    assert _keys(tmp_path, "revoke", "1").stdout.strip() == "revoked key 1 'first'"  # no longer ambiguous
    assert _keys(tmp_path, "revoke", "other").stdout.strip() == "revoked key 3 'other'"
    for args, message in [(["revoke", "²"], "no active key with the name or id '²'"),
                          (["revoke", "99999999999999999999"], "no active key with the name or id"),
                          (["revoke", "--id", "99999999999999999999"], "no active key with id"),
                          (["revoke"], "name the key once"), (["revoke", "x", "--id", "2"], "name the key once"),
                          (["update", "other", "--rpm", "1"], "no active key")]:
        result = _keys(tmp_path, *args)
        assert result.exit_code == 1 and message in result.stderr, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def test_keys_create_makes_an_existing_home_and_database_private(tmp_path):
    """`aio keys create` on a home and a database made earlier with looser modes tightens them as `aio serve`
    does, before it writes the key's hash."""
    from aio.db.migrate import ensure_schema
    from aio.server.data_at_rest import mode

    home = tmp_path / "home"
    home.mkdir()
    engine = make_engine(f"sqlite:///{home / 'aio.db'}")
    ensure_schema(engine)
    engine.dispose()
    (home / "log-spill").mkdir()
    (home / "log-spill" / "journal-1.jsonl").write_text("{}\n")
    for path, loose in [(home, 0o755), (home / "aio.db", 0o644), (home / "log-spill", 0o755),
                        (home / "log-spill" / "journal-1.jsonl", 0o644)]:
        path.chmod(loose)
    result = CliRunner().invoke(app, ["keys", "create", "--name", "ci"],
                                env={"AIO_HOME": str(home), "AIO_DATABASE_URL": f"sqlite:///{home / 'aio.db'}"})
    assert result.exit_code == 0, result.output
    assert mode(home) == 0o700 and mode(home / "log-spill") == 0o700
    assert all(mode(p) == 0o600 for p in [home / "aio.db", home / "log-spill" / "journal-1.jsonl",
                                          *home.glob("aio.db-*")])
    elsewhere = tmp_path / "other" / "log.db"  # a database outside the home, given by URL
    elsewhere.parent.mkdir()
    elsewhere.touch(mode=0o644)
    elsewhere.chmod(0o644)
    result = CliRunner().invoke(app, ["keys", "list"], env={"AIO_HOME": str(home),
                                                            "AIO_DATABASE_URL": f"sqlite:///{elsewhere}"})
    assert result.exit_code == 0, result.output
    assert mode(elsewhere) == 0o600
