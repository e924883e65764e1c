"""A workload of questions whose correct answer a program computes, for benchmarking the routed tiers.

    python -m benchmarks.workload --summary

The tasks, their truths and the answer matching are the product's (`probes`, which `aio calibrate` probes the
tiers with); this package adds the benchmark's fixed train / eval split. See docs/workload.md.
"""
from probes import (CATEGORIES, DEFAULT_LIMITS, DIFFICULTIES, KINDS, CruxItem, CruxRow, CruxSet, CruxTruth,
                    GeneratedTask, Limits, Outcome, SandboxResult, compute_truth, evaluate, extract_answer, generate,
                    iter_cell, load_crux, matches, parse_number, parse_question)

from .dataset import (ANSWER_INSTRUCTION, CRUX_VALUE_NOTE, Task, Workload, crux_task, generated_task,
                      load_workload, split_of)

__all__ = [
    "ANSWER_INSTRUCTION", "CATEGORIES", "CRUX_VALUE_NOTE", "CruxItem", "CruxRow", "CruxSet", "CruxTruth",
    "DEFAULT_LIMITS", "DIFFICULTIES", "GeneratedTask", "KINDS", "Limits", "Outcome", "SandboxResult", "Task",
    "Workload", "compute_truth", "crux_task", "evaluate", "extract_answer", "generate", "generated_task",
    "iter_cell", "load_crux", "load_workload", "matches", "parse_number", "parse_question", "split_of",
]
