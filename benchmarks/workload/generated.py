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

Truth kinds (see `extract.matches`): "number" for quantities, "text" for words, letters, names, weekdays,
yes/no and formatted dates or times, "literal" for lists (a Python list in square brackets).
"""
from __future__ import annotations

import calendar
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from fractions import Fraction

CATEGORIES = ("arithmetic", "strings_lists", "dates_units", "logic")
DIFFICULTIES = (1, 2, 3, 4)


@dataclass(frozen=True)
class Item:
    question: str
    truth: str
    kind: str  # "number", "text" or "literal"
    template: str


@dataclass(frozen=True)
class GeneratedTask:
    id: str
    category: str
    difficulty: int
    template: str  # the generator that made it, e.g. "add_1digit"
    question: str  # without the answer instruction
    truth: str
    kind: str


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


# -- arithmetic ----------------------------------------------------------------------------------------------

@template("arithmetic", 1)
def add_1digit(rng):
    a, b = rng.randint(1, 5), rng.randint(1, 5)
    return f"What is {a} + {b}?", a + b, "number"


@template("arithmetic", 1)
def sub_1digit(rng):
    a = rng.randint(2, 9)
    b = rng.randint(1, a - 1)
    return f"What is {a} - {b}?", a - b, "number"


@template("arithmetic", 2)
def add_2digit(rng):
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"What is {a} + {b}?", a + b, "number"


@template("arithmetic", 2)
def sub_2digit(rng):
    a = rng.randint(20, 99)
    b = rng.randint(10, a - 1)
    return f"What is {a} - {b}?", a - b, "number"


@template("arithmetic", 2)
def times_table(rng):
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"What is {a} times {b}?", a * b, "number"


@template("arithmetic", 3)
def bags_word_problem(rng):
    name = rng.choice(NAMES)
    have, bags, each = rng.randint(5, 30), rng.randint(2, 6), rng.randint(2, 9)
    return (f"{name} has {have} apples and buys {bags} bags with {each} apples in each bag. "
            f"How many apples does {name} have now?", have + bags * each, "number")


@template("arithmetic", 3)
def boxes_word_problem(rng):
    name = rng.choice(NAMES)
    per_box, boxes = rng.randint(4, 12), rng.randint(3, 8)
    given = rng.randint(1, per_box * boxes - 1)
    return (f"A box holds {per_box} pencils. {name} has {boxes} full boxes and gives away {given} pencils. "
            f"How many pencils does {name} have left?", per_box * boxes - given, "number")


@template("arithmetic", 3)
def exact_division(rng):
    b, q = rng.randint(3, 12), rng.randint(6, 25)
    return f"What is {b * q} divided by {b}?", Fraction(b * q, b), "number"


@template("arithmetic", 4)
def change_word_problem(rng):
    name = rng.choice(NAMES)
    pen, book = rng.randint(2, 6), rng.randint(4, 12)
    pens, books = rng.randint(2, 6), rng.randint(2, 5)
    cost = pen * pens + book * books
    bill = 50 if cost < 50 else 100
    return (f"Pens cost {pen} dollars each and notebooks cost {book} dollars each. {name} buys {pens} pens "
            f"and {books} notebooks and pays with a {bill} dollar bill. How much change does {name} get, "
            f"in dollars?", bill - cost, "number")


@template("arithmetic", 4)
def trip_word_problem(rng):
    v1, v2 = rng.choice(range(40, 130, 10)), rng.choice(range(40, 130, 10))
    t1, t2 = rng.randint(2, 5), rng.randint(2, 4)
    return (f"A train travels at {v1} kilometers per hour for {t1} hours, then at {v2} kilometers per hour "
            f"for {t2} hours. How many kilometers does it travel in total?", v1 * t1 + v2 * t2, "number")


@template("arithmetic", 4)
def discount_word_problem(rng):
    price, percent = rng.choice(range(20, 220, 20)), rng.choice((10, 20, 25, 50))
    return (f"A jacket costs {price} dollars. It is sold at {percent}% off. How much does it cost after the "
            f"discount, in dollars?", Fraction(price) * (100 - percent) / 100, "number")


@template("arithmetic", 4)
def share_word_problem(rng):
    friends, each = rng.randint(3, 8), rng.randint(4, 9)
    eaten = rng.randint(1, each - 1)
    return (f"{friends} friends share {friends * each} cookies equally. Each friend eats {eaten} of their "
            f"cookies. How many cookies are left in total?", friends * (each - eaten), "number")


@template("arithmetic", 4)
def average_word_problem(rng):
    scores = [rng.randint(60, 100) for _ in range(4)]
    listed = ", ".join(map(str, scores[:-1])) + f" and {scores[-1]}"
    return f"Four test scores are {listed}. What is their average?", Fraction(sum(scores), 4), "number"


# -- strings and lists ---------------------------------------------------------------------------------------

@template("strings_lists", 1)
def first_letter(rng):
    word = rng.choice(WORDS_SHORT)
    return f"What is the first letter of the word '{word}'?", word[0], "text"


@template("strings_lists", 1)
def bigger_number(rng):
    a, b = _distinct(rng, 1, 20, 2)
    return f"Which number is bigger, {a} or {b}?", max(a, b), "number"


@template("strings_lists", 2)
def last_letter(rng):
    word = rng.choice(WORDS_SHORT + WORDS_6)
    return f"What is the last letter of the word '{word}'?", word[-1], "text"


@template("strings_lists", 2)
def reverse_short_word(rng):
    word = rng.choice(WORDS_3)
    return f"What is the word '{word}' spelled backwards?", word[::-1], "text"


@template("strings_lists", 3)
def count_letter_in_word(rng):
    word = rng.choice(WORDS_REPEAT)
    letter = rng.choice(sorted(set(word)))
    return f"How many times does the letter '{letter}' appear in the word '{word}'?", word.count(letter), "number"


@template("strings_lists", 2)
def largest_of_four(rng):
    numbers = _distinct(rng, 1, 50, 4)
    return f"What is the largest number in the list {numbers}?", max(numbers), "number"


@template("strings_lists", 2)
def sum_of_three(rng):
    a, b, c = (rng.randint(1, 9) for _ in range(3))
    return f"What is the sum of the numbers {a}, {b} and {c}?", a + b + c, "number"


@template("strings_lists", 3)
def reverse_word(rng):
    word = rng.choice(WORDS_6)
    return f"What is the word '{word}' spelled backwards?", word[::-1], "text"


@template("strings_lists", 3)
def nth_element(rng):
    numbers = _distinct(rng, 1, 60, rng.randint(6, 8))
    n = rng.randint(2, len(numbers))
    return (f"What is the {ordinal(n)} number in the list {numbers}? Count from the left, starting at 1.",
            numbers[n - 1], "number")


@template("strings_lists", 3)
def sort_five(rng):
    numbers = _distinct(rng, 10, 99, 5)
    return (f"Sort the list {numbers} from smallest to largest. Give the result as a list in square "
            f"brackets.", sorted(numbers), "literal")


@template("strings_lists", 3)
def sum_of_five(rng):
    numbers = [rng.randint(1, 30) for _ in range(5)]
    return f"What is the sum of the numbers in the list {numbers}?", sum(numbers), "number"


@template("strings_lists", 4)
def count_letter_in_sentence(rng):
    sentence = _sentence(rng, 4)
    letter = rng.choice(sorted(set(sentence) - {" "}))
    return (f"How many times does the letter '{letter}' appear in the sentence '{sentence}'?",
            sentence.count(letter), "number")


@template("strings_lists", 4)
def reverse_long_word(rng):
    word = rng.choice(WORDS_9)
    return f"What is the word '{word}' spelled backwards?", word[::-1], "text"


@template("strings_lists", 4)
def sort_seven_signed(rng):
    numbers = _distinct(rng, -50, 99, 7)
    return (f"Sort the list {numbers} from smallest to largest. Give the result as a list in square "
            f"brackets.", sorted(numbers), "literal")


@template("strings_lists", 4)
def second_largest(rng):
    numbers = _distinct(rng, 1, 99, 8)
    return f"What is the second largest number in the list {numbers}?", sorted(numbers)[-2], "number"


@template("strings_lists", 4)
def count_vowels(rng):
    sentence = _sentence(rng, 5)
    return (f"How many vowels (a, e, i, o, u) are in the sentence '{sentence}'?",
            sum(ch in VOWELS for ch in sentence), "number")


@template("strings_lists", 4)
def sum_of_evens(rng):
    numbers = [rng.randint(1, 40) for _ in range(8)]
    return (f"What is the sum of the even numbers in the list {numbers}?",
            sum(n for n in numbers if n % 2 == 0), "number")


# -- dates and units -----------------------------------------------------------------------------------------

_CONSTANTS = (("How many days are in a week?", timedelta(weeks=1) // timedelta(days=1)),
              ("How many hours are in a day?", timedelta(days=1) // timedelta(hours=1)),
              ("How many minutes are in an hour?", timedelta(hours=1) // timedelta(minutes=1)),
              ("How many seconds are in a minute?", timedelta(minutes=1) // timedelta(seconds=1)),
              ("How many months are in a year?", len(MONTHS)),
              ("How many days are in a year that is not a leap year?", (date(2024, 1, 1) - date(2023, 1, 1)).days))
# unit: (plural name, larger unit, how many units in one larger unit)
_UNITS = (("meters", "kilometers", 1000), ("grams", "kilograms", 1000), ("centimeters", "meters", 100),
          ("milliliters", "liters", 1000))
_DURATIONS = (("minutes", "hours", timedelta(hours=1) // timedelta(minutes=1)),
              ("hours", "days", timedelta(days=1) // timedelta(hours=1)),
              ("days", "weeks", timedelta(weeks=1) // timedelta(days=1)),
              ("seconds", "minutes", timedelta(minutes=1) // timedelta(seconds=1)))


@template("dates_units", 1)
def next_or_previous_day(rng):
    i, step = rng.randrange(7), rng.choice((1, -1))
    word = "after" if step == 1 else "before"
    return f"What day comes {word} {WEEKDAYS[i]}?", WEEKDAYS[(i + step) % 7], "text"


@template("dates_units", 1)
def next_month(rng):
    i = rng.randrange(12)
    return f"What month comes after {MONTHS[i]}?", MONTHS[(i + 1) % 12], "text"


@template("dates_units", 1)
def time_constant(rng):
    question, value = rng.choice(_CONSTANTS)
    return question, value, "number"


@template("dates_units", 1)
def days_in_month(rng):
    month = rng.choice([m for m in range(1, 13) if m != 2])  # February depends on the year
    return f"How many days are in {MONTHS[month - 1]}?", calendar.monthrange(2023, month)[1], "number"


@template("dates_units", 2)
def duration_conversion(rng):
    small, large, factor = rng.choice(_DURATIONS)
    n = rng.randint(2, 12)
    return f"How many {small} are in {n} {large}?", n * factor, "number"


@template("dates_units", 2)
def unit_conversion(rng):
    small, large, factor = rng.choice(_UNITS)
    n = rng.randint(2, 9)
    return f"How many {small} are in {n} {large}?", n * factor, "number"


@template("dates_units", 3)
def days_within_month(rng):
    month = rng.randint(1, 12)
    first, second = sorted(_distinct(rng, 1, 28, 2))
    a, b = date(2023, month, first), date(2023, month, second)
    return (f"How many days after {MONTHS[month - 1]} {first} is {MONTHS[month - 1]} {second}?",
            (b - a).days, "number")


@template("dates_units", 3)
def weekday_within_month(rng):
    year, month = rng.randint(2015, 2030), rng.randint(1, 12)
    reference, target = date(year, month, 1), date(year, month, rng.randint(8, 28))
    return (f"{_day(reference)} was a {WEEKDAYS[reference.weekday()]}. What day of the week was "
            f"{_day(target)}?", WEEKDAYS[target.weekday()], "text")


@template("dates_units", 3)
def decimal_unit_conversion(rng):
    small, large, factor = rng.choice(_UNITS)
    tenths = rng.choice([t for t in range(11, 100) if t % 10])
    amount = Fraction(tenths, 10)
    if rng.random() < 0.5:
        return f"How many {small} are in {_format(amount)} {large}?", amount * factor, "number"
    return f"How many {large} are {_format(amount * factor)} {small}?", amount, "number"


@template("dates_units", 3)
def hours_and_minutes(rng):
    hours, minutes = rng.randint(1, 5), rng.randint(5, 55)
    total = timedelta(hours=hours, minutes=minutes) // timedelta(minutes=1)
    return f"How many minutes are in {plural(hours, 'hour')} and {minutes} minutes?", total, "number"


@template("dates_units", 4)
def days_across_months(rng):
    year = rng.choice((2023, 2024))
    a = date(year, rng.randint(1, 10), rng.randint(1, 28))
    b = a + timedelta(days=rng.randint(20, 80))
    return f"How many days after {_day(a)} is {_day(b)}?", (b - a).days, "number"


@template("dates_units", 4)
def weekday_across_months(rng):
    year = rng.randint(2015, 2030)
    reference = date(year, rng.randint(1, 9), 1)
    target = reference + timedelta(days=rng.randint(35, 100))
    return (f"{_day(reference)} was a {WEEKDAYS[reference.weekday()]}. What day of the week was "
            f"{_day(target)}?", WEEKDAYS[target.weekday()], "text")


@template("dates_units", 4)
def date_after_days(rng):
    start = date(rng.choice((2023, 2024)), rng.randint(1, 11), rng.randint(1, 28))
    days = rng.randint(15, 60)
    return (f"What is the date {days} days after {_day(start)}? Write it as YYYY-MM-DD.",
            (start + timedelta(days=days)).isoformat(), "text")


@template("dates_units", 4)
def clock_arithmetic(rng):
    start = datetime(2024, 1, 1, rng.randint(8, 21), rng.choice(range(0, 60, 5)))
    hours, minutes = rng.randint(1, 3), rng.choice(range(5, 60, 5))
    end = start + timedelta(hours=hours, minutes=minutes)
    return (f"A movie starts at {start:%H:%M} and lasts {plural(hours, 'hour')} and {minutes} minutes. At what "
            f"time does it end? Write the time as HH:MM on a 24-hour clock.", f"{end:%H:%M}", "text")


@template("dates_units", 4)
def speed_conversion(rng):
    speed = rng.choice(range(36, 150, 6))
    per_minute = Fraction(speed * 1000, timedelta(hours=1) // timedelta(minutes=1))
    return (f"A car drives at {speed} kilometers per hour. How many meters does it drive in one minute?",
            per_minute, "number")


# -- logic ---------------------------------------------------------------------------------------------------

def solve_ordering(names: list[str], facts: list[tuple[str, str]]) -> list[str]:
    """The one order (most to least) of `names` satisfying every (more, less) fact; by brute force."""
    orders = [order for order in itertools.permutations(names)
              if all(order.index(more) < order.index(less) for more, less in facts)]
    if len(orders) != 1:
        raise ValueError(f"{len(orders)} orders satisfy the facts")
    return list(orders[0])


def solve_truth_chain(first: str, first_truthful: bool, claims: list[tuple[str, str, bool]]) -> dict[str, bool]:
    """The one truthful/lying assignment where `first` is as stated and each (speaker, about, says_truthful)
    holds exactly when the speaker is truthful; by brute force."""
    people = [first] + [speaker for speaker, _, _ in claims]
    solutions = []
    for values in itertools.product((True, False), repeat=len(people)):
        truthful = dict(zip(people, values))
        if truthful[first] == first_truthful and all(
                truthful[speaker] == (truthful[about] == says) for speaker, about, says in claims):
            solutions.append(truthful)
    if len(solutions) != 1:
        raise ValueError(f"{len(solutions)} assignments satisfy the claims")
    return solutions[0]


def _ordering(rng: random.Random, n_people: int, shuffle: bool, mixed: bool) -> tuple[str, list[str], tuple]:
    """(statement text, true order from most to least, relation) for a chain of `n_people`."""
    relation = rng.choice(RELATIONS)
    more, less = relation[0], relation[1]
    order = rng.sample(NAMES, n_people)
    pairs = list(zip(order, order[1:]))
    if shuffle:
        rng.shuffle(pairs)
    sentences = [f"{b} is {less} than {a}." if mixed and rng.random() < 0.5 else f"{a} is {more} than {b}."
                 for a, b in pairs]
    solved = solve_ordering(order, pairs)
    return " ".join(sentences), solved, relation


@template("logic", 1)
def two_people_same(rng):
    more, _, _, _ = rng.choice(RELATIONS)
    a, b = rng.sample(NAMES, 2)
    return f"{a} is {more} than {b}. Who is {more}?", solve_ordering([a, b], [(a, b)])[0], "text"


@template("logic", 1)
def even_or_odd(rng):
    n = rng.randint(1, 30)
    return f"Is {n} even or odd?", "even" if n % 2 == 0 else "odd", "text"


@template("logic", 2)
def two_people_opposite(rng):
    more, less, _, _ = rng.choice(RELATIONS)
    a, b = rng.sample(NAMES, 2)
    return f"{a} is {more} than {b}. Who is {less}?", solve_ordering([a, b], [(a, b)])[-1], "text"


@template("logic", 2)
def three_in_order(rng):
    text, order, (_, _, most, least) = _ordering(rng, 3, shuffle=False, mixed=False)
    if rng.random() < 0.5:
        return f"{text} Who is the {most}?", order[0], "text"
    return f"{text} Who is the {least}?", order[-1], "text"


@template("logic", 2)
def lamp_few_presses(rng):
    start, presses = rng.choice(("on", "off")), rng.randint(1, 6)
    end = start if presses % 2 == 0 else {"on": "off", "off": "on"}[start]
    return (f"A lamp is {start}. Its switch is pressed {presses} times. Is the lamp on or off now?",
            end, "text")


@template("logic", 3)
def four_shuffled(rng):
    text, order, (_, _, most, least) = _ordering(rng, 4, shuffle=True, mixed=False)
    if rng.random() < 0.5:
        return f"{text} Who is the {most}?", order[0], "text"
    return f"{text} Who is the {least}?", order[-1], "text"


def _truth_chain(rng: random.Random, n_people: int) -> tuple[str, str, bool]:
    people = rng.sample(NAMES, n_people)
    first_truthful = rng.random() < 0.5
    claims = [(speaker, about, rng.random() < 0.5) for about, speaker in zip(people, people[1:])]
    sentences = [f"{people[0]} {'tells the truth' if first_truthful else 'lies'}."]
    sentences += [f"{speaker} says {about} {'tells the truth' if says else 'lies'}."
                  for speaker, about, says in claims]
    truthful = solve_truth_chain(people[0], first_truthful, claims)
    return " ".join(sentences), people[-1], truthful[people[-1]]


@template("logic", 3)
def truth_chain_3(rng):
    text, last, truthful = _truth_chain(rng, 3)
    return f"{text} Does {last} tell the truth? Answer yes or no.", "yes" if truthful else "no", "text"


@template("logic", 3)
def lamp_many_presses(rng):
    start, presses = rng.choice(("on", "off")), rng.randint(11, 40)
    end = start if presses % 2 == 0 else {"on": "off", "off": "on"}[start]
    return (f"A lamp is {start}. Its switch is pressed {presses} times. Is the lamp on or off now?",
            end, "text")


@template("logic", 3)
def product_parity(rng):
    a, b = rng.randint(11, 99), rng.randint(11, 99)
    return f"Is {a} times {b} even or odd?", "even" if (a * b) % 2 == 0 else "odd", "text"


@template("logic", 4)
def five_mixed(rng):
    text, order, (_, _, most, least) = _ordering(rng, 5, shuffle=True, mixed=True)
    if rng.random() < 0.5:
        return f"{text} Who is the second {most}?", order[1], "text"
    return f"{text} Who is the second {least}?", order[-2], "text"


@template("logic", 4)
def truth_chain_5(rng):
    text, last, truthful = _truth_chain(rng, 5)
    return f"{text} Does {last} tell the truth? Answer yes or no.", "yes" if truthful else "no", "text"


@template("logic", 4)
def sum_parity(rng):
    numbers = [rng.randint(10, 99) for _ in range(5)]
    listed = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
    return f"Is the sum of {listed} even or odd?", "even" if sum(numbers) % 2 == 0 else "odd", "text"


# -- drawing -------------------------------------------------------------------------------------------------

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
