"""The SQL log on SQLite and PostgreSQL: migrations, the background log writer, API keys, and the `db`/`keys` CLI."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
import typer
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from typer.testing import CliRunner

from aio.db import migrate
from aio.db.database import DatabaseError, make_engine
from aio.db.keys import KeyStore
from aio.db.log_writer import LogWriter
from aio.db.models import Base, DailyAggregate, Request
from aio.db.records import RequestRecord

RECORD_FIELDS = [f.name for f in dataclasses.fields(RequestRecord)]
SUMS = ["num_requests", "num_errors", "prompt_tokens", "completion_tokens", "cost_usd", "baseline_cost_usd",
        "sum_latency_ms", "num_latency", "sum_ttft_ms", "num_ttft"]


@pytest.fixture
def engine(database_url):
    """A migrated database."""
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def outage(engine: sa.Engine, request: pytest.FixtureRequest) -> Iterator[None]:
    """The database refuses writes inside the block: PostgreSQL is killed (and restarted after); SQLite is locked
    by another connection (the engine's busy timeout is cut to 50 ms, see `writer_engine`)."""
    if engine.dialect.name == "postgresql":
        server = request.getfixturevalue("postgres_server")
        server.stop()
        try:
            yield
        finally:
            server.start()
        return
    locker = sqlite3.connect(engine.url.database, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        locker.execute("COMMIT")
        locker.close()


@pytest.fixture
def writer_engine(engine):
    """A second engine on the same database for the writer: on SQLite it waits 50 ms (not 5 s) for a lock."""
    writer_engine = make_engine(engine.url.render_as_string(hide_password=False))
    if writer_engine.dialect.name == "sqlite":
        sa.event.listen(writer_engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA busy_timeout=50"))
    yield writer_engine
    writer_engine.dispose()


def make_records(count: int, seed: int = 0, prefix: str = "req") -> list[RequestRecord]:
    """Records over several UTC days, in several time zones, with every field set or left out at random."""
    rng = random.Random(seed)
    start = datetime(2025, 3, 1, 22, 0, tzinfo=timezone.utc)
    zones = [timezone.utc, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    records = []
    for i in range(count):
        tier = rng.choice(["small", "medium", "large", None])
        records.append(RequestRecord(
            request_id=f"{prefix}-{i}", status=rng.choice(["ok", "ok", "ok", "error", "cancelled", "rejected"]),
            created_at=(start + timedelta(minutes=rng.randrange(0, 3 * 24 * 60), microseconds=rng.randrange(10**6)))
            .astimezone(rng.choice(zones)),
            tier=tier, model=tier and f"model-{tier}", routing_reason=rng.choice(["classifier", "explicit", None]),
            classifier_version=rng.choice(["heuristic-1", None]), routing_score=rng.choice([rng.random(), None]),
            tier_scores=rng.choice([[rng.random() for _ in range(3)], None]), quality=rng.random(),
            key_id=rng.choice([1, 2, None]), user=rng.choice(["alice", None]),
            prompt=rng.choice(['[{"role": "user", "content": "héllo \'✓\' \\"q\\""}]', None]),
            answer=rng.choice(["x" * rng.randrange(1, 2000), None]),
            prompt_tokens=rng.randrange(1, 500), completion_tokens=rng.randrange(0, 500),
            cost_usd=rng.random() / 1000, baseline_cost_usd=rng.random() / 100,
            ttft_ms=rng.choice([rng.uniform(1, 500), None]), latency_ms=rng.choice([rng.uniform(1, 5000), None]),
            finish_reason=rng.choice(["stop", "length", None]), stream=rng.random() < 0.5,
            num_choices=rng.randrange(1, 4), http_status=rng.choice([200, 200, 429, 500]),
            error=rng.choice([None, "boom"])))
    return records


def stored_requests(engine: sa.Engine) -> dict[str, Request]:
    with sa.orm.Session(engine) as session:
        return {row.request_id: row for row in session.scalars(sa.select(Request))}


def assert_aggregates_match_requests(engine: sa.Engine) -> None:
    """daily_aggregates == a GROUP BY over requests by UTC day and tier."""
    r = Request.__table__.c
    if engine.dialect.name == "sqlite":
        day = sa.func.date(r.created_at)  # stored as UTC text
    else:
        day = sa.cast(sa.func.timezone("UTC", r.created_at), sa.Date)
    tier = sa.func.coalesce(r.tier, "none")
    query = sa.select(day, tier, sa.func.count(), sa.func.sum(sa.case((r.status != "ok", 1), else_=0)),
                      sa.func.sum(r.prompt_tokens), sa.func.sum(r.completion_tokens), sa.func.sum(r.cost_usd),
                      sa.func.sum(r.baseline_cost_usd), sa.func.coalesce(sa.func.sum(r.latency_ms), 0),
                      sa.func.count(r.latency_ms), sa.func.coalesce(sa.func.sum(r.ttft_ms), 0),
                      sa.func.count(r.ttft_ms)).group_by(day, tier)
    a = DailyAggregate.__table__.c
    with engine.connect() as connection:
        expected = {(str(row[0]), row[1]): row[2:] for row in connection.execute(query)}
        actual = {(str(row[0]), row[1]): row[2:]
                  for row in connection.execute(sa.select(a.day, a.tier, *(a[name] for name in SUMS)))}
    assert expected and actual.keys() == expected.keys()
    for key, sums in expected.items():
        assert actual[key] == pytest.approx(tuple(sums), rel=1e-9), key


# --- migrations --------------------------------------------------------------------------------------------------

def test_every_record_field_is_a_request_column():
    assert set(RECORD_FIELDS) == set(Request.__table__.columns.keys())


def test_migrations_create_exactly_the_models_and_go_down_and_up(database_url):
    engine = make_engine(database_url)
    try:
        assert migrate.current_revision(engine) is None and not migrate.is_up_to_date(engine)
        assert migrate.upgrade(engine) == migrate.head_revision()
        assert migrate.is_up_to_date(engine)
        inspector = sa.inspect(engine)
        assert set(inspector.get_table_names()) == set(Base.metadata.tables) | {"alembic_version"}
        for name, table in Base.metadata.tables.items():
            columns = {c["name"]: c for c in inspector.get_columns(name)}
            assert set(columns) == set(table.columns.keys()), name
            for column in table.columns:
                assert columns[column.name]["nullable"] == column.nullable, (name, column.name)
            assert {i["name"] for i in inspector.get_indexes(name)} >= {i.name for i in table.indexes}, name
        with engine.connect() as connection:  # types, indexes, keys: what autogenerate would still want to change
            assert compare_metadata(MigrationContext.configure(connection, opts={"compare_type": True}),
                                    Base.metadata) == []

        assert migrate.downgrade(engine, "base") is None
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(engine)
        assert migrate.is_up_to_date(engine)
    finally:
        engine.dispose()


def test_unreachable_database_is_a_clear_error_without_the_password():
    with pytest.raises(DatabaseError, match=r"postgres:\*\*\*@127\.0\.0\.1:1/aio") as info:
        migrate.upgrade("postgres://postgres:hunter2@127.0.0.1:1/aio")
    assert "hunter2" not in str(info.value)
    with pytest.raises(DatabaseError, match="nosuchdb"):
        make_engine("nosuchdb://u:hunter2@host/db")


# --- the log writer ----------------------------------------------------------------------------------------------

def test_concurrent_submissions_are_stored_exactly_once_with_their_fields(engine):
    records = make_records(2000)
    writer = LogWriter(engine, batch_size=128, flush_interval_s=0.05)
    writer.start()
    threads = [threading.Thread(target=lambda part: [writer.submit(r) for r in part], args=(records[i::8],))
               for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert writer.flush(timeout=30)
    assert writer.stats().written == 2000 and writer.pending == 0
    assert writer.close()

    stored = stored_requests(engine)
    assert len(stored) == 2000
    for record in records:
        row = stored[record.request_id]
        for name in RECORD_FIELDS:
            assert getattr(row, name) == getattr(record, name), (record.request_id, name)
        assert row.created_at.tzinfo is not None and row.created_at.utcoffset() == timedelta(0)
    assert_aggregates_match_requests(engine)


def test_a_request_id_is_stored_and_counted_once(engine):
    records = make_records(300, seed=1)
    writer = LogWriter(engine, batch_size=50, flush_interval_s=0.05)
    writer.start()
    for record in records[:200] + records[150:250]:  # duplicates inside a batch and across batches
        writer.submit(record)
    assert writer.flush(timeout=30)
    assert_aggregates_match_requests(engine)
    with engine.connect() as connection:
        before = connection.execute(sa.select(DailyAggregate.__table__)).all()
    # A batch retried after an ambiguous commit: every row is already there, so nothing is counted again.
    for record in records[:250]:
        writer.submit(dataclasses.replace(record, prompt_tokens=10**6))
    assert writer.flush(timeout=30)
    with engine.connect() as connection:
        assert sorted(connection.execute(sa.select(DailyAggregate.__table__)).all()) == sorted(before)
    for record in records[250:]:
        writer.submit(record)
    assert writer.close()
    assert len(stored_requests(engine)) == 300
    assert writer.stats().written == 300 and writer.stats().duplicates == 50 + 250
    assert_aggregates_match_requests(engine)


def test_records_survive_an_outage_and_land_exactly_once(engine, writer_engine, request, caplog):
    caplog.set_level(logging.INFO, logger="aio.db.log_writer")
    records = make_records(600, seed=2)
    writer = LogWriter(writer_engine, batch_size=64, flush_interval_s=0.05, retry_max_s=0.4)
    writer.start()
    for record in records[:200]:
        writer.submit(record)
    assert writer.flush(timeout=30)
    with outage(engine, request):
        for record in records[200:500]:
            writer.submit(record)
        deadline = time.monotonic() + 10
        while writer.stats().failures < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = writer.stats()
        assert stats.failures >= 3 and stats.in_outage and stats.pending == 300
    for record in records[500:]:
        writer.submit(record)
    assert writer.flush(timeout=30)
    assert writer.close()

    assert writer.stats().written == 600 and writer.stats().dropped == 0
    assert stored_requests(engine).keys() == {r.request_id for r in records}
    assert_aggregates_match_requests(engine)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "cannot write" in warnings[0].getMessage()  # once per outage
    assert len(infos) == 1 and "again" in infos[0].getMessage()


def test_a_long_outage_spills_to_disk_with_memory_bounded_and_loses_nothing(engine, writer_engine, request,
                                                                             tmp_path):
    records = make_records(400, seed=5, prefix="spill")
    writer = LogWriter(writer_engine, batch_size=32, flush_interval_s=0.05, retry_max_s=0.3, max_buffer=50,
                       spill_dir=tmp_path / "spill")
    writer.start()
    with outage(engine, request):
        for record in records[:300]:
            writer.submit(record)
        stats = writer.stats()
        assert stats.pending == 300 and 200 <= stats.spilled <= 250  # memory holds at most the buffer + a batch
        assert sum(1 for _ in (tmp_path / "spill").glob("*.jsonl")) == 1
    for record in records[300:]:
        writer.submit(record)
    assert writer.flush(timeout=60)
    assert writer.close()
    assert writer.stats().spilled == 0 and writer.stats().written == 400
    assert stored_requests(engine).keys() == {r.request_id for r in records}
    assert_aggregates_match_requests(engine)
    assert not list((tmp_path / "spill").glob("spill-*"))


def test_records_spilled_by_a_dead_process_are_adopted(engine, tmp_path):
    from aio.db.spill import SpillFile

    records = make_records(20, seed=6, prefix="orphan")
    dead = SpillFile(tmp_path / "spill")
    for record in records:
        dead.append(record)
    dead.path.rename(tmp_path / "spill" / "spill-999999999-deadbeef.jsonl")  # a pid that cannot exist
    with (tmp_path / "spill" / "spill-999999999-deadbeef.jsonl").open("a") as f:
        f.write('{"torn": ')  # a crash in the middle of a line
    writer = LogWriter(engine, batch_size=8, flush_interval_s=0.05, spill_dir=tmp_path / "spill")
    writer.start()
    assert writer.flush(timeout=30) and writer.close()
    assert {r.request_id for r in records} <= stored_requests(engine).keys()


def test_close_flushes_pending_records_and_reports_what_it_cannot_write(engine, writer_engine, request, caplog):
    writer = LogWriter(engine, batch_size=1000, flush_interval_s=60)  # only close() makes it write
    writer.start()
    for record in make_records(50, seed=3):
        writer.submit(record)
    assert writer.pending == 50
    assert writer.close(timeout=10) and writer.pending == 0
    assert len(stored_requests(engine)) == 50
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(make_records(1, prefix="late")[0])

    stuck = LogWriter(writer_engine, retry_max_s=0.1)
    stuck.start()
    with outage(engine, request):
        for record in make_records(5, seed=4, prefix="stuck"):
            stuck.submit(record)
        assert not stuck.close(timeout=0.5)
    assert "could not write 5 request record(s)" in caplog.text


def test_a_record_the_database_refuses_is_dropped_alone_and_unstorable_text_is_cleaned(engine, caplog):
    records = make_records(10, seed=5)
    records[3] = dataclasses.replace(records[3], status=None)  # NOT NULL: refused by the database
    records[4] = dataclasses.replace(records[4], prompt="nul\x00byte", tier_scores=[float("nan"), 0.5, 1.0])
    writer = LogWriter(engine, batch_size=100)
    writer.start()
    for record in records:
        writer.submit(record)
    assert writer.close(timeout=30)
    stored = stored_requests(engine)
    assert stored.keys() == {r.request_id for r in records} - {records[3].request_id}
    assert stored[records[4].request_id].prompt == "nul\ufffdbyte"
    assert stored[records[4].request_id].tier_scores == [None, 0.5, 1.0]
    assert writer.stats().dropped == 1 and records[3].request_id in caplog.text
    assert_aggregates_match_requests(engine)


# --- API keys ----------------------------------------------------------------------------------------------------

def test_api_keys(engine):
    store = KeyStore(engine, touch_interval_s=3600)
    info, key = store.create("alice")
    admin, admin_key = store.create("ops", role="admin")
    assert key.startswith("aio-") and len(key) == 4 + 43 and info.prefix == key[:12]
    assert store.verify(key) == info and store.verify(admin_key).is_admin
    for wrong in ["", "aio-", key[:-1], key + "x", key[:20] + ("A" if key[20] != "A" else "B") + key[21:],
                  "sk-" + key, admin_key[:12] + key[12:]]:
        assert store.verify(wrong) is None, wrong
    assert store.count_active() == 1 and store.count_active("admin") == 1 and store.count_active(None) == 2

    with engine.connect() as connection:  # only a prefix and a hash are stored
        dump = repr(connection.execute(sa.text("SELECT * FROM api_keys")).all())
    assert key not in dump and key[12:] not in dump and admin_key[12:] not in dump
    assert store.list()[0].last_used_at is not None  # verify() recorded the use

    with pytest.raises(ValueError, match="exists"):
        store.create("alice")
    with pytest.raises(ValueError, match="role"):
        store.create("bob", role="root")

    other = KeyStore(engine, cache_ttl_s=0.2)  # another server process
    assert other.verify(key).id == info.id
    assert store.revoke("alice") and not store.revoke("alice")
    assert store.verify(key) is None  # at once where it was revoked
    time.sleep(0.25)
    assert other.verify(key) is None  # within the cache TTL elsewhere
    assert store.revoke(admin.id) and store.count_active(None) == 0
    assert [k.active for k in store.list()] == [False, False]
    new_info, new_key = store.create("alice")  # the name is free again
    assert store.verify(new_key).id == new_info.id and new_info.id not in (info.id, admin.id)


# --- the CLI -----------------------------------------------------------------------------------------------------

def test_cli_db_and_keys(database_url, tmp_path):
    from aio.commands.db import db_app
    from aio.commands.keys import keys_app
    from aio.db.migrate import head_revision

    app = typer.Typer()
    app.add_typer(db_app, name="db")
    app.add_typer(keys_app, name="keys")
    runner = CliRunner()
    env = {"AIO_DATABASE_URL": database_url, "AIO_HOME": str(tmp_path)}

    def run(*args: str, code: int = 0):
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == code, result.output
        return result

    assert "(empty)" in run("db", "current").output
    run("db", "current", "--check", code=1)
    if database_url.startswith("postgresql"):  # a shared server is migrated on purpose, not by `keys`
        assert "aio db upgrade" in run("keys", "list", code=1).output
    head = head_revision()
    assert f"upgraded from (empty) to {head}" in run("db", "upgrade").output
    assert f"already at revision {head}" in run("db", "upgrade").output
    assert run("db", "current", "--check").stdout.strip() == f"{head} (head)"  # stderr: the database line

    created = run("keys", "create", "--name", "ci")
    key = created.stdout.strip()
    assert "shown only once" in created.stderr and key.startswith("aio-")
    engine = make_engine(database_url)
    try:
        assert KeyStore(engine).verify(key).name == "ci"
        assert " ci " in run("keys", "list").output and key not in run("keys", "list").output
        run("keys", "create", "--name", "ci", code=1)
        run("keys", "revoke", "ci")
        assert KeyStore(engine).verify(key) is None
        assert "no active key" in run("keys", "revoke", "ci", code=1).output
    finally:
        engine.dispose()


def test_cli_reports_a_bad_database_without_its_password(tmp_path):
    from aio.commands.db import db_app

    result = CliRunner().invoke(db_app, ["upgrade"], env={
        "AIO_DATABASE_URL": "postgresql://aio:hunter2@127.0.0.1:1/aio", "AIO_HOME": str(tmp_path)})
    assert result.exit_code == 1 and "cannot use the database" in result.output
    assert "hunter2" not in result.output and "aio:***@" in result.output
