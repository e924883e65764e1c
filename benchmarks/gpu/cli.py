"""`python -m benchmarks.gpu`: argument parsing and the loop over parts (see the package docstring)."""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import benchmarks.gpu as package  # noqa: E402
from benchmarks.gpu.parts import PARTS  # noqa: E402
from benchmarks.gpu.report import Report, environment  # noqa: E402
from benchmarks.gpu.shapes import SMOKE_SETTINGS, Settings  # noqa: E402
from benchmarks.gpu.systems import Bench  # noqa: E402

# Seconds on an H100 with the checkpoints not yet built: rough guesses, except awq70b (measured 2026-11-27: the build
# 62 s, the rest 79 s); see the package docstring. --budget-s skips a part whose estimate no longer fits.
ESTIMATES_S = {"copy": 10, "decode1b": 150, "decode8b": 240, "throughput": 210, "correctness": 120, "int4": 180,
               "awq70b": 150}
ORDER = ("copy", "decode1b", "decode8b", "throughput", "correctness", "int4", "awq70b")
NEEDS_COPY = {"decode1b", "decode8b", "int4", "awq70b"}  # their % of HBM needs the copy bandwidth


def default_json() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu.json" if out else Path(".bench/gpu.json")


def parse_parts(text: str) -> list[str]:
    asked = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in asked if p != "all" and p not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(ORDER)} or all")
    chosen = set(ORDER) if "all" in asked else set(asked)
    if chosen & NEEDS_COPY:
        chosen.add("copy")
    return [p for p in ORDER if p in chosen]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=package.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="all", help=f"comma separated: {', '.join(ORDER)} (default all; copy "
                        "is added to any part that reports a share of the bandwidth)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="wall seconds for this run: a part whose estimate no longer fits is skipped, and rows "
                             "past the budget are skipped")
    parser.add_argument("--json", type=Path, default=None, help="default: $OUT/gpu.json if OUT is set, else "
                                                                ".bench/gpu.json")
    parser.add_argument("--work-dir", type=Path, default=Path(".bench/gpu"),
                        help="where the random checkpoints are built (and found again by a later run)")
    parser.add_argument("--repeats", type=int, default=None, help="batch-1 decode: best of N (default 3)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes and workloads; runs on CPU (parts that need CUDA are skipped)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu (--smoke only)")
    return parser.parse_args(argv)


def check_engine_imports() -> None:
    """Imports what every engine row needs before any checkpoint is built: a GPU machine whose Python has torch but
    not the rest of AIO's dependencies stops here, naming the module, instead of after minutes of building."""
    try:
        import tiers.engine.llm_engine  # noqa: F401
        import tiers.models.awq  # noqa: F401
        import tiers.quantization.kquant  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"{exc}: the engine cannot load; install AIO's dependencies (pyproject.toml) first") from exc


def main(argv: list[str] | None = None) -> dict[str, Any]:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    args = parse_args(argv)
    check_engine_imports()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the rows
    start = time.perf_counter()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if not device.startswith("cuda") and not args.smoke:
        raise SystemExit("no CUDA device: the GPU benchmark needs one (--smoke runs tiny shapes on CPU)")
    settings: Settings = SMOKE_SETTINGS if args.smoke else Settings()
    if args.repeats:
        settings = replace(settings, repeats=args.repeats)
    parts = parse_parts(args.parts)
    shown = {k: v for k, v in asdict(settings).items() if k != "shapes"}
    shown["shapes"] = {name: asdict(shape) for name, shape in settings.shapes.items()}
    report = Report(args.json or default_json(), environment(device),
                    dict(shown, smoke=args.smoke, parts=parts, budget_s=args.budget_s))
    deadline = start + args.budget_s if args.budget_s else None
    bench = Bench(device, settings, args.work_dir, report, deadline)
    for part in parts:
        elapsed = time.perf_counter() - start
        if args.budget_s and not args.smoke and elapsed + ESTIMATES_S[part] > args.budget_s:
            report.end_part(part, "skipped", 0.0, f"its estimate of {ESTIMATES_S[part]} s does not fit the "
                            f"{args.budget_s - elapsed:.0f} s left of --budget-s")
            continue
        part_start = time.perf_counter()
        print(f"== part {part} (estimate {ESTIMATES_S[part]} s on an H100)", flush=True)
        failure = None
        try:
            PARTS[part](bench)
        except Exception as exc:  # e.g. a checkpoint that could not be built: the rest of the part cannot run
            failure = f"{type(exc).__name__}: {exc}"
            report.details.setdefault("errors", []).append({"part": part, "traceback": traceback.format_exc()[-4000:]})
        if failure:
            bench.slot.release()  # out of the except block: the traceback no longer holds what failed
            report.end_part(part, "failed", time.perf_counter() - part_start, failure)
        else:
            failed = [r for r in report.rows if r.part == part and r.error]
            report.end_part(part, "failed rows" if failed else "done", time.perf_counter() - part_start)
    bench.slot.release()
    report.write()
    print("\n" + report.table(), flush=True)
    print(f"\nJSON written to {report.path}; {time.perf_counter() - start:.0f} s in all", flush=True)
    return report.as_dict()
