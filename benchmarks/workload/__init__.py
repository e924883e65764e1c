"""A workload of questions whose correct answer a program computes, for benchmarking the routed tiers.

    python -m benchmarks.workload --summary

Sources: CRUXEval-O rows of the routing data (truth: the function run in a sandbox) and generated
arithmetic, string/list, date/unit and logic tasks at four difficulty levels (truth: computed by Python).
Answers are extracted from a reply's final `Answer:` line (or its last code block) and compared by kind.
See docs/workload.md.
"""
from .crux import CruxItem, CruxRow, CruxSet, CruxTruth, compute_truth, load_crux, parse_question
from .dataset import (ANSWER_INSTRUCTION, CRUX_VALUE_NOTE, Task, Workload, crux_task, generated_task,
                      load_workload, split_of)
from .extract import KINDS, extract_answer, matches, parse_number
from .generated import CATEGORIES, DIFFICULTIES, GeneratedTask, generate, iter_cell
from .sandbox import DEFAULT_LIMITS, Limits, Outcome, SandboxResult, evaluate

__all__ = [
    "ANSWER_INSTRUCTION", "CATEGORIES", "CRUX_VALUE_NOTE", "CruxItem", "CruxRow", "CruxSet", "CruxTruth",
    "DEFAULT_LIMITS", "DIFFICULTIES", "GeneratedTask", "KINDS", "Limits", "Outcome", "SandboxResult", "Task",
    "Workload", "compute_truth", "crux_task", "evaluate", "extract_answer", "generate", "generated_task",
    "iter_cell", "load_crux", "load_workload", "matches", "parse_number", "parse_question", "split_of",
]
