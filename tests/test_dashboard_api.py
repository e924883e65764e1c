"""The dashboard's JSON API against a live `aio serve` with a seeded log: every number is recomputed here from the
seeded records (plain Python and numpy, not the dashboard's code); auth (401/403) and bad parameters (400); the
migration's backfill of the new aggregates and the retention prune."""
from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone

import httpx
import numpy as np
import pytest
import sqlalchemy as sa

from aio.db import migrate
from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.log_writer import LogWriter
from aio.db.models import ClassifierVersion, DailyAggregate, DailyHistogram, DailyUsage, Request, Verification
from aio.db.records import RequestRecord
from benchmarks.live_server import start_server

ADMIN_KEY = "dashboard-test-admin-key-0123456789abcdefghijk"
START = datetime(2025, 3, 1, tzinfo=timezone.utc)  # the seeded window: 2025-03-01 .. 2025-03-09
TIERS = ("small", "medium", "large")
FACTOR = 2 ** 0.25  # the width of a latency histogram bucket
ENDPOINTS = ("summary", "traffic", "cost", "breakdown", "latency", "quality", "router", "engine")
XSS_PROMPT = '<script>alert("xss-prompt")</script>'
XSS_ANSWER = '<img src=x onerror="alert(\'xss-answer\')">'


def make_records(count: int, seed: int, start: datetime, span: timedelta, prefix: str) -> list[RequestRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(count):
        tier = rng.choice([*TIERS, None])
        tokens_in, tokens_out = rng.randrange(1, 900), rng.randrange(0, 400)
        price = {"small": 0.1, "medium": 0.3, "large": 3.0, None: 0.0}[tier]
        record = RequestRecord(
            request_id=f"{prefix}-{i}", status=rng.choice(["ok", "ok", "ok", "error", "cancelled", "rejected"]),
            created_at=start + span * rng.random(), tier=tier, model=tier and f"model-{tier}",
            routing_reason=rng.choice(["classifier", "classifier", "explicit", "escalation", "fallback", "cascade"]),
            classifier_version="v1", routing_score=rng.choice([rng.random(), None]), quality=0.5,
            key_id=rng.choice([1, 2, None]), user=rng.choice(["alice", "bob", "carol", "dave", None]),
            prompt='[{"role": "user", "content": "hello"}]', answer="hi",
            prompt_tokens=tokens_in, completion_tokens=tokens_out,
            cost_usd=(tokens_in + tokens_out) * price / 1e6, baseline_cost_usd=(tokens_in + tokens_out) * 3.0 / 1e6,
            ttft_ms=rng.choice([rng.lognormvariate(4, 1), None]), latency_ms=rng.lognormvariate(7, 0.8),
            itl_ms=rng.choice([rng.lognormvariate(2.5, 0.4), None]),
            queue_ms=rng.choice([rng.expovariate(0.05), None]))
        if record.routing_reason == "cascade" and tier is not None:  # replaced answers cost part of cost_usd
            record.confidence, record.cascade_from_tier, record.cascade_confidence = -0.2, "small", -rng.uniform(1, 4)
            record.cascade_cost_usd = record.cost_usd * rng.random()
        records.append(record)
    return records


def write(engine: sa.Engine, records: list[RequestRecord]) -> None:
    writer = LogWriter(engine, batch_size=97, flush_interval_s=0.05)
    writer.start()
    for record in records:
        writer.submit(record)
    assert writer.flush(60) and writer.close()


def make_verifications(records: list[RequestRecord], seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for record in records:
        if record.tier in ("small", "medium") and rng.random() < 0.3:
            passed = rng.random() < 0.8
            rows.append(dict(request_id=record.request_id, created_at=record.created_at + timedelta(seconds=30),
                             tier=record.tier, reference_tier="large", reference_model="model-large",
                             reference_answer="the reference", similarity=0.95 if passed else 0.4, passed=passed,
                             method="cosine", answer="the tier's answer", judge_cost_usd=rng.random() / 1000))
    return rows


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def seeded(request, tmp_path_factory):
    """A live server on a log seeded with: 600 requests in 2025-03-01..09 (+ verdicts, one redacted and one with
    HTML in its texts), 60 requests in the last 20 hours, a classifier version and a threshold change."""
    home = tmp_path_factory.mktemp("dashboard-api")
    url = f"sqlite:///{home / 'aio.db'}" if request.param == "sqlite" else \
        request.getfixturevalue("postgres_database_factory")("dashboard_api")
    engine = make_engine(url)
    migrate.upgrade(engine)
    old = make_records(600, 1, START, timedelta(days=9), "old")
    old[0].tier, old[0].status, old[0].prompt, old[0].answer = "small", "ok", None, None  # log_prompts = false
    old[1].tier, old[1].status = "medium", "ok"
    old[1].prompt = '[{"role": "user", "content": "%s"}]' % XSS_PROMPT.replace('"', '\\"')
    old[1].answer = XSS_ANSWER
    now = datetime.now(timezone.utc)
    recent = make_records(60, 2, now - timedelta(hours=20), timedelta(hours=19), "recent")
    write(engine, old + recent)
    verifications = make_verifications(old, 3)
    for i, forced in ((0, old[0]), (1, old[1])):
        verifications.append(dict(request_id=forced.request_id, created_at=forced.created_at, tier=forced.tier,
                                  reference_tier="large", reference_model="model-large",
                                  reference_answer="secret reference" if i == 0 else XSS_PROMPT,
                                  similarity=0.1, passed=False, method="cosine",
                                  answer="secret answer" if i == 0 else XSS_ANSWER, judge_cost_usd=0.002))
    with engine.begin() as connection:
        connection.execute(sa.insert(Verification), verifications)
        connection.execute(sa.insert(ClassifierVersion), [dict(
            version="v1", created_at=START + timedelta(days=2), kind="sklearn-head", metrics={"log_loss": 0.42},
            active=True, status="active", promoted_at=START + timedelta(days=2), num_train_examples=100)])
    from aio.routing import registry

    registry.set_router_state(engine, updated_by="test", offsets={"small": 0.05}, note="seeded change")
    _, chat_key = KeyStore(engine).create("chat-user", "user")
    engine.dispose()
    server = start_server(None, home, url, admin_key=ADMIN_KEY, AIO_MONITOR_MODE="off", AIO_DEMO_MODEL="random",
                          AIO_QUALITY="0.5")
    try:
        yield {"server": server, "old": old, "recent": recent, "verifications": verifications, "chat_key": chat_key,
               "now": now}
    finally:
        server.stop()


def get(seeded, endpoint: str, **params) -> dict:
    response = httpx.get(f"{seeded['server'].base_url}/api/dashboard/{endpoint}", params=params,
                         headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


# --- the expectations, from the seeded records ---------------------------------------------------------------------

def tier_of(record: RequestRecord) -> str:
    return record.tier or "none"


def sums(records: list[RequestRecord]) -> dict[str, float]:
    cost = sum(r.cost_usd for r in records)
    baseline = sum(r.baseline_cost_usd for r in records)
    return {"requests": len(records), "errors": sum(r.status != "ok" for r in records),
            "tokens": sum(r.prompt_tokens + r.completion_tokens for r in records), "cost_usd": cost,
            "baseline_cost_usd": baseline, "savings_usd": baseline - cost,
            "savings_pct": 100 * (baseline - cost) / baseline if baseline else None}


def cascade_sums(records: list[RequestRecord]) -> dict[str, float]:
    cascaded = [r for r in records if r.cascade_from_tier is not None]
    return {"cascades": len(cascaded), "cascade_cost_usd": sum(r.cascade_cost_usd for r in cascaded)}


def nearest_rank(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), 100 * q, method="inverted_cdf"))


def wilson(passed: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = passed / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n), (centre + spread) / (1 + z * z / n)


def assert_close(actual: dict, expected: dict) -> None:
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


AGG = {"range": "custom", "start": "2025-03-01", "end": "2025-03-09"}  # 9 whole days: the daily aggregates
RAW = {"range": "custom", "start": "2025-03-04T06:00:00Z", "end": "2025-03-05T18:00:00Z"}  # 36 h: raw rows


def in_range(records: list[RequestRecord], params: dict) -> list[RequestRecord]:
    if params is AGG:
        return [r for r in records if date(2025, 3, 1) <= r.created_at.date() <= date(2025, 3, 9)]
    start, end = datetime(2025, 3, 4, 6, tzinfo=timezone.utc), datetime(2025, 3, 5, 18, tzinfo=timezone.utc)
    return [r for r in records if start <= r.created_at < end]


# --- the tests -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params", [AGG, RAW], ids=["aggregates", "raw"])
def test_summary_cost_and_savings_equal_the_seeded_sums(seeded, params):
    records = in_range(seeded["old"], params)
    data = get(seeded, "summary", **params)
    assert data["range"]["source"] == ("aggregates" if params is AGG else "raw")
    everything = records
    rejected = [r for r in records if r.tier is None]  # refused before a tier took them: not a tier, not errors
    records = [r for r in records if r.tier is not None]
    assert_close(data["total"], {**sums(records), **cascade_sums(records)})
    assert data["total"]["cascades"] > 0
    assert data["total"]["rejected"] == data["rejected"]["requests"] == len(rejected) > 0
    by_tier = defaultdict(list)
    for r in records:
        by_tier[tier_of(r)].append(r)
    assert set(data["tiers"]) == set(by_tier) and "none" not in data["tiers"]
    for tier, rows in by_tier.items():
        assert_close(data["tiers"][tier], {**sums(rows), **cascade_sums(rows)})
    judged = [v for v in seeded["verifications"] if any(v["request_id"] == r.request_id for r in records)
              and (params is AGG or in_range_moment(v["created_at"], params))]
    if params is AGG:
        assert data["total"]["quality_verdicts"] == len(judged)
        assert data["total"]["quality_pass_rate"] == pytest.approx(sum(v["passed"] for v in judged) / len(judged))
        assert data["total"]["judge_cost_usd"] == pytest.approx(sum(v["judge_cost_usd"] for v in judged))
    ttft = [r.ttft_ms for r in everything if r.ttft_ms is not None]
    p95 = data["total"]["ttft_p95_ms"]
    if params is RAW:
        assert p95 == pytest.approx(nearest_rank(ttft, 0.95))
    else:
        assert nearest_rank(ttft, 0.95) / FACTOR <= p95 <= nearest_rank(ttft, 0.95) * FACTOR


def in_range_moment(moment: datetime, params: dict) -> bool:
    start, end = datetime(2025, 3, 4, 6, tzinfo=timezone.utc), datetime(2025, 3, 5, 18, tzinfo=timezone.utc)
    return start <= moment < end


def test_relative_ranges_read_the_recent_rows(seeded):
    expected = sums([r for r in seeded["recent"] if r.tier is not None])  # the rejected ones are counted apart
    rejected = sum(r.tier is None for r in seeded["recent"])
    for range_ in ("24h", "7d", "30d"):
        total = get(seeded, "summary", range=range_)["total"]
        assert_close(total, expected)
        assert total["rejected"] == rejected


@pytest.mark.parametrize("params", [AGG, RAW], ids=["aggregates", "raw"])
def test_traffic_shares_and_cost_series_per_bucket(seeded, params):
    records = in_range(seeded["old"], params)
    traffic, cost = get(seeded, "traffic", **params), get(seeded, "cost", **params)
    assert traffic["buckets"] == cost["buckets"]
    if params is AGG:
        assert traffic["buckets"] == [f"2025-03-0{d}" for d in range(1, 10)]
        bucket_of = lambda r: r.created_at.date().isoformat()  # noqa: E731
    else:
        assert len(traffic["buckets"]) == 36 and traffic["buckets"][0] == "2025-03-04T06:00:00Z"
        bucket_of = lambda r: r.created_at.strftime("%Y-%m-%dT%H:00:00Z")  # noqa: E731
    cells = defaultdict(list)
    for r in records:
        cells[bucket_of(r), tier_of(r)].append(r)
    running = 0.0
    for i, bucket in enumerate(traffic["buckets"]):
        rows = [r for r in records if bucket_of(r) == bucket]
        total_tokens = sum(r.prompt_tokens + r.completion_tokens for r in rows)
        for tier, values in traffic["tiers"].items():
            mine = cells.get((bucket, tier), [])
            assert values["requests"][i] == len(mine)
            tokens = sum(r.prompt_tokens + r.completion_tokens for r in mine)
            assert values["tokens"][i] == tokens
            assert values["request_share"][i] == (pytest.approx(len(mine) / len(rows)) if rows else None)
            assert values["token_share"][i] == (pytest.approx(tokens / total_tokens) if total_tokens else None)
            assert cost["tiers"][tier]["cost_usd"][i] == pytest.approx(sum(r.cost_usd for r in mine), abs=1e-12)
        saving = sum(r.baseline_cost_usd - r.cost_usd for r in rows)
        running += saving
        assert cost["total"]["cost_usd"][i] == pytest.approx(sum(r.cost_usd for r in rows), abs=1e-12)
        assert cost["total"]["savings_usd"][i] == pytest.approx(saving, abs=1e-12)
        assert cost["total"]["cumulative_savings_usd"][i] == pytest.approx(running, abs=1e-12)


@pytest.mark.parametrize("params", [AGG, RAW], ids=["aggregates", "raw"])
def test_breakdowns_by_tier_key_user_model(seeded, params):
    records = in_range(seeded["old"], params)
    data = get(seeded, "breakdown", limit=3, **params)["breakdowns"]
    keys = {"tier": tier_of, "key": lambda r: r.key_id or 0, "user": lambda r: r.user, "model": lambda r: r.model}
    names = {0: "(no key)", 1: "chat-user"}
    for by, key in keys.items():
        groups = defaultdict(list)
        for r in records:
            groups[key(r)].append(r)
        ranked = sorted(groups.items(), key=lambda item: -sum(r.cost_usd for r in item[1]))
        rows = data[by]["rows"]
        assert len(rows) == min(3, len(groups)) and data[by]["num_groups"] == len(groups)
        for row, (value, members) in zip(rows, ranked):
            assert row[by] == value
            assert_close(row, sums(members))
            if by == "key":
                assert row["label"] == names.get(value, f"key {value}")
        rest = [r for _, members in ranked[3:] for r in members]
        if rest:
            assert_close(data[by]["other"], sums(rest))
        assert_close(data[by]["total"], sums(records))


@pytest.mark.parametrize("params", [AGG, RAW], ids=["aggregates", "raw"])
def test_latency_percentiles(seeded, params):
    records = in_range(seeded["old"], params)
    data = get(seeded, "latency", **params)
    assert data["method"] == ("histogram" if params is AGG else "exact")
    groups = defaultdict(list)
    for r in records:
        groups[tier_of(r)].append(r)
        groups["all"].append(r)
    assert set(data["tiers"]) == set(groups)
    for tier, rows in groups.items():
        for metric in ("ttft_ms", "itl_ms", "latency_ms", "queue_ms"):
            values = [getattr(r, metric) for r in rows if getattr(r, metric) is not None]
            got = data["tiers"][tier].get(metric)
            if not values:
                assert got is None
                continue
            assert got["count"] == len(values)
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                exact = nearest_rank(values, q)
                if params is RAW:
                    assert got[name] == pytest.approx(exact), (tier, metric, name)
                else:
                    assert exact / FACTOR <= got[name] <= exact * FACTOR, (tier, metric, name, exact, got[name])
            assert got["p99_p50_ratio"] == pytest.approx(got["p99"] / got["p50"])
            assert got["contention"] == (got["p99"] / got["p50"] > 10 and len(values) >= 50 and got["p50"] >= 1.0)


def test_quality_pass_rates_wilson_and_judge_cost(seeded):
    data = get(seeded, "quality", **AGG)
    verdicts = seeded["verifications"]
    assert data["buckets"] == [f"2025-03-0{d}" for d in range(1, 10)]
    for tier in ("small", "medium"):
        mine = [v for v in verdicts if v["tier"] == tier]
        passed = sum(v["passed"] for v in mine)
        got = data["tiers"][tier]
        assert (got["verdicts"], got["passed"]) == (len(mine), passed)
        assert (got["ci_low"], got["ci_high"]) == pytest.approx(wilson(passed, len(mine)))
        for i, day in enumerate(data["buckets"]):
            today = [v for v in mine if v["created_at"].date().isoformat() == day]
            point = got["series"][i]
            assert point["verdicts"] == len(today)
            if today:
                assert point["pass_rate"] == pytest.approx(sum(v["passed"] for v in today) / len(today))
                assert (point["ci_low"], point["ci_high"]) == pytest.approx(wilson(sum(v["passed"] for v in today),
                                                                                   len(today)))
    assert data["judge_cost_usd"] == pytest.approx(sum(v["judge_cost_usd"] for v in verdicts))
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # the textbook value


def test_failing_samples_respect_redaction(seeded):
    samples = get(seeded, "quality", samples=500, **AGG)["failing_samples"]
    failed = [v for v in seeded["verifications"] if not v["passed"]]
    assert len(samples) == len(failed)
    by_id = {s["request_id"]: s for s in samples}
    redacted = by_id[seeded["old"][0].request_id]
    assert redacted["redacted"] and redacted["prompt"] == redacted["answer"] == redacted["reference_answer"] \
        == "[redacted]"
    html = by_id[seeded["old"][1].request_id]
    assert html["prompt"] == f"user: {XSS_PROMPT}" and html["answer"] == XSS_ANSWER
    assert all("secret" not in str(s) for s in samples)


def test_router_histogram_thresholds_escalations_and_versions(seeded):
    records = in_range(seeded["old"], AGG)
    data = get(seeded, "router", **AGG)
    expected = defaultdict(lambda: [0] * 20)
    for r in records:
        if r.routing_score is not None:
            expected[tier_of(r)][min(int(r.routing_score * 20), 19)] += 1
    assert data["histogram"]["tiers"] == dict(expected)
    assert data["reroutes"]["total_escalations"] == sum(r.routing_reason == "escalation" for r in records)
    assert data["reroutes"]["total_fallbacks"] == sum(r.routing_reason == "fallback" for r in records)
    assert data["thresholds"]["tiers"]["small"] == pytest.approx(0.55)  # quality 0.5 + the seeded offset
    assert data["thresholds"]["tiers"]["large"] is None
    assert [v["version"] for v in data["classifier_versions"] if v["in_range"]] == ["v1"]
    assert data["classifier_versions"][-1]["metrics"] == {"log_loss": 0.42}
    recent = get(seeded, "router", range="24h")
    assert [c["note"] for c in recent["threshold_changes"]] == ["seeded change"]
    assert recent["threshold_changes"][0]["offsets"] == {"small": 0.05}


def test_engine_stats_of_the_local_tiers(seeded):
    tiers = get(seeded, "engine")["tiers"]
    assert set(tiers) == set(TIERS)
    for stats in tiers.values():
        assert stats["available"] and 0 <= stats["kv_cache_usage"] <= 1 and stats["num_running"] >= 0


def test_every_endpoint_refuses_no_key_401_and_a_chat_key_403(seeded):
    base = seeded["server"].base_url
    for endpoint in ENDPOINTS:
        url = f"{base}/api/dashboard/{endpoint}"
        response = httpx.get(url)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        response = httpx.get(url, headers={"Authorization": f"Bearer {seeded['chat_key']}"})
        assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error"
        assert httpx.get(url, cookies={"aio_dashboard": seeded["chat_key"]}).status_code == 401
        assert httpx.get(url, cookies={"aio_dashboard": ADMIN_KEY}).status_code == 401  # a key is no session
    assert httpx.get(f"{base}/dashboard").status_code == 401
    assert httpx.get(f"{base}/dashboard", headers={"Authorization": f"Bearer {seeded['chat_key']}"}).status_code == 403
    login = httpx.post(f"{base}/dashboard/login", data={"key": seeded["chat_key"]})
    assert login.status_code == 403 and "aio_dashboard" not in login.cookies
    login = httpx.post(f"{base}/dashboard/login", data={"key": ADMIN_KEY})
    assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()


@pytest.mark.parametrize("params, param, fragment", [
    ({"range": "bogus"}, "range", "invalid range"),
    ({"range": "0d"}, "range", "invalid range"),
    ({"range": "custom"}, "start", "needs start"),
    ({"range": "custom", "start": "2025-03-05", "end": "2025-03-01"}, "start", "must be before end"),
    ({"range": "custom", "start": "yesterday"}, "start", "invalid start"),
    ({"range": "7d", "start": "2025-03-01"}, "range", "range=custom"),
    ({"by": "nope"}, "by", "invalid by"),
    ({"limit": "0"}, "query.limit", "limit"),  # FastAPI's validation, mapped to 400 by aio.server.errors
])
def test_bad_parameters_are_openai_shaped_400s(seeded, params, param, fragment):
    response = httpx.get(f"{seeded['server'].base_url}/api/dashboard/breakdown", params=params,
                         headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and fragment in error["message"]


# --- the migration's backfill and the retention prune (no server) ----------------------------------------------------

def _rows(engine: sa.Engine, table, columns) -> set:
    with engine.connect() as connection:
        return {tuple(row) for row in connection.execute(sa.select(*(table.c[c] for c in columns)))}


def test_migration_backfills_the_new_aggregates_from_existing_requests(tmp_path):
    records = make_records(400, 7, START, timedelta(days=4), "m")
    for r in records:
        r.itl_ms = r.queue_ms = None  # columns the old schema does not have
        r.confidence = r.cascade_from_tier = r.cascade_confidence = r.cascade_cost_usd = None
    reference = make_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    migrate.upgrade(reference)
    write(reference, records)
    old = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate.upgrade(old, "0003")
    later_request_columns = ("itl_ms", "queue_ms", "replica", "confidence", "cascade_from_tier", "cascade_confidence",
                             "cascade_cost_usd", "cache_hit", "cache_saved_usd")
    old_request_columns = [c for c in Request.__table__.columns.keys() if c not in later_request_columns]
    old_aggregate_columns = [c for c in DailyAggregate.__table__.columns.keys()
                             if c not in ("num_escalations", "num_fallbacks", "num_cascades", "cascade_cost_usd")]
    with reference.connect() as source, old.begin() as target:
        for model, columns in ((Request, old_request_columns), (DailyAggregate, old_aggregate_columns)):
            full = model.__table__
            rows = [dict(row._mapping) for row in source.execute(sa.select(*(full.c[c] for c in columns)))]
            target.execute(sa.table(full.name, *(sa.column(c, full.c[c].type) for c in columns)).insert(), rows)
    migrate.upgrade(old)
    for table in (DailyHistogram.__table__, DailyUsage.__table__, DailyAggregate.__table__):
        columns = [c for c in table.columns.keys() if not c.endswith("_usd")]  # floats: compared below
        assert _rows(old, table, columns) == _rows(reference, table, columns), table.name
    usage = ["day", "tier", "dimension", "value", "cost_usd"]
    for a, b in zip(sorted(_rows(old, DailyUsage.__table__, usage)), sorted(_rows(reference, DailyUsage.__table__,
                                                                                  usage))):
        assert a[:4] == b[:4] and a[4] == pytest.approx(b[4])
    old.dispose()
    reference.dispose()


def test_prune_deletes_old_raw_rows_and_keeps_the_aggregates(tmp_path):
    from aio.db.retention import prune_raw_rows
    from aio.reports import service
    from aio.reports.ranges import parse_range

    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    migrate.upgrade(engine)
    records = make_records(300, 11, START, timedelta(days=9), "p")
    write(engine, records)
    verifications = make_verifications(records, 12)
    with engine.begin() as connection:
        connection.execute(sa.insert(Verification), verifications)
    r = parse_range("custom", "2025-03-01", "2025-03-09")
    with engine.connect() as connection:
        before = service.summary(connection, r)["total"]
    result = prune_raw_rows(engine, 3, now=datetime(2025, 3, 10, tzinfo=timezone.utc))
    cutoff = datetime(2025, 3, 7, tzinfo=timezone.utc)
    assert result.requests == sum(rec.created_at < cutoff for rec in records)
    with engine.connect() as connection:
        left = connection.execute(sa.select(sa.func.count()).select_from(Request)).scalar()
        after = service.summary(connection, r)["total"]
    assert left == sum(rec.created_at >= cutoff for rec in records) and left > 0
    for key in ("requests", "tokens", "cost_usd", "baseline_cost_usd", "errors"):
        assert after[key] == pytest.approx(before[key])
    engine.dispose()
