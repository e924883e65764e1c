"""Generated string and list tasks: letters of words, reversing, counting, largest, sorting, sums."""
from __future__ import annotations

from .templates import (VOWELS, WORDS_3, WORDS_6, WORDS_9, WORDS_REPEAT, WORDS_SHORT, _distinct, _sentence,
                        ordinal, template)


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
