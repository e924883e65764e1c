"""A task with a computed truth, as sent to a tier: the prompt (ending with `ANSWER_INSTRUCTION`), the truth and
how an answer is compared with it. Generated tasks and CRUXEval-O rows become `Task`s here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .code_check import passes
from .crux import CruxItem
from .extract import extract_answer, matches
from .generated import GeneratedTask

ANSWER_INSTRUCTION = 'End your reply with a final line "Answer: <value>".'
CRUX_VALUE_NOTE = ("The value is what the function returns, written as a Python literal the way repr() prints "
                   "it (a string with its quotes).")

Source = Literal["crux", "generated"]


@dataclass(frozen=True)
class Task:
    id: str
    source: Source
    category: str  # "crux" or a generated category
    difficulty: int  # 1..4; for CRUX, from the reference models' outcomes (`CruxRow.difficulty`)
    prompt: str  # the user message, ending with ANSWER_INSTRUCTION
    truth: str
    kind: str  # how `extract.matches` compares: "literal", "number" or "text"; "code": `code_check` runs it

    def is_right(self, reply: str) -> bool:
        """Whether `reply`'s final answer matches the truth (for code: whether its function passes the tests)."""
        if self.kind == "code":
            return passes(reply, self.truth)
        return matches(extract_answer(reply), self.truth, self.kind)


def with_instruction(question: str) -> str:
    return f"{question.rstrip()}\n\n{ANSWER_INSTRUCTION}"


def crux_task(item: CruxItem) -> Task:
    prompt = with_instruction(f"{item.row.question.rstrip()}\n\n{CRUX_VALUE_NOTE}")
    return Task(item.row.id, "crux", "crux", item.row.difficulty, prompt, item.truth, "literal")


def generated_task(task: GeneratedTask) -> Task:
    prompt = task.question if task.kind == "code" else with_instruction(task.question)  # code: its own instruction
    return Task(task.id, "generated", task.category, task.difficulty, prompt, task.truth, task.kind)
