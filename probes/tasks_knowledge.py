"""Generated knowledge tasks with a fixed truth: capitals, chemical symbols and atomic numbers, easier where the
fact is more widely known. The tables avoid names with several accepted spellings or accents."""
from __future__ import annotations

from .templates import template

CAPITALS = {
    1: {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Germany": "Berlin", "Spain": "Madrid",
        "the United Kingdom": "London", "Russia": "Moscow", "China": "Beijing", "Egypt": "Cairo"},
    2: {"Canada": "Ottawa", "Australia": "Canberra", "Turkey": "Ankara", "Kenya": "Nairobi", "Argentina": "Buenos Aires",
        "Sweden": "Stockholm", "Norway": "Oslo", "Greece": "Athens", "Poland": "Warsaw", "Portugal": "Lisbon"},
    3: {"Switzerland": "Bern", "New Zealand": "Wellington", "Nigeria": "Abuja", "Morocco": "Rabat", "Vietnam": "Hanoi",
        "Peru": "Lima", "Hungary": "Budapest", "Finland": "Helsinki", "Austria": "Vienna", "Pakistan": "Islamabad"},
    4: {"Bhutan": "Thimphu", "Laos": "Vientiane", "Malawi": "Lilongwe", "Uruguay": "Montevideo", "Slovenia": "Ljubljana",
        "Latvia": "Riga", "Estonia": "Tallinn", "Jordan": "Amman", "Ghana": "Accra", "Zambia": "Lusaka", "Fiji": "Suva"},
}
SYMBOLS = {
    1: {"oxygen": "O", "hydrogen": "H", "carbon": "C"},
    2: {"gold": "Au", "silver": "Ag", "iron": "Fe", "sodium": "Na", "helium": "He", "copper": "Cu"},
    3: {"tin": "Sn", "lead": "Pb", "mercury": "Hg", "zinc": "Zn", "nickel": "Ni", "potassium": "K"},
    4: {"tungsten": "W", "antimony": "Sb", "manganese": "Mn", "cobalt": "Co", "platinum": "Pt", "chromium": "Cr"},
}
ATOMIC_NUMBERS = {3: {"carbon": 6, "oxygen": 8, "nitrogen": 7, "hydrogen": 1, "helium": 2},
                  4: {"iron": 26, "gold": 79, "silver": 47, "copper": 29, "zinc": 30, "sodium": 11}}
FACTS_1 = (("How many legs does a spider have?", 8, "number"), ("How many continents are there on Earth?", 7, "number"),
           ("What is the largest planet in the solar system?", "Jupiter", "text"),
           ("What color do you get by mixing blue and yellow paint?", "green", "text"),
           ("How many sides does a triangle have?", 3, "number"))


def _capital(rng, level: int):
    country, capital = rng.choice(sorted(CAPITALS[level].items()))
    return f"What is the capital of {country}?", capital, "text"


def _symbol(rng, level: int):
    element, symbol = rng.choice(sorted(SYMBOLS[level].items()))
    return f"What is the chemical symbol of {element}?", symbol, "text"


def _atomic_number(rng, level: int):
    element, number = rng.choice(sorted(ATOMIC_NUMBERS[level].items()))
    return f"What is the atomic number of {element}?", number, "number"


@template("knowledge", 1)
def capital_famous(rng):
    return _capital(rng, 1)


@template("knowledge", 1)
def common_fact(rng):
    return rng.choice(FACTS_1)


@template("knowledge", 2)
def capital_known(rng):
    return _capital(rng, 2)


@template("knowledge", 2)
def symbol_common(rng):
    return _symbol(rng, 2)


@template("knowledge", 3)
def capital_less_known(rng):
    return _capital(rng, 3)


@template("knowledge", 3)
def symbol_less_common(rng):
    return _symbol(rng, 3)


@template("knowledge", 3)
def atomic_number_light(rng):
    return _atomic_number(rng, 3)


@template("knowledge", 4)
def capital_obscure(rng):
    return _capital(rng, 4)


@template("knowledge", 4)
def symbol_rare(rng):
    return _symbol(rng, 4)


@template("knowledge", 4)
def atomic_number_heavy(rng):
    return _atomic_number(rng, 4)
