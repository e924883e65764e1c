"""Dashboard benchmark: every /api/dashboard endpoint against a large SQL log, through a real `aio serve`.

    python -m benchmarks.dashboard [--rows 1000000] [--days 30] [--repeat 5] [--db .bench/dashboard.db]

Builds (once; reused while --rows/--days match) a SQLite log of synthetic requests spread over the last --days
days, written through the log writer (so the daily aggregates are exactly what a server keeps), plus quality
verdicts for 5% of them; starts `aio serve` on it (random demo tiers, quality monitor off) and times each endpoint for
the 24h, 7d and 30d ranges. Prints the median and the worst time per endpoint and range, and exits with status 1
if any answer took 1 s or more.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import httpx
import sqlalchemy as sa

from aio.db.records import RequestRecord

ENDPOINTS = ("summary", "traffic", "cost", "breakdown", "latency", "quality", "router", "engine")
RANGES = ("24h", "7d", "30d")
PRICES = {"small": (0.10, 0.10), "medium": (0.30, 0.30), "large": (3.00, 3.00)}
LIMIT_S = 1.0
DATA_VERSION = 2  # of the synthetic log and its schema: an older --db file is rebuilt


def synthetic_records(count: int, days: int, seed: int = 0, now: datetime | None = None,
                      prefix: str = "bench") -> Iterator[RequestRecord]:
    """Plausible traffic: mostly small, some medium and large; log-normal latencies; 1,000 users, 20 keys."""
    rng = random.Random(seed)
    now = now or datetime.now(timezone.utc)
    span_s = days * 86400
    ages = sorted((rng.random() * span_s for _ in range(count)), reverse=True)  # logged in arrival order
    for i, age in enumerate(ages):
        tier = rng.choices(("small", "medium", "large"), (0.6, 0.25, 0.15))[0]
        status = rng.choices(("ok", "error", "cancelled", "rejected"), (0.96, 0.01, 0.02, 0.01))[0]
        prompt_tokens, completion_tokens = rng.randrange(10, 2000), rng.randrange(1, 800)
        price_in, price_out = PRICES[tier]
        large_in, large_out = PRICES["large"]
        reason = rng.choices(("classifier", "explicit", "escalation", "fallback"), (0.9, 0.07, 0.02, 0.01))[0]
        ttft = rng.lognormvariate(4.5 + ("small", "medium", "large").index(tier) * 0.4, 0.6)
        itl = rng.lognormvariate(2.5 + ("small", "medium", "large").index(tier) * 0.5, 0.3)
        yield RequestRecord(
            request_id=f"{prefix}-{i}", status=status,
            created_at=now - timedelta(seconds=age), tier=tier, model=f"model-{tier}",
            routing_reason=reason, classifier_version="builtin-1", routing_score=rng.betavariate(5, 2),
            quality=0.5, key_id=rng.randrange(0, 21) or None, user=f"user-{rng.randrange(1000)}",
            prompt='[{"role": "user", "content": "hello"}]', answer="hi",
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cost_usd=(prompt_tokens * price_in + completion_tokens * price_out) / 1e6,
            baseline_cost_usd=(prompt_tokens * large_in + completion_tokens * large_out) / 1e6,
            ttft_ms=ttft, latency_ms=ttft + itl * completion_tokens, itl_ms=itl,
            queue_ms=rng.expovariate(1 / 20.0), finish_reason="stop", stream=True)


def build_log(path: Path, rows: int, days: int) -> None:
    from aio.db import migrate
    from aio.db.database import make_engine
    from aio.db.log_writer import LogWriter
    from aio.db.models import Verification

    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    writer = LogWriter(engine, batch_size=5000, flush_interval_s=0.05, max_buffer=100_000)
    writer.start()
    rng, started, verifications = random.Random(1), time.monotonic(), []
    for i, record in enumerate(synthetic_records(rows, days)):
        writer.submit(record)
        if record.tier in ("small", "medium") and record.status == "ok" and rng.random() < 0.05:
            passed = rng.random() < 0.9
            verifications.append(dict(request_id=record.request_id, created_at=record.created_at, tier=record.tier,
                                      reference_tier="large", similarity=rng.uniform(0.9, 1) if passed else
                                      rng.uniform(0.3, 0.85), passed=passed, method="cosine", answer="hi",
                                      reference_answer="hello", judge_cost_usd=rng.random() / 1e4))
        if (i + 1) % 50_000 == 0:
            writer.flush()
            print(f"  {i + 1:,} rows ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    writer.flush()
    writer.close()
    with engine.begin() as connection:
        for start in range(0, len(verifications), 10_000):
            connection.execute(sa.insert(Verification), verifications[start:start + 10_000])
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE IF NOT EXISTS bench_info (rows INTEGER, days INTEGER, v INTEGER)"))
        connection.execute(sa.text("INSERT INTO bench_info VALUES (:rows, :days, :v)"),
                           {"rows": rows, "days": days, "v": DATA_VERSION})
    engine.dispose()


def _matches(path: Path, rows: int, days: int) -> bool:
    if not path.is_file():
        return False
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            return tuple(connection.execute(sa.text("SELECT rows, days, v FROM bench_info")).one()) \
                == (rows, days, DATA_VERSION)
    except sa.exc.SQLAlchemyError:
        return False
    finally:
        engine.dispose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(db: Path, home: Path, admin_key: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIO_")}
    env.update(AIO_HOME=str(home), AIO_DATABASE_URL=f"sqlite:///{db}", AIO_ADMIN_KEY=admin_key,
               AIO_MONITOR_MODE="off", AIO_DEMO_MODEL="random", AIO_OPEN_ENDPOINT="true", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    process = subprocess.Popen([sys.executable, "-m", "aio.cli", "serve", "--port", str(port), "--log-level",
                                "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"aio serve exited with {process.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError("aio serve did not start in 180 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", type=Path, default=Path(".bench/dashboard.db"))
    args = parser.parse_args(argv)
    if not _matches(args.db, args.rows, args.days):
        print(f"building {args.db}: {args.rows:,} requests over {args.days} days ...", file=sys.stderr)
        started = time.monotonic()
        build_log(args.db, args.rows, args.days)
        print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    admin_key = secrets.token_urlsafe(32)  # `aio serve` refuses weak admin keys
    with tempfile.TemporaryDirectory(prefix="aio-bench-") as home:
        process, url = _serve(args.db, Path(home), admin_key)
        try:
            results = _time_endpoints(url, admin_key, args.repeat)
        finally:
            process.terminate()
            process.wait(30)
    worst = max(r["max_s"] for r in results)
    print(f"{'endpoint':<10} {'range':<5} {'median ms':>10} {'max ms':>8}")
    for r in results:
        print(f"{r['endpoint']:<10} {r['range']:<5} {1000 * r['median_s']:>10.1f} {1000 * r['max_s']:>8.1f}")
    print(json.dumps({"rows": args.rows, "days": args.days, "repeat": args.repeat, "worst_s": worst,
                      "results": results}))
    if worst >= LIMIT_S:
        print(f"FAIL: an endpoint took {worst:.2f} s (limit {LIMIT_S} s)", file=sys.stderr)
        return 1
    return 0


def _time_endpoints(url: str, admin_key: str, repeat: int) -> list[dict]:
    results = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        for endpoint in ENDPOINTS:
            for range_ in (RANGES if endpoint != "engine" else ("live",)):
                params = {} if endpoint == "engine" else {"range": range_}
                client.get(f"/api/dashboard/{endpoint}", params=params).raise_for_status()  # warm up
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    client.get(f"/api/dashboard/{endpoint}", params=params).raise_for_status()
                    times.append(time.perf_counter() - started)
                results.append({"endpoint": endpoint, "range": range_, "median_s": statistics.median(times),
                                "max_s": max(times)})
    return results


if __name__ == "__main__":
    raise SystemExit(main())
