"""The promise measured end to end on the family demo (SmolLM2-135M / Qwen2.5-Coder-0.5B / -1.5B), through live
`aio serve` processes and the openai SDK, on questions whose answers are computed (benchmarks.workload).

    python -m benchmarks.end_to_end [--eval-generated 80 --eval-crux 40] [--concurrency 4] [--out results.json]
                                    [--plot docs/end_to_end_cost_accuracy.png]

Phases (each server a fresh process on one temporary home and SQLite log; the family's files come from $AIO_HOME):
  B  monitor on, sampling every small and medium answer: the train part through `auto`; the cascade threshold is
     fitted on these answers (their confidence against the truth);
  A  monitor off, the shipped classifier: the evaluation part on each tier by name (answers with logprobs), through
     `auto` (its per-tier scores in the log, its live latency) and through `auto` with the cascade at the fitted
     threshold; then `aio retrain` runs on the log (phase B's verdicts: A logs none);
  C  monitor off, the classifier that retrain left in service: the evaluation part through `auto` (after); a
     control retrain on a copy of the log without its verdicts (the seed data alone), scored in this process;
  D  monitor on: the evaluation part on small and medium by name; the verdicts are compared with the truth;
  O1, O2  out of the box (benchmarks.end_to_end.out_of_box): fresh homes routing by the default quality target,
     with the shipped measurement and with the automatic probe; routing fitted to the outcomes is also scored on
     phase A's per-tier answers with the product's own code (benchmarks.end_to_end.learned).
Phases B-D keep the quality knob (no measurement: AIO_PROBE_SHIPPED=false), as before the quality target.
Prints the figures with 90% bootstrap intervals and one JSON line; see docs/end_to_end.md for how to read them."""
from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.end_to_end import learned, out_of_box, report
from benchmarks.end_to_end.curves import fit_threshold
from benchmarks.end_to_end.policies import TIERS, TierAnswers
from benchmarks.end_to_end.request_log import logged_requests, logged_verdicts
from benchmarks.end_to_end.retrain_control import seed_only_scores
from benchmarks.end_to_end.traffic import Answer, send_all
from benchmarks.workload import Task, load_workload

MONITOR_ON = dict(AIO_MONITOR_MODE="serve", AIO_QUALITY_SAMPLE_RATE="1.0", AIO_QUALITY_MAX_CONCURRENT="2",
                  AIO_QUALITY_QUEUE_SIZE="4096", AIO_QUALITY_BUDGET_TOKENS_PER_HOUR="100000000")


class Bench:
    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        self.args = args
        self.home = home
        self.database_url = f"sqlite:///{home / 'aio.db'}"

    def server(self, monitor: bool, home: Path | None = None, **extra_env: str):
        from benchmarks.live_server import start_server  # the live `aio serve` the tests start too

        env = dict(AIO_DEMO_MODEL="family", AIO_MONITOR_MODE="off", AIO_PROBE_SHIPPED="false",
                   AIO_QUALITY_REPLAY_MAX_TOKENS=str(self.args.max_tokens))  # phases B-D: the quality knob
        if monitor:
            env.update(MONITOR_ON)
        home = home or self.home
        return start_server(None, home, f"sqlite:///{home / 'aio.db'}", timeout=900, **{**env, **extra_env})

    def send(self, server, tasks: list[Task], phase: str, model: str, **kwargs) -> list[Answer]:
        start = time.perf_counter()
        answers = send_all(server.api_url, tasks, phase, model, concurrency=self.args.concurrency,
                           max_tokens=self.args.max_tokens, **kwargs)
        failed = [a for a in answers if a.error]
        print(f"  {phase}: {len(answers)} requests in {time.perf_counter() - start:.0f} s"
              + (f", {len(failed)} failed: {failed[0].error}" if failed else ""), flush=True)
        return answers

    def wait_for_verdicts(self, answers: list[Answer], timeout_s: float = 3600) -> None:
        """Until every small or medium answer has its verdict (the monitor replays them in the background)."""
        ids = [a.request_id for a in answers if a.request_id]
        deadline = time.monotonic() + timeout_s
        while True:
            rows = logged_requests(self.database_url, ids)
            expected = {r for r, row in rows.items() if row.tier in ("small", "medium")}
            have = set(logged_verdicts(self.database_url, expected))
            if expected <= have or time.monotonic() > deadline:
                print(f"  verdicts: {len(have & expected)} of {len(expected)}", flush=True)
                return
            time.sleep(3)

    def retrain(self) -> dict:
        from benchmarks.live_server import aio_command, server_env

        done = subprocess.run(aio_command("retrain", "--json"), env=server_env(self.home, self.database_url, ""),
                              capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            return {"status": "failed", "reason": (done.stdout + done.stderr)[-2000:]}
        return json.loads(done.stdout[done.stdout.index("{"):])


@contextlib.contextmanager
def family_home(prefix: str) -> Iterator[Path]:
    """A temporary AIO home whose models folder links to the family demo's files, assembled once into $AIO_HOME
    (not copied again); exits when the family is not installed."""
    from aio.demo_family import FamilyUnavailable, assemble_family, models_dir
    from aio.settings import default_home

    try:
        assemble_family(default_home())
    except FamilyUnavailable as exc:
        sys.exit(f"the family demo is not installed: {exc}")
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp)
        (home / "models").symlink_to(models_dir(default_home()))
        yield home


