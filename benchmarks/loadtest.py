"""Load test: N concurrent streaming clients against `aio serve` for T seconds, then an audit of the SQL log.

    python -m benchmarks.loadtest [--clients 64] [--duration 60] [--max-tokens 32] [--url http://127.0.0.1:PORT]
    python -m benchmarks.loadtest --replicas 2 [--kill-one] [--outage-s 30]

Without --url it starts `aio serve` on the random demo tiers (AIO_DEMO_MODEL=random, SQLite) in a temporary
AIO_HOME on a loopback port and stops it afterwards. With --replicas N it starts N servers on one throwaway
PostgreSQL behind a round-robin proxy; --kill-one SIGKILLs one mid-run (and restarts it), then stops PostgreSQL
for --outage-s seconds (see benchmarks/replicas.py). Every request must end as a complete answer (finish chunk, then
[DONE]) or a clean refusal (429/503 with Retry-After); anything else — a 500, a stream cut without an error
event, a hang past --request-timeout — is a failure. Every answered request must be in the SQL log exactly once.
Prints throughput, TTFT and end-to-end p50/p95/p99 and the p99/p50 ratios, and a JSON line (the clients, the audit
and the report: benchmarks/load_clients.py).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.load_clients import audit_log, print_report, run_clients


def start_embedded_server(home: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIO_")}
    env.update(AIO_HOME=str(home), AIO_DEMO_MODEL="random", AIO_OPEN_ENDPOINT="true", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    log = open(home / "server.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "aio.cli", "serve", "--port", str(port), "--log-level", "warning"],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"aio serve exited: see {home / 'server.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise SystemExit("aio serve did not start within 180 s")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument("--url", help="an already running server on loopback (default: start one)")
    parser.add_argument("--database-url", help="its log (default: the started server's SQLite)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replicas", type=int, default=1, help="servers on one throwaway PostgreSQL behind a "
                                                                "round-robin proxy (needs PostgreSQL installed)")
    parser.add_argument("--kill-one", action="store_true", help="with --replicas: SIGKILL one mid-run (and "
                                                                 "restart it), then stop PostgreSQL for --outage-s")
    parser.add_argument("--outage-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= 1024 or not 0 < args.duration <= 3600:
        parser.error("--clients must be in [1, 1024] and --duration in (0, 3600]")
    if args.kill_one and args.replicas < 2:
        parser.error("--kill-one needs --replicas 2 or more")
    if args.replicas > 1:
        from benchmarks.replicated import run_replicated

        return run_replicated(args)
    process, tmp = None, None
    if args.url:
        host = httpx.URL(args.url).host
        if host not in ("127.0.0.1", "localhost", "::1"):
            parser.error("the load test only runs against loopback addresses")
        base_url, database_url = args.url, args.database_url
    else:
        tmp = tempfile.TemporaryDirectory(prefix="aio-loadtest-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        process = start_embedded_server(Path(tmp.name), port)
        base_url, database_url = f"http://127.0.0.1:{port}", f"sqlite:///{Path(tmp.name) / 'aio.db'}"
    try:
        print(f"{args.clients} streaming clients for {args.duration:g} s against {base_url} "
              f"(max_tokens {args.max_tokens}, ignore_eos) ...", flush=True)
        out, seconds = asyncio.run(run_clients(base_url, args.clients, args.duration, args.max_tokens,
                                               args.request_timeout, args.seed))
        missing, duplicated = audit_log(database_url, out.answered) if database_url else (None, None)
    finally:
        if process is not None:
            process.terminate()
            process.wait(60)
        if tmp is not None:
            tmp.cleanup()
    return print_report(args, out, seconds, missing, duplicated)


if __name__ == "__main__":
    report = main()
    ok = report.get("ok", report["failed"] == 0 and not report["lost_from_log"] and not report["duplicated_in_log"])
    sys.exit(0 if ok else 1)
