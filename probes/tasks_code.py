"""Generated code-writing tasks: a Python function to write, checked by running it on test cases in the sandbox
(`code_check`). The truth is the function's name and its test cases, as JSON; the kind is "code"."""
from __future__ import annotations

import json

from .templates import template

NAMES = {"sum_two": ("add", "add_numbers", "plus"), "is_even": ("is_even", "even"), "square": ("square", "sq"),
         "reverse": ("reverse_text", "reverse_string", "backwards"), "vowels": ("count_vowels", "vowel_count"),
         "total": ("total", "sum_list", "list_sum"), "largest": ("largest", "biggest", "max_value"),
         "palindrome": ("is_palindrome", "palindrome"), "second": ("second_largest", "runner_up"),
         "fizzbuzz": ("fizzbuzz", "fizz_buzz"), "words": ("count_words", "word_count"),
         "rle": ("run_length", "encode_runs"), "balanced": ("is_balanced", "balanced"),
         "roman": ("to_roman", "roman_numeral"), "merge": ("merge_sorted", "merge_lists")}


def _task(rng, key: str, signature: str, description: str, tests: list[tuple[list, object]]):
    name = rng.choice(NAMES[key])
    args, want = tests[0]
    example = f"{name}({', '.join(map(repr, args))}) returns {want!r}"
    question = (f"Write a Python function `{name}({signature})` that {description}. For example, {example}. Reply "
                "with the function in a Python code block.")
    return question, json.dumps({"function": name, "tests": [[args, want] for args, want in tests]}), "code"


def _ints(rng, n: int, lo: int = -20, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


@template("code", 1)
def code_add(rng):
    cases = [(_ints(rng, 2), None) for _ in range(3)]
    return _task(rng, "sum_two", "a, b", "returns the sum of a and b", [(a, sum(a)) for a, _ in cases])


@template("code", 1)
def code_even(rng):
    cases = _ints(rng, 4)
    return _task(rng, "is_even", "n", "returns True if the integer n is even and False otherwise",
                 [([n], n % 2 == 0) for n in cases])


@template("code", 1)
def code_square(rng):
    return _task(rng, "square", "n", "returns n multiplied by itself", [([n], n * n) for n in _ints(rng, 3)])


@template("code", 2)
def code_reverse(rng):
    words = rng.sample(["apple", "river", "stone", "garden", "window", "planet"], 3)
    return _task(rng, "reverse", "s", "returns the string s reversed", [([w], w[::-1]) for w in words])


@template("code", 2)
def code_vowels(rng):
    words = rng.sample(["banana", "sky", "education", "rhythm", "queue", "orange"], 3)
    return _task(rng, "vowels", "s", "returns how many vowels (a, e, i, o, u) the lowercase string s contains",
                 [([w], sum(c in "aeiou" for c in w)) for w in words])


@template("code", 2)
def code_total(rng):
    lists = [_ints(rng, rng.randint(0, 5)) for _ in range(3)]
    return _task(rng, "total", "xs", "returns the sum of the numbers in the list xs (0 for an empty list)",
                 [([xs], sum(xs)) for xs in lists])


@template("code", 2)
def code_largest(rng):
    lists = [_ints(rng, rng.randint(1, 6)) for _ in range(3)]
    return _task(rng, "largest", "xs", "returns the largest number in the non-empty list xs without using max()",
                 [([xs], max(xs)) for xs in lists])


@template("code", 3)
def code_palindrome(rng):
    texts = rng.sample(["Never odd or even", "Step on no pets", "Hello there", "A Santa at NASA", "Open door"], 3)
    clean = lambda t: [c.lower() for c in t if c.isalnum()]  # noqa: E731
    return _task(rng, "palindrome", "s", "returns True if s reads the same backwards, ignoring case and spaces",
                 [([t], clean(t) == clean(t)[::-1]) for t in texts])


@template("code", 3)
def code_second(rng):
    lists = [sorted(set(_ints(rng, 6)))[:rng.randint(2, 5)] for _ in range(3)]
    lists = [rng.sample(xs, len(xs)) for xs in lists if len(xs) >= 2]
    return _task(rng, "second", "xs", "returns the second largest distinct number in the list xs (it has at least "
                 "two distinct numbers)", [([xs], sorted(set(xs))[-2]) for xs in lists])


@template("code", 3)
def code_fizzbuzz(rng):
    def fizz(n):
        return ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
                for i in range(1, n + 1)]
    return _task(rng, "fizzbuzz", "n", "returns a list of strings for 1 to n: 'Fizz' for multiples of 3, 'Buzz' for "
                 "multiples of 5, 'FizzBuzz' for both, else the number as a string",
                 [([n], fizz(n)) for n in rng.sample(range(1, 20), 3)])


@template("code", 4)
def code_rle(rng):
    texts = ["".join(rng.choice("ab") * rng.randint(1, 3) for _ in range(rng.randint(2, 4))) for _ in range(3)]

    def rle(s):
        out, i = [], 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out.append(f"{s[i]}{j - i}")
            i = j
        return "".join(out)
    return _task(rng, "rle", "s", "returns the run-length encoding of s, each run as the character followed by its "
                 "length (e.g. 'aaab' gives 'a3b1')", [([t], rle(t)) for t in texts])


@template("code", 4)
def code_balanced(rng):
    texts = rng.sample(["(a[b]{c})", "([)]", "{[()()]}", "((", "a)b(", "[]{}()"], 3)

    def ok(s):
        stack, pairs = [], {")": "(", "]": "[", "}": "{"}
        for c in s:
            if c in "([{":
                stack.append(c)
            elif c in pairs and (not stack or stack.pop() != pairs[c]):
                return False
        return not stack
    return _task(rng, "balanced", "s", "returns True if the brackets (), [] and {} in s are balanced and properly "
                 "nested, other characters ignored", [([t], ok(t)) for t in texts])


@template("code", 4)
def code_roman(rng):
    def roman(n):
        out = ""
        for value, letters in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),
                               (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
            while n >= value:
                out, n = out + letters, n - value
        return out
    return _task(rng, "roman", "n", "returns the Roman numeral for the integer n (1 to 3999) as a string",
                 [([n], roman(n)) for n in rng.sample(range(1, 2000), 3)])