def tier_answers(tasks: list[Task], by_tier: dict[str, list[Answer]], database_url: str) -> TierAnswers:
    from aio.chat.confidence import confidence

    n = len(tasks)
    right, cost, conf = np.zeros((n, 3), bool), np.zeros((n, 3)), np.full((n, 3), np.nan)
    for t, tier in enumerate(TIERS):
        answers = by_tier[tier]
        rows = logged_requests(database_url, [a.request_id for a in answers])
        for i, (task, answer) in enumerate(zip(tasks, answers)):
            right[i, t] = report.correct(task, answer)
            row = rows.get(answer.request_id or "")
            cost[i, t] = row.cost_usd if row else np.nan
            value = confidence(answer.logprobs) if answer.logprobs else None
            conf[i, t] = np.nan if value is None else value
    if np.isnan(cost).any():
        raise RuntimeError(f"{int(np.isnan(cost).sum())} answers have no log row (failed requests): see above")
    return TierAnswers(right, cost, conf)


def scores_of(answers: list[Answer], database_url: str) -> np.ndarray:
    rows = logged_requests(database_url, [a.request_id for a in answers])
    out = []
    for a in answers:
        row = rows.get(a.request_id or "")
        if row is None or not row.tier_scores:
            raise RuntimeError(f"request {a.request_id} for task {a.task_id} has no logged classifier scores")
        out.append(row.tier_scores)
    return np.array(out, dtype=float)


def latencies(answers: list[Answer], database_url: str) -> dict[str, list[float]]:
    rows = logged_requests(database_url, [a.request_id for a in answers])
    got = [rows[a.request_id] for a in answers if a.request_id in rows]
    return {"ttft_ms": [r.ttft_ms for r in got if r.ttft_ms is not None],
            "latency_ms": [r.latency_ms for r in got if r.latency_ms is not None]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-generated", type=int, default=80, help="generated tasks per split")
    parser.add_argument("--eval-crux", type=int, default=40, help="CRUXEval-O rows per split")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, help="write every figure and per-task outcome as JSON here")
    parser.add_argument("--plot", type=Path, help="write the cost-accuracy curves as a PNG here")
    parser.add_argument("--keep-log", type=Path, help="copy the SQLite request log (every phase) here")
    parser.add_argument("--skip-probe-phase", action="store_true", help="leave out O2 (the automatic probe)")
    parser.add_argument("--probe-budget", type=float, default=None, metavar="S",
                        help="O2's probe_budget_s (default: the product's, 540)")
    parser.add_argument("--only-out-of-box", type=Path, metavar="STATE",
                        help="run O1 and O2 only, on the .state.pkl a full run left beside its --out JSON")
    args = parser.parse_args(argv)
    if args.only_out_of_box is not None:
        return only_out_of_box(args)
    workload = load_workload(args.seed, args.eval_generated, args.eval_crux)
    train, evaluation = workload.train, workload.eval
    print(f"workload: {len(train)} train, {len(evaluation)} eval tasks (seed {args.seed})", flush=True)
    with family_home("aio-e2e-") as home:
        bench = Bench(args, home)
        results: dict = {"tasks": {"train": len(train), "eval": len(evaluation)}, "args": vars(args) | {
            "out": str(args.out), "plot": str(args.plot), "keep_log": str(args.keep_log)}}

        print("B: monitor on, the train part through auto", flush=True)
        server = bench.server(monitor=True)
        try:
            train_auto = bench.send(server, train, "train-auto", "auto", logprobs=True)
            bench.wait_for_verdicts(train_auto)
        finally:
            server.stop()
        results["train_answers"] = report.routed_answers(train, train_auto, bench.database_url)
        threshold = fit_cascade_threshold(results["train_answers"])
        results["cascade_threshold"] = threshold
        print(f"  cascade threshold fitted on the train part: mean logprob {threshold:.3f}", flush=True)

        print("A: monitor off, the shipped classifier", flush=True)
        server = bench.server(monitor=False)
        try:
            by_tier = {t: bench.send(server, evaluation, f"eval-{t}", t, logprobs=True) for t in TIERS}
            auto_before = bench.send(server, evaluation, "eval-auto", "auto")
            cascade_live = bench.send(server, evaluation, "eval-auto-cascade", "auto",
                                      extra_body={"aio_cascade": True, "aio_cascade_threshold": threshold})
        finally:
            server.stop()
        answers = tier_answers(evaluation, by_tier, bench.database_url)
        scores_before = scores_of(auto_before, bench.database_url)
        results["retrain"] = bench.retrain()
        print(f"  aio retrain: {results['retrain'].get('status')}: {results['retrain'].get('reason')}", flush=True)

        print("C: monitor off, the classifier in service after retrain", flush=True)
        server = bench.server(monitor=False)
        try:
            auto_after = bench.send(server, evaluation, "eval-auto-after", "auto")
        finally:
            server.stop()
        scores_after = scores_of(auto_after, bench.database_url)
        (home / "control").mkdir()
        scores_control, results["retrain_control"] = seed_only_scores(home / "aio.db", home / "control", evaluation)
        print(f"  control retrain on the seed data alone: {results['retrain_control'].get('reason')}", flush=True)

        print("D: monitor on, small and medium by name", flush=True)
        server = bench.server(monitor=True)
        try:
            monitored = {t: bench.send(server, evaluation, f"eval-{t}-monitored", t) for t in ("small", "medium")}
            bench.wait_for_verdicts(monitored["small"] + monitored["medium"])
        finally:
            server.stop()

        live = {"always-" + t: latencies(by_tier[t], bench.database_url) for t in TIERS}
        live["auto (live, shipped classifier)"] = latencies(auto_before, bench.database_url)
        live["auto + cascade (live)"] = latencies(cascade_live, bench.database_url)
        scores = {"auto": scores_before, "auto after retrain": scores_after,
                  "auto retrained on the seed alone": scores_control}
        results.update(report.figures(evaluation, answers, scores, threshold, live))
        results["live_auto"] = report.live_check(evaluation, answers, auto_before, scores_before,
                                                 bench.database_url)
        results["live_cascade"] = report.live_cascade(evaluation, cascade_live, answers, bench.database_url)
        results["monitor"] = report.monitor_figures(evaluation, monitored, bench.database_url)
        results["per_tier_by_category"] = report.by_category(evaluation, answers)
        if args.keep_log:
            shutil.copyfile(home / "aio.db", args.keep_log)
        checkpoint(args, results, (evaluation, answers, by_tier, scores_before))
        out_of_box_phases(bench, args, results, home, evaluation, answers, by_tier, scores_before)
    print(report.text(results) + learned.text(results), flush=True)
    if args.plot:
        report.plot(results, args.plot)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=float))
    print(json.dumps({k: v for k, v in results.items() if k not in ("curves", "per_task", "train_answers")},
                     default=float))
    return 0


