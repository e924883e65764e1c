"""The knowledge and code tasks of the probe set: replies are scored as a user would expect (a stated capital is
right, another city is not), and each code task's tests accept an independent correct function and refuse a wrong
one, code that raises, and a reply without code."""
from __future__ import annotations

import json

import pytest

from probes import generate
from probes.task import generated_task
from probes.templates import TEMPLATES

REFERENCE = {
    "code_add": "def {f}(a, b):\n    return a + b",
    "code_even": "def {f}(n):\n    return n % 2 == 0",
    "code_square": "def {f}(n):\n    return n ** 2",
    "code_reverse": "def {f}(s):\n    return ''.join(reversed(s))",
    "code_vowels": "def {f}(s):\n    return len([c for c in s if c in 'aeiou'])",
    "code_total": "def {f}(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t",
    "code_largest": "def {f}(xs):\n    return sorted(xs)[-1]",
    "code_palindrome": "def {f}(s):\n    t = s.replace(' ', '').lower()\n    return t == t[::-1]",
    "code_second": "def {f}(xs):\n    return sorted(set(xs), reverse=True)[1]",
    "code_fizzbuzz": ("def {f}(n):\n    out = []\n    for i in range(1, n + 1):\n        s = ('Fizz' if i % 3 == 0 else '') "
                      "+ ('Buzz' if i % 5 == 0 else '')\n        out.append(s or str(i))\n    return out"),
    "code_rle": ("def {f}(s):\n    import itertools\n    return ''.join(k + str(len(list(g))) for k, g in "
                 "itertools.groupby(s))"),
    "code_balanced": ("def {f}(s):\n    st = []\n    for c in s:\n        if c in '([{':\n            st.append(c)\n"
                      "        elif c in ')]}':\n            if not st or '([{'[')]}'.index(c)] != st.pop():\n"
                      "                return False\n    return not st"),
    "code_roman": ("def {f}(n):\n    v = [(1000,'M'),(900,'CM'),(500,'D'),(400,'CD'),(100,'C'),(90,'XC'),(50,'L'),"
                   "(40,'XL'),(10,'X'),(9,'IX'),(5,'V'),(4,'IV'),(1,'I')]\n    r = ''\n    for a, b in v:\n"
                   "        r += b * (n // a)\n        n %= a\n    return r"),
}


def code_tasks():
    for difficulty in (1, 2, 3, 4):
        for index in range(12):
            task = generate(3, "code", difficulty, index)
            yield generated_task(task), task.template


def test_every_code_template_has_an_independent_reference():
    assert {t.__name__ for d in (1, 2, 3, 4) for t in TEMPLATES[("code", d)]} == set(REFERENCE)


@pytest.mark.parametrize("task,template", list(code_tasks())[::3], ids=lambda x: getattr(x, "id", x))
def test_a_correct_function_passes_and_a_wrong_one_fails(task, template):
    name = json.loads(task.truth)["function"]
    assert f"`{name}(" in task.prompt and "code block" in task.prompt
    correct = REFERENCE[template].replace("{f}", name)
    assert task.is_right(f"Here it is:\n```python\n{correct}\n```")
    assert task.is_right(correct)  # a bare function counts too
    assert not task.is_right(f"```python\ndef {name}(*args):\n    return None\n```")
    assert not task.is_right(f"```python\ndef {name}(*args):\n    raise ValueError('no')\n```")
    assert not task.is_right("I would use a loop.")


def test_knowledge_replies_are_scored_by_the_fact():
    tasks = [generated_task(generate(0, "knowledge", d, i)) for d in (1, 2, 3, 4) for i in range(30)]
    capital = next(t for t in tasks if "capital of France" in t.prompt)
    assert capital.is_right("The capital of France is Paris.") and capital.is_right("Answer: Paris")
    assert not capital.is_right("Answer: Lyon")
    symbol = next(t for t in tasks if "chemical symbol of gold" in t.prompt)
    assert symbol.is_right("Answer: Au") and not symbol.is_right("Answer: Ag")
    number = next(t for t in tasks if "atomic number of iron" in t.prompt)
    assert number.is_right("Answer: 26") and not number.is_right("Answer: 62")
