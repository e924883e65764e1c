"""Every tier's outcome on the workload's TRAIN part, on the family demo:

    python -m benchmarks.end_to_end.train_outcomes [--out classifier/data/workload_outcomes.jsonl]

One `aio serve` (monitor off) answers each train task on small, medium and large by name, with the end-to-end
benchmark's settings (greedy, 96 new tokens, 4 in flight); each answer is scored by the task's computed truth.
One JSON line per task: id, category, difficulty, prompt (the user message), correct per tier. About 5 minutes on
2 cores. `python -m classifier.outcome_weights` reads the file as an outcome-labelled set to choose training
weights by; the evaluation part stays the end-to-end benchmark's alone.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.end_to_end.__main__ import Bench, family_home, tier_answers
from benchmarks.end_to_end.policies import TIERS
from benchmarks.workload import load_workload

OUT = Path(__file__).resolve().parents[2] / "classifier" / "data" / "workload_outcomes.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generated", type=int, default=80, help="generated tasks per split")
    parser.add_argument("--crux", type=int, default=40, help="CRUXEval-O rows per split")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    train = load_workload(args.seed, args.generated, args.crux).train
    with family_home("aio-train-outcomes-") as home:
        bench = Bench(args, home)
        server = bench.server(monitor=False)
        try:
            by_tier = {t: bench.send(server, train, f"train-{t}", t) for t in TIERS}
        finally:
            server.stop()
        answers = tier_answers(train, by_tier, bench.database_url)
    with args.out.open("w") as f:
        for task, right in zip(train, answers.correct):
            f.write(json.dumps({"id": task.id, "category": task.category, "difficulty": task.difficulty,
                                "prompt": task.prompt, "correct": dict(zip(TIERS, map(bool, right)))}) + "\n")
    print(f"{len(train)} tasks -> {args.out}; accuracy per tier: "
          + ", ".join(f"{t} {answers.correct[:, i].mean():.1%}" for i, t in enumerate(TIERS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