def only_out_of_box(args: argparse.Namespace) -> int:
    with open(args.only_out_of_box, "rb") as f:
        evaluation, answers, by_tier, scores_before = pickle.load(f)  # our own file, written by `checkpoint`
    results: dict = {"tasks": {"eval": len(evaluation)}}
    with family_home("aio-e2e-") as home:
        out_of_box_phases(Bench(args, home), args, results, home, evaluation, answers, by_tier, scores_before)
    print(learned.text(results), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=float))
    return 0


def checkpoint(args: argparse.Namespace, results: dict, state: tuple) -> None:
    """Phases B-D's figures as JSON, and what the out-of-the-box phases need (pickled), beside --out: a failure
    later loses nothing, and `--only-out-of-box STATE` runs O1 and O2 again on them."""
    if args.out is None:
        return
    args.out.write_text(json.dumps(results, indent=1, default=float))
    with open(args.out.with_suffix(".state.pkl"), "wb") as f:
        pickle.dump(state, f)


def out_of_box_phases(bench: Bench, args: argparse.Namespace, results: dict, home: Path, evaluation: list[Task],
                      answers: TierAnswers, by_tier: dict, scores_before: np.ndarray) -> None:
    models = (home / "models").resolve()
    print("O1: a fresh home with the shipped measurement: auto at the default quality target", flush=True)
    results["out_of_box"] = {}
    results["out_of_box"]["shipped"], fit = out_of_box.shipped_phase(bench, models, evaluation, answers)
    if not args.skip_probe_phase:
        print("O2: a fresh home without it: the automatic probe (killed once), then auto", flush=True)
        results["out_of_box"]["probe"] = out_of_box.probe_phase(bench, models, evaluation, answers,
                                                                budget_s=args.probe_budget)
    results["learned"] = learned.figures(fit, scores_before, answers, by_tier)


def fit_cascade_threshold(train_answers: list[dict]) -> float:
    """On the train part's answers from a cheaper tier (`report.routed_answers`): the mean-logprob threshold that
    best separates the wrong ones from the right ones (Youden's J)."""
    cheap = [a for a in train_answers if a["tier"] in ("small", "medium") and a["confidence"] is not None]
    return fit_threshold(np.array([a["confidence"] for a in cheap], dtype=float),
                         np.array([not a["correct"] for a in cheap]))


if __name__ == "__main__":
    sys.exit(main())
