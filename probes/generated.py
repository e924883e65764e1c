"""Generated questions with a computed truth, in four categories and four difficulty levels.

Policy. A task is a function of (seed, category, difficulty, index) only: its own `random.Random` seeded
with that string, so it never depends on which other tasks were drawn. Its truth is computed by Python from
the drawn values (arithmetic on the numbers, `datetime` for the calendar, a brute-force solver for the
puzzles), never typed by hand.

Difficulty is aimed at the three tiers (SmolLM2-135M-Instruct, Qwen2.5-Coder-0.5B-Instruct, -1.5B-Instruct):
1. one very common fact or one small step, a few words: "What is 3 + 4?" (addends up to 5), "What is the
   first letter of the word 'apple'?", "How many days are in a week?", "Ann is taller than Ben. Who is
   taller?" -- within reach of a 135M chat model (it gets first letters right, small sums about half the
   time); "What day comes after Monday?" is here too, though the 135M model mostly misses it;
2. one step that takes some skill: two-digit sums, a times table, reversing a three-letter word, the largest
   of four numbers, minutes in N hours, a three-person ordering given in order -- a 0.5B model's level;
3. two steps or a longer operand: a two-step word problem, sorting five numbers, the n-th element of a list,
   counting a letter in a word (spelling is hard for subword models), days between two dates of one month,
   a weekday from a reference date, a shuffled four-person ordering, a three-person truth-teller chain;
4. three or more steps: multi-step word problems (change, distance, discount), second-largest, counting
   letters or vowels in a sentence, dates across months and leap years, clock arithmetic, five-person mixed
   orderings, five-person chains -- where only the 1.5B model is expected to get a fair share.

The templates live in one module per category (`tasks_arithmetic`, `tasks_strings_lists`, `tasks_dates_units`,
`tasks_logic`), registered into `templates.TEMPLATES` by `templates.template`; this module imports them all and
draws from the registry.

Truth kinds (see `extract.matches`): "number" for quantities, "text" for words, letters, names, weekdays,
yes/no and formatted dates or times, "literal" for lists (a Python list in square brackets).
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

# the category modules register their templates into TEMPLATES when imported
from . import tasks_arithmetic, tasks_code, tasks_dates_units, tasks_knowledge, tasks_logic, tasks_strings_lists  # noqa: F401
from .tasks_logic import solve_ordering, solve_truth_chain
from .templates import CATEGORIES, DIFFICULTIES, TEMPLATES, Item, Template, ordinal, plural, template

__all__ = ["CATEGORIES", "DIFFICULTIES", "GeneratedTask", "Item", "TEMPLATES", "Template", "generate",
           "iter_cell", "ordinal", "plural", "solve_ordering", "solve_truth_chain", "template"]


@dataclass(frozen=True)
class GeneratedTask:
    id: str
    category: str
    difficulty: int
    template: str  # the generator that made it, e.g. "add_1digit"
    question: str  # without the answer instruction
    truth: str
    kind: str


def generate(seed: int, category: str, difficulty: int, index: int) -> GeneratedTask:
    """The `index`-th task of a (category, difficulty) cell for `seed`: a pure function of its arguments."""
    task_id = f"gen:{seed}:{category}:{difficulty}:{index}"
    rng = random.Random(task_id)
    item = rng.choice(TEMPLATES[(category, difficulty)])(rng)
    return GeneratedTask(task_id, category, difficulty, item.template, item.question, item.truth, item.kind)


def iter_cell(seed: int, category: str, difficulty: int) -> Iterator[GeneratedTask]:
    """The cell's tasks, index 0, 1, 2, ... (endless; duplicates of earlier questions are possible)."""
    for index in itertools.count():
        yield generate(seed, category, difficulty, index)
