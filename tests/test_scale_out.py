"""Replicas on one PostgreSQL: serving through a database outage longer than every cache, no request lost to a
SIGKILL (mid-stream, mid-outage), one threshold controller per deployment."""
from __future__ import annotations

import signal
import subprocess
import time

import httpx
import pytest
import sqlalchemy as sa

from aio.db.database import make_engine
from benchmarks.live_server import aio_command, create_key, server_env, start_server
from tests.test_reliability import tiny_config
from tests.test_server_api import HELLO, log_rows


def upgraded(home, database_url: str) -> str:
    done = subprocess.run(aio_command("db", "upgrade"), env=server_env(home, database_url, "k"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return database_url


def sql(database_url: str, query: str):
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(query)).all()
    finally:
        engine.dispose()


def chat(server, key: str | None = None, **body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(server.api_url + "/chat/completions", headers=headers, timeout=60,
                      json={"model": "small", "messages": HELLO, "max_tokens": 2, **body})


def test_keyed_requests_are_answered_through_an_outage_longer_than_every_cache(tmp_path, checkpoint_dir,
                                                                                postgres_server,
                                                                                postgres_database_factory):
    database_url = upgraded(tmp_path, postgres_database_factory("keyed_outage"))
    key = create_key(tmp_path, database_url, "tenant")
    never_seen = create_key(tmp_path, database_url, "other")
    server = start_server(tiny_config(tmp_path / "aio.toml", checkpoint_dir("llama")), tmp_path, database_url,
                          AIO_OPEN_ENDPOINT="false", AIO_MONITOR_MODE="off", AIO_REPLICA="replica-a")
    ids = []
    try:
        first = chat(server, key)
        assert first.status_code == 200
        ids.append(first.headers["x-request-id"])
        postgres_server.stop()
        try:
            down_since = time.monotonic()
            while time.monotonic() - down_since < 12:  # > the key cache (5 s) and every other cache
                response = chat(server, key)
                assert response.status_code == 200, response.text
                ids.append(response.headers["x-request-id"])
                time.sleep(0.3)
            ready = httpx.get(server.base_url + "/ready")  # still ready: a balancer must not drain every replica
            assert ready.status_code == 200 and ready.json()["status"] == "degraded"
            assert ready.json()["checks"]["database"].startswith("unreachable")
            unknown = chat(server, never_seen)
            assert unknown.status_code == 503 and unknown.headers["retry-after"]
            assert unknown.json()["error"]["message"] == "cannot check the API key right now; retry later"
        finally:
            postgres_server.start()
        rows = log_rows(server, ids, timeout=60)
        assert set(rows) == set(ids) and all(r["status"] == "ok" for r in rows.values())
        assert {r["replica"] for r in rows.values()} == {"replica-a"}
        assert httpx.get(server.base_url + "/ready").json()["status"] == "ready"
        assert sql(database_url, "SELECT COUNT(*) FROM requests WHERE http_status = 200")[0][0] == len(ids)
    finally:
        server.stop()


def test_concurrent_upgrades_report_one_migration(tmp_path, postgres_database_factory):
    database_url = postgres_database_factory("concurrent_upgrade")
    runs = [subprocess.Popen(aio_command("db", "upgrade"), env=server_env(tmp_path, database_url, "k"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    from aio.db.migrate import head_revision

    head = head_revision()
    reports = sorted(out.strip().split(": ", 1)[1] for out, _ in outputs)
    assert reports == sorted([f"upgraded from (empty) to {head}"] + [f"already at revision {head}"] * 2)


def test_sigkill_mid_stream_and_mid_outage_loses_no_request(tmp_path, checkpoint_dir, postgres_server,
                                                            postgres_database_factory):
    database_url = upgraded(tmp_path, postgres_database_factory("sigkill"))
    path = checkpoint_dir("llama", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4, intermediate_size=512,
                          max_position_embeddings=1024)
    config = tmp_path / "aio.toml"
    config.write_text("".join(f'[tiers.{tier}]\npath = "{path}"\nmax_model_len = 1024\nkv_cache_bytes = {16 << 20}\n'
                              "input_price_per_million = 1.0\noutput_price_per_million = 2.0\n\n"
                              for tier in ("small", "large")))
    env = dict(AIO_MONITOR_MODE="off", AIO_LOG_BUFFER_SIZE="3", AIO_LOG_BATCH_SIZE="2")
    server = start_server(config, tmp_path, database_url, **env)
    answered, cut = [], []
    try:
        for _ in range(3):
            answered.append(chat(server).headers["x-request-id"])
        log_rows(server, answered)
        postgres_server.stop()
        for _ in range(8):  # answered while the database is down: in memory and in the spill file only
            response = chat(server)
            assert response.status_code == 200
            answered.append(response.headers["x-request-id"])
        with httpx.Client(timeout=60) as client:
            streams = []
            for _ in range(2):
                request = client.build_request("POST", server.api_url + "/chat/completions",
                                               json={"model": "small", "messages": HELLO, "max_tokens": 900,
                                                     "stream": True, "ignore_eos": True, "temperature": 0})
                response = client.send(request, stream=True)
                assert response.status_code == 200, response.read()
                lines = response.iter_lines()
                next(lines), next(lines)  # the role chunk and a first token: it is generating
                cut.append(response.headers["x-request-id"])
                streams.append((response, lines))
            server.process.send_signal(signal.SIGKILL)
            server.process.wait(30)
            for response, lines in streams:
                with pytest.raises(httpx.HTTPError):
                    list(lines)  # the stream is cut
                response.close()
    except BaseException:
        server.stop()
        raise
    finally:
        postgres_server.start()
    restarted = start_server(config, tmp_path, database_url, **env)
    try:
        rows = log_rows(restarted, answered + cut, timeout=60)
        assert set(rows) == set(answered + cut)
        assert all(rows[i]["status"] == "ok" and rows[i]["completion_tokens"] == 2 for i in answered)
        for request_id in cut:
            assert rows[request_id]["status"] == "interrupted" and rows[request_id]["http_status"] == 500
            assert rows[request_id]["prompt_tokens"] > 0 and rows[request_id]["cost_usd"] > 0  # billed its prompt
        total = len(answered) + len(cut)
        assert sql(database_url, "SELECT COUNT(*) FROM requests")[0][0] == total
        assert sql(database_url, "SELECT SUM(num_requests) FROM daily_aggregates")[0][0] == total
        assert not list(tmp_path.glob("log-spill/spill-*")) or all(
            not p.read_text() for p in tmp_path.glob("log-spill/spill-*"))
    finally:
        restarted.stop()
    assert not list((tmp_path / "log-spill").glob("journal-*.jsonl"))  # all done: the journal is gone


def test_two_replicas_share_one_controller_that_counts_both_and_builds_on_manual_changes(database_url):
    from aio.db.leases import SqlLease
    from aio.db.migrate import upgrade
    from aio.monitoring import SqlVerdictStore
    from aio.routing import registry
    from quality_monitor import Candidate, ControllerSettings, ReplayResult, ThresholdController, Verdict
    from quality_monitor.control import CentralControl

    engine = make_engine(database_url)
    upgrade(engine)
    try:
        replicas = []
        for name in ("a", "b"):
            controller = ThresholdController(ControllerSettings(window=4, min_verdicts=4, cooldown=4, step=0.1,
                                                                max_offset=0.3))
            store = SqlVerdictStore(engine)
            replicas.append(CentralControl(controller, store, SqlLease(engine, "quality-monitor", name, 60.0),
                                           ("small",), 0.1))
        a, b = replicas
        assert a.step() == [] and b.step() == [] and a.is_leader and not b.is_leader

        def verdict(i: int, passed: bool, store) -> None:
            request_id = f"req-{i}"
            with engine.begin() as connection:
                connection.execute(sa.text("INSERT INTO requests (request_id, created_at, status, prompt_tokens, "
                                           "completion_tokens, cost_usd, baseline_cost_usd, stream, num_choices, "
                                           "http_status) VALUES (:id, CURRENT_TIMESTAMP, 'ok', 0, 0, 0, 0, false, 1, "
                                           "200)"), {"id": request_id})
            store.save(Verdict(Candidate(request_id, "small", [], "x", 4), "large",
                               ReplayResult("y", "m", 1, 1, 0.0), 0.0, "exact", passed))

        for i in range(4):  # two failures stored by each replica: the leader counts all four
            verdict(i, False, (a, b)[i % 2].store)
        [change] = a.step()
        assert b.step() == [] and (change.old_offset, change.new_offset) == (0.0, 0.1)
        assert registry.router_state(engine).offsets == {"small": pytest.approx(0.1)}
        registry.set_router_state(engine, updated_by="operator", offsets={})  # `aio router thresholds --reset`
        for i in range(4, 8):
            verdict(i, False, b.store)
        [change] = a.step()
        assert registry.router_state(engine).offsets == {"small": pytest.approx(0.1)}  # +0.1 on the reset value
        changes = sql(database_url, "SELECT updated_by FROM threshold_changes ORDER BY id")
        assert [r[0] for r in changes] == ["quality monitor", "operator", "quality monitor"]  # each step once
        a.release()
        assert b.step() == [] and b.is_leader  # the lease passes on
    finally:
        engine.dispose()


def test_the_lease_expires_when_its_holder_stops_renewing(database_url):
    from aio.db.leases import SqlLease
    from aio.db.migrate import upgrade

    engine = make_engine(database_url)
    upgrade(engine)
    try:
        first, second = SqlLease(engine, "x", "first", 0.5), SqlLease(engine, "x", "second", 0.5)
        assert first.hold() and not second.hold() and first.hold()
        time.sleep(0.6)
        assert second.hold() and not first.hold() and first.current_holder() == "second"
    finally:
        engine.dispose()


def test_a_promoted_classifier_loads_on_a_replica_that_never_saw_its_folder(database_url, tmp_path):
    import shutil

    from aio.db.migrate import upgrade
    from aio.routing import Router, RouterWatcher, registry
    from classifier import HeuristicClassifier

    engine = make_engine(database_url)
    upgrade(engine)
    try:
        trainer_home, replica_home = tmp_path / "trainer", tmp_path / "replica"
        trained = HeuristicClassifier(version="heuristic-shared", thetas=[3.0, 4.0])
        trained.save(trainer_home / "classifiers" / trained.version)
        registry.register(engine, version=trained.version, kind="heuristic",
                          path=str(trainer_home / "classifiers" / trained.version), status="candidate")
        shutil.rmtree(trainer_home)  # the folder is on another machine: only the database is shared
        registry.promote(engine, trained.version)
        router = Router(HeuristicClassifier(), ["small", "medium", "large"], quality=0.5)
        RouterWatcher(router, engine, 0.5, cache_dir=replica_home / "classifiers").poll_once()
        assert router.classifier.version == "heuristic-shared"
        text = "Prove that there are infinitely many primes, then discuss the distribution of twin primes."
        assert router.classifier.predict_proba([text]).tolist() == trained.predict_proba([text]).tolist()
        assert list((replica_home / "classifiers").iterdir())  # unpacked once into the replica's own cache
    finally:
        engine.dispose()


def test_the_journal_recovers_what_a_dead_process_had_not_written_and_leaves_live_ones_alone(tmp_path):
    from aio.db.journal import Journal
    from aio.db.records import RequestRecord

    dead = Journal(tmp_path)
    begun = [RequestRecord(request_id=f"r{i}", status="ok", prompt_tokens=5) for i in range(4)]
    for record in begun:
        dead.begin(record)
    dead.end(RequestRecord(request_id="r0", status="ok", prompt_tokens=5, completion_tokens=7))
    dead.end(RequestRecord(request_id="r1", status="ok", prompt_tokens=5, completion_tokens=3))
    dead.done(["r1", "r3"])  # in the database already
    live = Journal(tmp_path)
    live.begin(RequestRecord(request_id="live", status="ok"))
    dead.close(delete_if_done=False)  # the process dies: its lock goes, its files stay

    heir = Journal(tmp_path)
    recovered = {r.request_id: r for r in heir.adopt_orphans()}
    assert set(recovered) == {"r0", "r2"}  # not the done ones, not the live process's
    assert recovered["r0"].status == "ok" and recovered["r0"].completion_tokens == 7
    assert recovered["r2"].status == "interrupted" and recovered["r2"].http_status == 500
    assert heir.num_open == 2  # re-journaled by the heir until its database write
    heir.done(["r0", "r2"])
    heir.close()
    live.close(delete_if_done=False)
    assert [p.name.split("-")[0] for p in tmp_path.iterdir()] == ["journal"]  # only the live one's file is left


@pytest.mark.slow
def test_the_replicated_load_test_loses_nothing_when_a_replica_is_killed_and_postgres_stops(postgres_server):
    from benchmarks.loadtest import main

    report = main(["--replicas", "2", "--kill-one", "--clients", "3", "--duration", "40", "--outage-s", "8",
                   "--max-tokens", "8"])
    assert report["ok"] and report["answered"] > 0 and report["server_errors"] == 0
    assert report["lost_from_log"] == 0 and report["duplicated_in_log"] == 0
    assert report["cut_rows_missing"] == 0 and report["interrupted_rows"] >= report["cut"]
