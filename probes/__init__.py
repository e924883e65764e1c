"""Tasks whose correct answer a program computes, and the built-in probe set that measures the tiers a deployment
serves (`aio calibrate`).

Sources: generated arithmetic, string/list, date/unit and logic tasks at four difficulty levels (truth: computed by
Python) and CRUXEval-O rows (truth: the function run in a sandbox). A reply's final answer is extracted and
compared by kind. Nothing here knows about the server, routing or SQL. See docs/workload.md.
"""
from .crux import CruxItem, CruxRow, CruxSet, CruxTruth, compute_truth, load_crux, parse_question
from .extract import KINDS, extract_answer, matches, parse_number
from .generated import CATEGORIES, DIFFICULTIES, GeneratedTask, generate, iter_cell
from .sandbox import DEFAULT_LIMITS, Limits, Outcome, SandboxResult, evaluate
from .task import ANSWER_INSTRUCTION, CRUX_VALUE_NOTE, Task, crux_task, generated_task, with_instruction

__all__ = [
    "ANSWER_INSTRUCTION", "CATEGORIES", "CRUX_VALUE_NOTE", "CruxItem", "CruxRow", "CruxSet", "CruxTruth",
    "DEFAULT_LIMITS", "DIFFICULTIES", "GeneratedTask", "KINDS", "Limits", "Outcome", "SandboxResult", "Task",
    "compute_truth", "crux_task", "evaluate", "extract_answer", "generate", "generated_task", "iter_cell",
    "load_crux", "matches", "parse_number", "parse_question", "with_instruction",
]
