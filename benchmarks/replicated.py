"""The replicated run of `python -m benchmarks.loadtest --replicas N [--kill-one]` (see benchmarks/replicas.py)."""
from __future__ import annotations

import asyncio
import time

import sqlalchemy as sa

from benchmarks.load_clients import audit_log, print_report, run_clients
from benchmarks.replicas import Cluster, RoundRobinProxy


def rows_of(database_url: str, request_ids: list[str], timeout: float = 60.0) -> dict[str, tuple[str, int]]:
    """request id -> (status, number of rows), waiting up to `timeout` for all of them."""
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with engine.connect() as c:
                rows = c.execute(sa.text("SELECT request_id, MIN(status), COUNT(*) FROM requests "
                                         "WHERE request_id IN :ids GROUP BY request_id")
                                 .bindparams(sa.bindparam("ids", expanding=True)), {"ids": request_ids}).all()
            found = {r[0]: (r[1], r[2]) for r in rows}
            if len(found) == len(set(request_ids)) or time.monotonic() > deadline:
                return found
            time.sleep(0.5)
    finally:
        engine.dispose()


def count_interrupted(database_url: str) -> int:
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as c:
            return c.execute(sa.text("SELECT COUNT(*) FROM requests WHERE status = 'interrupted'")).scalar()
    finally:
        engine.dispose()


def run_replicated(args) -> dict:
    print(f"starting {args.replicas} replicas on a throwaway PostgreSQL ...", flush=True)
    cluster = Cluster.start(args.replicas)
    try:
        proxy = RoundRobinProxy([r.port for r in cluster.replicas])

        async def run():
            await proxy.start()
            try:
                chaos = cluster.chaos(args.duration, args.outage_s) if args.kill_one else None
                return await run_clients(f"http://127.0.0.1:{proxy.port}", args.clients, args.duration,
                                         args.max_tokens, args.request_timeout, args.seed, alongside=chaos)
            finally:
                await proxy.close()

        print(f"{args.clients} streaming clients for {args.duration:g} s through the proxy"
              f"{' (one replica SIGKILLed, then PostgreSQL down for %g s)' % args.outage_s if args.kill_one else ''}"
              " ...", flush=True)
        out, seconds = asyncio.run(run())
        missing, duplicated = audit_log(cluster.database_url, out.answered, timeout=120)
        cut_rows = rows_of(cluster.database_url, out.cut) if out.cut else {}
        cut_missing = len(set(out.cut) - cut_rows.keys())
        cut_duplicated = sum(1 for _, n in cut_rows.values() if n > 1)
        before_answer = len(out.failed) - len(out.cut)  # in flight on the killed one, before its first byte
        interrupted = count_interrupted(cluster.database_url)
    finally:
        logs = cluster.close()
    print(f"replica logs: {logs}")
    for event in cluster.events:
        print("event:", event)
    if out.failed_at:
        moments = sorted(round(t - out.started_at, 1) for t in out.failed_at)
        print(f"connection failures at (s into the run): {moments[:20]}{' …' if len(moments) > 20 else ''}")
    print(f"streams cut by the kill: {len(out.cut)}, their rows missing {cut_missing}, duplicated {cut_duplicated} "
          f"(statuses {sorted({s for s, _ in cut_rows.values()})}); failed before any answer: {before_answer}; "
          f"rows logged as interrupted (recovered from the killed replica's journal): {interrupted}")
    report = print_report(args, out, seconds, missing, duplicated, replicas=args.replicas, kill_one=args.kill_one,
                          outage_s=args.outage_s if args.kill_one else 0, events=cluster.events, cut=len(out.cut),
                          cut_rows_missing=cut_missing, cut_rows_duplicated=cut_duplicated,
                          failed_before_answer=before_answer, interrupted_rows=interrupted)
    report["ok"] = (out.server_errors == 0 and missing == 0 and duplicated == 0 and cut_missing == 0
                    and cut_duplicated == 0 and (args.kill_one or not out.failed))
    return report
