"""The registry and shared pieces of the generated tasks: the cells, `template`, the word lists and helpers.

Each category's templates live in a module of their own (`tasks_arithmetic`, `tasks_strings_lists`,
`tasks_dates_units`, `tasks_logic`, `tasks_knowledge`, `tasks_code`) and register themselves into `TEMPLATES` with `@template(category,
difficulty)` when imported; `generated` imports them all. A cell's list keeps its templates in definition order,
which is the order `random.choice` draws from, so reordering the templates of a cell changes every seed's tasks.
"""
from __future__ import annotations

import calendar
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from fractions import Fraction

CATEGORIES = ("arithmetic", "strings_lists", "dates_units", "logic", "knowledge", "code")
DIFFICULTIES = (1, 2, 3, 4)


@dataclass(frozen=True)
class Item:
    question: str
    truth: str
    kind: str  # "number", "text" or "literal"
    template: str


Template = Callable[[random.Random], Item]
TEMPLATES: dict[tuple[str, int], list[Template]] = {(c, d): [] for c in CATEGORIES for d in DIFFICULTIES}


def template(category: str, difficulty: int) -> Callable[[Callable[[random.Random], tuple]], Template]:
    """Register a generator returning (question, truth value, kind) under its function name."""

    def register(fn: Callable[[random.Random], tuple]) -> Template:
        def make(rng: random.Random) -> Item:
            question, value, kind = fn(rng)
            return Item(question, _format(value), kind, fn.__name__)

        make.__name__ = fn.__name__
        TEMPLATES[(category, difficulty)].append(make)
        return make

    return register


def _format(value) -> str:
    """Numbers as Python prints an int or a terminating decimal; lists as their repr; strings unchanged."""
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, (int, Fraction)):
        value = Fraction(value)
        if value.denominator == 1:
            return str(value.numerator)
        denominator, twos_fives = value.denominator, 0
        while denominator % 2 == 0 or denominator % 5 == 0:
            denominator //= 2 if denominator % 2 == 0 else 5
            twos_fives += 1
        if denominator != 1:
            raise ValueError(f"{value} is not a terminating decimal")
        return f"{float(value):.{twos_fives}f}".rstrip("0").rstrip(".")
    if isinstance(value, list):
        return repr(value)
    raise TypeError(f"unsupported truth {value!r}")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


WORDS_SHORT = ("apple", "ball", "cat", "dog", "egg", "fish", "goat", "hat", "lion", "milk", "nest", "orange",
               "pig", "rose", "sun", "tree", "van", "water", "box", "yellow", "zoo", "book", "cake", "door",
               "moon", "star", "bird", "frog", "house", "car", "bread", "chair", "lamp", "shoe", "train", "king")
WORDS_3 = ("cat", "dog", "sun", "pen", "map", "cup", "red", "top", "bus", "hat", "pig", "box", "jam", "fox",
           "net", "owl", "bag", "cow", "bed", "leg")
WORDS_6 = ("garden", "planet", "silver", "window", "basket", "pencil", "rocket", "little", "castle", "bridge",
           "monkey", "flower", "summer", "winter", "forest", "market", "animal", "letter", "orange", "yellow")
WORDS_9 = ("elephant", "umbrella", "mountain", "keyboard", "sandwich", "computer", "calendar", "dinosaur",
           "notebook", "hospital", "triangle", "building", "chocolate", "butterfly", "newspaper", "adventure",
           "telephone", "strawberry", "basketball", "lighthouse")
WORDS_REPEAT = ("banana", "apple", "letter", "coffee", "pepper", "balloon", "cookie", "hello", "yellow",
                "bubble", "grass", "puppy", "kitten", "summer", "tomato", "potato", "cheese", "paper")
NAMES = ("Ann", "Ben", "Cara", "Dan", "Eve", "Finn", "Gina", "Hugo", "Ivy", "Jack", "Kim", "Leo", "Mia",
         "Nora", "Omar", "Paul", "Rosa", "Sam", "Tina", "Will")
# (more, less, most, least) of one comparison
RELATIONS = (("taller", "shorter", "tallest", "shortest"), ("older", "younger", "oldest", "youngest"),
             ("faster", "slower", "fastest", "slowest"), ("heavier", "lighter", "heaviest", "lightest"))
WEEKDAYS = tuple(calendar.day_name)  # Monday .. Sunday
MONTHS = tuple(calendar.month_name)[1:]  # January .. December
VOWELS = "aeiou"


def _distinct(rng: random.Random, low: int, high: int, k: int) -> list[int]:
    return rng.sample(range(low, high + 1), k)


def _sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.sample(WORDS_SHORT + WORDS_6, n_words))


def _day(d: date) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"
