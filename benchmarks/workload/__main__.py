"""Print the workload's make-up: counts per split, source, category and difficulty, and example prompts.

    python -m benchmarks.workload --summary [--seed 0] [--n-generated 80] [--crux-limit 40] [--examples 2]
"""
from __future__ import annotations

import argparse
import time
from collections import Counter

from .dataset import ANSWER_INSTRUCTION, DEFAULT_CRUX_LIMIT, DEFAULT_N_GENERATED, Task, Workload, load_workload
from .generated import CATEGORIES, DIFFICULTIES


def _table(tasks: list[Task]) -> list[str]:
    counts = Counter((t.category, t.difficulty) for t in tasks)
    categories = [c for c in ("crux", *CATEGORIES) if any(k[0] == c for k in counts)]
    lines = [f"    {'category':<15}" + "".join(f"{f'd{d}':>6}" for d in DIFFICULTIES) + f"{'total':>8}"]
    for category in categories:
        row = [counts[(category, d)] for d in DIFFICULTIES]
        lines.append(f"    {category:<15}" + "".join(f"{n:>6}" for n in row) + f"{sum(row):>8}")
    totals = [sum(counts[(c, d)] for c in categories) for d in DIFFICULTIES]
    lines.append(f"    {'all':<15}" + "".join(f"{n:>6}" for n in totals) + f"{sum(totals):>8}")
    return lines


def _examples(tasks: list[Task], per_cell: int) -> list[str]:
    """`per_cell` CRUX prompts in full, and `per_cell` generated questions per category and difficulty."""
    lines = ["\nexamples from eval (every prompt ends with the same instruction, shown once):",
             f"    {ANSWER_INSTRUCTION}"]
    for task in [t for t in tasks if t.source == "crux"][:per_cell]:
        code = task.prompt[task.prompt.find("[PYTHON]"):task.prompt.find("[/PYTHON]") + len("[/PYTHON]")]
        lines.append(f"\n  {task.id} (d{task.difficulty}, {task.kind}) truth={task.truth}; its prompt's code:")
        lines += [f"    | {line}" for line in code.splitlines()]
    lines.append("\n  generated: question => truth (kind)")
    shown = Counter()
    for task in sorted((t for t in tasks if t.source == "generated"), key=lambda t: (t.category, t.difficulty)):
        if shown[(task.category, task.difficulty)] < per_cell:
            shown[(task.category, task.difficulty)] += 1
            question = task.prompt[:-len(ANSWER_INSTRUCTION)].strip()
            lines.append(f"    {task.category} d{task.difficulty}: {question} => {task.truth} ({task.kind})")
    return lines


def summary(workload: Workload, examples: int) -> str:
    lines = [f"workload seed={workload.seed}"]
    for name in ("train", "eval"):
        tasks = workload.split(name)
        sources = Counter(t.source for t in tasks)
        kinds = Counter(t.kind for t in tasks)
        lines.append(f"\n{name}: {len(tasks)} tasks  " + "  ".join(f"{s}={n}" for s, n in sorted(sources.items()))
                     + "  | kinds " + "  ".join(f"{k}={n}" for k, n in sorted(kinds.items())))
        lines += _table(tasks)
        if name in workload.crux_examined:
            dropped = workload.crux_dropped.get(name) or {}
            lines.append(f"    CRUX rows run: {workload.crux_examined[name]}, dropped: "
                         + (", ".join(f"{r}={n}" for r, n in sorted(dropped.items())) or "none"))
    if examples:
        lines += _examples(workload.eval, examples)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", action="store_true", help="print counts and examples (the default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-generated", type=int, default=DEFAULT_N_GENERATED, help="generated tasks per split")
    parser.add_argument("--crux-limit", type=int, default=DEFAULT_CRUX_LIMIT,
                        help="CRUX tasks per split; -1: every usable row; 0: none")
    parser.add_argument("--data-dir", default=None, help="routing data (default $AIO_ROUTING_DATA or "
                                                         "../shared/data/routing)")
    parser.add_argument("--examples", type=int, default=1, help="CRUX prompts, and generated questions per category and "
                                                                "difficulty, to show")
    args = parser.parse_args(argv)
    started = time.monotonic()
    workload = load_workload(args.seed, args.n_generated, None if args.crux_limit < 0 else args.crux_limit,
                             data_dir=args.data_dir)
    print(summary(workload, args.examples))
    print(f"\nbuilt in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
