"""`aio retrain --dry-run` wall time on the shipped seed data plus logged verdicts:
`python -m benchmarks.retrain [--verdicts 1000] [--baseline]`.

Runs the real command (a subprocess, as an operator would) against a fresh SQLite log in a temporary AIO_HOME:
1. cold: an empty embedding cache, an operator's first retrain: the seed vectors come from the shipped seed
   embeddings (`classifier.seed_embeddings`, checked against the encoder), the log texts are encoded;
2. warm: the same seed data plus `--verdicts` NEW logged verdicts (texts not seen before): the steady state of a
   weekly retrain, where only the new log texts are encoded.
`--baseline` adds a run with the cache turned off (AIO_RETRAIN_NO_CACHE=1: no cache and no shipped embeddings, every
text encoded for training and the held-out set encoded again for each classifier, as before both) in the same
session, for a side-by-side ratio. A script, not a test: timings depend on the machine and on what else runs on it.
Goal: cold and warm <= 120 s on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

GOAL_S = 120.0


def log_verdicts(database_url: str, n: int, variant: str) -> None:
    """`n` served requests with a passed or failed verdict each; prompts are seed-like texts made new."""
    import sqlalchemy as sa

    from aio.db.database import make_engine
    from aio.db.migrate import upgrade
    from aio.db.models import Request, Verification
    from aio.db.records import utcnow
    from classifier.seed import load_seed_data

    texts, _, _ = load_seed_data()
    rng = random.Random(variant)
    engine = make_engine(database_url)
    upgrade(engine)
    now = utcnow()
    requests, verdicts = [], []
    for i in range(n):
        text = f"{rng.choice(texts)}\n\n(follow-up {variant}-{i}: please answer briefly)"
        rid = f"bench-{variant}-{i}"
        tier = rng.choice(["small", "medium"])
        created = now - timedelta(minutes=n - i)
        requests.append(dict(request_id=rid, created_at=created, status="ok", tier=tier, model=tier,
                             prompt=json.dumps([{"role": "user", "content": text}]), answer="an answer"))
        verdicts.append(dict(request_id=rid, created_at=created, tier=tier, reference_tier="large", similarity=0.9,
                             passed=rng.random() < 0.8, method="cosine"))
    with engine.begin() as connection:
        connection.execute(sa.insert(Request), requests)
        connection.execute(sa.insert(Verification), verdicts)
    engine.dispose()


def timed_retrain(home: Path, database_url: str, **env: str) -> tuple[float, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AIO_")}
    environment.update(AIO_HOME=str(home), AIO_DATABASE_URL=database_url, HF_HUB_OFFLINE="1", **env)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aio.cli", "retrain", "--dry-run"], env=environment,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"aio retrain failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.retrain", description=__doc__.split("\n")[0])
    parser.add_argument("--verdicts", type=int, default=1000, help="logged verdicts per run")
    parser.add_argument("--baseline", action="store_true", help="also time a run without the embedding cache")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        url = f"sqlite:///{home / 'aio.db'}"
        log_verdicts(url, args.verdicts, "a")
        results = {}
        if args.baseline:
            results["no cache (before)"], _ = timed_retrain(home, url, AIO_RETRAIN_NO_CACHE="1")
        summaries = {}
        results["cold cache"], summaries["cold cache"] = timed_retrain(home, url)
        log_verdicts(url, args.verdicts, "b")  # new texts: only these are not cached
        results["warm cache"], summaries["warm cache"] = timed_retrain(home, url)
    print(f"aio retrain --dry-run, shipped seed data + {args.verdicts} logged verdicts per run, {os.cpu_count()} CPUs")
    for name, seconds in results.items():
        print(f"  {name:18} {seconds:7.1f} s")
    if "no cache (before)" in results:
        print(f"  speed-up warm vs no cache: {results['no cache (before)'] / results['warm cache']:.1f}x")
    for name in ("cold cache", "warm cache"):
        print(f"  goal: {name.split()[0]} <= {GOAL_S:.0f} s: {'met' if results[name] <= GOAL_S else 'NOT met'}")
    print("\nthe cold run's summary:\n" + summaries["cold cache"] + "\n\nthe warm run's summary:\n"
          + summaries["warm cache"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
