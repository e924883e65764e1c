"""Generated logic tasks: orderings and truth-teller chains (truth from a brute-force solver), parity, lamps."""
from __future__ import annotations

import itertools
import random

from .templates import NAMES, RELATIONS, template


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
