"""The out-of-the-box phases: what a new user of the family demo gets, on a fresh home with no traffic.

  O1  the shipped measurement (what `make run-family` does): the server imports it by the files' hashes and routes
      `auto` by the default quality target from the first request; the evaluation part through `auto`, the
      dashboard's quality estimate read after it, then through `auto` with the cascade on;
  O2  no shipped measurement (AIO_PROBE_SHIPPED=false): the server probes its tiers in the background within its
      budget while it serves (a few requests are sent meanwhile); it is killed once mid-probe and restarted (the
      probe resumes); once the fit is in force, the evaluation part through `auto`.
The live answers are scored against the truth; cost is the logged cost over always-large's (phase A's answers)."""
from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks.end_to_end.policies import TIERS, TierAnswers
from benchmarks.end_to_end.report import correct
from benchmarks.end_to_end.request_log import logged_requests
from benchmarks.end_to_end.traffic import Answer
from benchmarks.workload import Task

MEASURED_TIMEOUT_S = 1800


@contextlib.contextmanager
def fresh_home(models: Path, prefix: str):
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp)
        (home / "models").symlink_to(models)
        yield home


def routing(server) -> dict:
    return httpx.get(server.base_url + "/ready", timeout=60).json()["checks"]["routing"]


def live_pass(tasks: list[Task], live: list[Answer], answers: TierAnswers, database_url: str) -> dict:
    rows = logged_requests(database_url, [a.request_id for a in live])
    right = np.array([correct(t, a) for t, a in zip(tasks, live)])
    cost = sum(rows[a.request_id].cost_usd for a in live if a.request_id in rows)
    served = [rows[a.request_id].tier for a in live if a.request_id in rows]
    return {"accuracy": float(right.mean()), "relative_accuracy": float(right.sum() / answers.correct[:, 2].sum()),
            "cost_fraction": float(cost / answers.cost[:, 2].sum()),
            "served_by": {t: served.count(t) for t in TIERS},
            "cascaded": sum(rows[a.request_id].routing_reason == "cascade" for a in live if a.request_id in rows)}


def _halfway(state: dict, tasks: int) -> bool:
    """Time to kill the server mid-probe: a tier has answered `tasks`, or half of what all tiers plan."""
    measurements = state["measurements"].values()
    done, planned = sum(m["done"] for m in measurements), sum(m["planned"] for m in measurements)
    return max(m["done"] for m in measurements) >= tasks or (planned > 0 and done >= planned / 2)


def dashboard_estimate(server) -> dict | None:
    summary = httpx.get(server.base_url + "/api/dashboard/summary", params={"range": "24h"}, timeout=120,
                        headers={"authorization": f"Bearer {server.admin_key}"}).json()
    return summary.get("quality_estimate")


def shipped_phase(bench, models: Path, tasks: list[Task], answers: TierAnswers) -> dict:
    with fresh_home(models, "aio-e2e-o1-") as home:
        server = bench.server(monitor=False, home=home, AIO_PROBE_ON_START="true", AIO_PROBE_SHIPPED="true")
        try:
            at_start = routing(server)
            auto = bench.send(server, tasks, "o1-auto", "auto")
            estimate = dashboard_estimate(server)
            cascade = bench.send(server, tasks, "o1-auto-cascade", "auto", extra_body={"aio_cascade": True})
        finally:
            server.stop()
        database_url = f"sqlite:///{home / 'aio.db'}"
        from aio.db.database import make_engine
        from aio.routing.fit_store import load_active

        engine = make_engine(database_url)
        found = load_active(engine)
        engine.dispose()
        if found is None or at_start.get("rule") != "quality_target":
            raise RuntimeError(f"O1's server did not route by the quality target from the start: {at_start}")
        fit = found[1]
        return {"routing_at_start": at_start, "auto": live_pass(tasks, auto, answers, database_url),
                "dashboard_estimate": estimate,
                "auto_cascade": live_pass(tasks, cascade, answers, database_url)}, fit


def probe_phase(bench, models: Path, tasks: list[Task], answers: TierAnswers, kill_after_tasks: int = 40,
                budget_s: float | None = None) -> dict:
    env = dict(AIO_PROBE_ON_START="true", AIO_PROBE_SHIPPED="false")
    if budget_s is not None:
        env["AIO_PROBE_BUDGET_S"] = str(budget_s)
    with fresh_home(models, "aio-e2e-o2-") as home:
        started = time.monotonic()
        server = bench.server(monitor=False, home=home, **env)
        up_s = time.monotonic() - started
        probing_started = time.monotonic()
        meanwhile = bench.send(server, tasks[:8], "o2-while-probing", "auto")
        while not _halfway(routing(server), kill_after_tasks):
            time.sleep(2)
        before_kill = {t: m["done"] for t, m in routing(server)["measurements"].items()}
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(60)
        first_run_s = time.monotonic() - probing_started
        server = bench.server(monitor=False, home=home, **env)
        try:
            after_restart = {t: m["done"] for t, m in routing(server)["measurements"].items()}
            resumed = time.monotonic()
            deadline = resumed + MEASURED_TIMEOUT_S
            while (state := routing(server))["rule"] != "quality_target" and time.monotonic() < deadline:
                time.sleep(3)
            second_run_s = time.monotonic() - resumed
            auto = bench.send(server, tasks, "o2-auto", "auto")
            estimate = dashboard_estimate(server)
        finally:
            server.stop()
        database_url = f"sqlite:///{home / 'aio.db'}"
        return {"server_up_s": up_s, "probe_s": first_run_s + second_run_s, "probe_s_runs": [first_run_s, second_run_s],
                "done_before_kill": before_kill, "done_after_restart": after_restart, "routing": state,
                "served_while_probing": {"ok": sum(a.error is None for a in meanwhile), "of": len(meanwhile),
                                         "latency_s_max": max(a.client_latency_s for a in meanwhile)},
                "auto": live_pass(tasks, auto, answers, database_url), "dashboard_estimate": estimate}
