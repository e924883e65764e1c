"""Generated arithmetic tasks: sums and differences, times tables, division and word problems."""
from __future__ import annotations

from fractions import Fraction

from .templates import NAMES, template


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
