"""benchmarks.workload: the sandbox, CRUX truths, generated tasks (recomputed here a second way), answer
extraction and matching, and the train / eval split."""
from __future__ import annotations

import ast
import csv
import functools
import operator
import re
import socket
from collections import Counter
from datetime import datetime, timedelta
from fractions import Fraction

import pytest

from benchmarks.workload import (ANSWER_INSTRUCTION, CATEGORIES, DIFFICULTIES, Limits, Outcome, evaluate,
                                 extract_answer, generate, iter_cell, load_workload, matches, parse_question)
from probes.crux import CruxParseError, compute_truth, data_dir, load_crux, read_rows
from benchmarks.workload.dataset import split_of
from probes.generated import TEMPLATES
from probes.split import HELD_OUT_CATEGORIES

FAST = Limits(cpu_seconds=1, wall_seconds=10.0)


# -- sandbox -------------------------------------------------------------------------------------------------

def test_sandbox_returns_the_repr_and_the_printed_output(tmp_path):
    result = evaluate("def f(x):\n    print('hi')\n    return [x, {'k': (1, 2.5)}, None]", "f('a')", FAST,
                      tmp_root=tmp_path)
    assert result.outcome is Outcome.OK and result.ok
    assert result.value == "['a', {'k': (1, 2.5)}, None]"
    assert result.output == "hi\n"


def test_sandbox_reports_exceptions_and_syntax_errors(tmp_path):
    raised = evaluate("def f(xs):\n    return xs[3]", "f([1])", FAST, tmp_root=tmp_path)
    assert raised.outcome is Outcome.EXCEPTION and raised.error_type == "IndexError" and raised.value is None
    assert evaluate("def f(:\n", "f()", FAST, tmp_root=tmp_path).outcome is Outcome.SYNTAX
    assert evaluate("import sys\nsys.exit(3)", "1", FAST, tmp_root=tmp_path).error_type == "SystemExit"
    assert evaluate("import os\nos._exit(4)", "1", FAST, tmp_root=tmp_path).outcome is Outcome.CRASHED


def test_sandbox_times_out_on_an_infinite_loop_and_a_sleep(tmp_path):
    spin = evaluate("while True:\n    pass", "1", FAST, tmp_root=tmp_path)
    assert spin.outcome is Outcome.TIMEOUT and "CPU" in spin.message and spin.elapsed < FAST.wall_seconds
    sleep = evaluate("import time\ntime.sleep(60)", "1", Limits(cpu_seconds=1, wall_seconds=0.5), tmp_root=tmp_path)
    assert sleep.outcome is Outcome.TIMEOUT and "wall-clock" in sleep.message and sleep.elapsed < 5


@pytest.mark.parametrize("bomb", ["x = bytearray(4 * 1024 ** 3)",
                                  "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))"])
def test_sandbox_refuses_a_memory_bomb(tmp_path, bomb):
    # CPU to spare: zero-filling 512 MiB is kernel time, slow on a loaded machine, and counts against RLIMIT_CPU
    result = evaluate(bomb, "1", Limits(cpu_seconds=10, wall_seconds=30.0), tmp_root=tmp_path)
    assert result.outcome is Outcome.MEMORY


def test_sandbox_refuses_network(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    try:
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')"
        result = evaluate(code, "1", FAST, tmp_root=tmp_path)
        assert result.outcome is Outcome.REFUSED and "socket" in result.message
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_sandbox_refuses_writes_outside_its_directory_even_when_swallowed(tmp_path):
    target = tmp_path / "escaped.txt"
    code = f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept Exception:\n    pass"
    result = evaluate(code, "'done'", FAST, tmp_root=tmp_path / "root")
    assert result.outcome is Outcome.REFUSED and "open" in result.message
    assert not target.exists()
    inside = evaluate("open('note.txt', 'w').write('x')", "open('note.txt').read()", FAST, tmp_root=tmp_path)
    assert inside.outcome is Outcome.OK and inside.value == "'x'"


@pytest.mark.parametrize("call", ["os.system('touch {marker}')", "subprocess.run(['touch', '{marker}'])",
                                  "os.execv('/usr/bin/touch', ['touch', '{marker}'])"])
def test_sandbox_refuses_process_creation(tmp_path, call):
    marker = tmp_path / "marker"
    code = "import os\nimport subprocess\n" if "subprocess" in call else "import os\n"
    result = evaluate(code + call.format(marker=marker), "1", FAST, tmp_root=tmp_path / "root")
    assert result.outcome is Outcome.REFUSED
    assert not marker.exists()


def test_sandbox_leaves_nothing_behind(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    evaluate("import os\nos.mkdir('d')\nopen('d/f', 'w').close()\nos.chmod('d', 0)", "1", FAST, tmp_root=root)
    evaluate("import tempfile\ntempfile.NamedTemporaryFile(delete=False).write(b'x')", "1", FAST, tmp_root=root)
    evaluate("import time\nopen('f', 'w').close()\ntime.sleep(60)", "1", Limits(wall_seconds=0.5), tmp_root=root)
    assert list(root.iterdir()) == []


# -- CRUX ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def crux_train_rows():
    path = data_dir() / "zeroeval_3tier.train.csv"
    if not path.is_file():
        pytest.skip(f"routing data not found at {path.parent} (set AIO_ROUTING_DATA)")
    rows, unparsable = read_rows("train")
    return {row.id: row for row in rows}, unparsable


def test_every_crux_row_parses(crux_train_rows):
    rows, unparsable = crux_train_rows
    assert unparsable == {} and len(rows) > 400
    assert all(row.call.startswith("f(") and "def f(" in row.source for row in rows.values())


@pytest.mark.parametrize("row_id, call, truth", [
    ("crux:crux-test-#10", "f('')", "''"),  # no characters to keep
    ("crux:crux-test-#100", "f({'1': 'a', 1: 'a', 1: 'b', '1': 'b'}, [1])", "{'1': 'b'}"),  # later keys win
    ("crux:crux-test-#101", "f([ -4,   1,  0], 1, 4)", "[-4, 4, 1, 0]"),  # list.insert at 1
    ("crux:crux-test-#103", "f('abcDEFGhIJ')", "'abcdefghij'"),  # casefold
])
def test_crux_truths_match_hand_reading(crux_train_rows, row_id, call, truth):
    row = crux_train_rows[0][row_id]
    assert row.call == call
    assert compute_truth(row.source, row.call).value == truth


def test_parse_question_handles_multi_line_code():
    question = ("Complete the assertion.\n\n[PYTHON]\ndef helper(x):\n    return x * 2\n\n"
                "def f(items,\n      scale):\n    total = 0\n    for item in items:\n"
                "        total += helper(item) * scale\n    return total\n"
                "assert f([1, 2,\n   3], 2) == ??\n[/PYTHON]")
    source, call = parse_question(question)
    assert call == "f([1, 2,\n   3], 2)"
    assert source.startswith("def helper(x):") and source.rstrip().endswith("return total")
    assert compute_truth(source, call).value == "24"
    for broken in ("no code here", "[PYTHON]\ndef f(x):\n    return x\n[/PYTHON]",
                   "[PYTHON]\ndef f(x):\n    return x\nassert f(1) == 1\n[/PYTHON]"):
        with pytest.raises(CruxParseError):
            parse_question(broken)


def _crux_csv(directory, rows: dict[str, str]) -> None:
    columns = ["id", "task", "question", "llama_small_correct", "llama_medium_correct", "llama_large_correct",
               "qwen_small_correct", "qwen_medium_correct", "qwen_large_correct"]
    with (directory / "zeroeval_3tier.dev.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerow(["gsm:1", "gsm", "What is 1 + 1?", 1, 1, 1, "", "", ""])
        for row_id, code in rows.items():
            writer.writerow([row_id, "crux", f"Complete it.\n[PYTHON]\n{code}\n[/PYTHON]", 1, 0, 1, 0, 1, 0])


def test_crux_rows_whose_truth_fails_are_dropped_and_counted(tmp_path):
    letters = ", ".join(repr(c * 3) for c in "abcdefghijklmnopqrstuvwxyz")
    _crux_csv(tmp_path, {
        "crux:good": "def f(s):\n    return s[::-1]\nassert f('abc') == ??",
        "crux:raises": "def f(d):\n    return d['missing']\nassert f({}) == ??",
        "crux:object": "def f():\n    return object()\nassert f() == ??",
        "crux:nan": "def f():\n    return float('nan')\nassert f() == ??",
        "crux:loops": "def f():\n    while True:\n        pass\nassert f() == ??",
        "crux:set-order": f"def f():\n    return ''.join({{{letters}}})\nassert f() == ??",
        "crux:no-call": "def f():\n    return 1\nassert f() == 1",
    })
    crux = load_crux("dev", directory=tmp_path, limits=Limits(cpu_seconds=1, wall_seconds=10.0))
    assert [(item.row.id, item.truth) for item in crux.items] == [("crux:good", "'cba'")]
    assert crux.items[0].row.reference_correct == (1, 0, 1, 0, 1, 0) and crux.items[0].row.difficulty == 3
    assert crux.dropped == Counter({"exception": 1, "not_literal": 2, "timeout": 1, "nondeterministic": 1,
                                    "unparsable": 1})
    assert crux.examined == 7 and crux.dropped_ids["crux:raises"].startswith("exception: KeyError")


# -- generated tasks: determinism, and each template's truth recomputed from the question text ----------------

def test_generated_tasks_are_deterministic_and_seeded():
    first = [generate(0, c, d, i) for c in CATEGORIES for d in DIFFICULTIES for i in range(5)]
    again = [generate(0, c, d, i) for c in CATEGORIES for d in DIFFICULTIES for i in range(5)]
    other = [generate(1, c, d, i) for c in CATEGORIES for d in DIFFICULTIES for i in range(5)]
    assert first == again
    differing = sum(a.question != b.question for a, b in zip(first, other))
    assert differing > 0.8 * len(first)


_CONSTANTS = {"days are in a week": 7, "hours are in a day": 24, "minutes are in an hour": 60,
              "seconds are in a minute": 60, "months are in a year": 12, "not a leap year": 365}
_PER_UNIT = {("minutes", "hours"): 60, ("hours", "days"): 24, ("days", "weeks"): 7, ("seconds", "minutes"): 60,
             ("meters", "kilometers"): 1000, ("grams", "kilograms"): 1000, ("centimeters", "meters"): 100,
             ("milliliters", "liters"): 1000}
_ORDINALS = {"1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "6th": 6, "7th": 7, "8th": 8}


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


def _list(question: str) -> list[int]:
    return ast.literal_eval(re.search(r"\[[^\]]*\]", question).group(0))


def _quoted(question: str) -> str:
    return re.findall(r"'([^']*)'", question)[-1]


def _date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%B %d, %Y")


def _ranking(question: str) -> list[str]:
    """Most to least, by counting everyone each person is above (transitive closure, not permutations)."""
    above: dict[str, set[str]] = {}
    for a, rel, b in re.findall(r"(\w+) is (\w+) than (\w+)\.", question):
        more, less = (a, b) if rel in ("taller", "older", "faster", "heavier") else (b, a)
        above.setdefault(more, set()).add(less)
        above.setdefault(less, set())
    changed = True
    while changed:
        changed = False
        for person, below in above.items():
            reach = set().union(*(above[b] for b in below)) | below
            if reach != below:
                above[person], changed = reach, True
    return sorted(above, key=lambda p: -len(above[p]))


def _lamp(question: str) -> str:
    start, presses = re.search(r"A lamp is (on|off)\. Its switch is pressed (\d+) times", question).groups()
    return start if int(presses) % 2 == 0 else ({"on", "off"} - {start}).pop()


def _truth_chain(question: str) -> str:
    first = re.match(r"(\w+) (tells the truth|lies)\.", question)
    truthful = {first.group(1): first.group(2) == "tells the truth"}
    for speaker, about, claim in re.findall(r"(\w+) says (\w+) (tells the truth|lies)\.", question):
        truthful[speaker] = truthful[about] == (claim == "tells the truth")
    asked = re.search(r"Does (\w+) tell the truth", question).group(1)
    return "yes" if truthful[asked] else "no"


def _second(question: str) -> str:
    ranking = _ranking(question)
    most = re.search(r"the second (\w+)\?", question).group(1)
    return ranking[1] if most in ("tallest", "oldest", "fastest", "heaviest") else ranking[-2]


def _extreme(question: str) -> str:
    ranking = _ranking(question)
    word = re.search(r"Who is (?:the )?(\w+)\?", question).group(1)
    return ranking[0] if word in ("tallest", "oldest", "fastest", "heaviest", "taller", "older", "faster",
                                  "heavier") else ranking[-1]


def _parity(n: int) -> str:
    return ("even", "odd")[n & 1]


def _unit(question: str) -> Fraction:
    small_first = re.search(r"How many (\w+) are in ([\d.]+) (\w+)\?", question)
    if small_first:
        small, amount, large = small_first.groups()
        return Fraction(amount) * _PER_UNIT[(small, large)]
    large, amount, small = re.search(r"How many (\w+) are ([\d.]+) (\w+)\?", question).groups()
    return Fraction(amount) / _PER_UNIT[(small, large)]


RECOMPUTE = {
    "add_1digit": lambda q: operator.add(*_ints(q)), "add_2digit": lambda q: operator.add(*_ints(q)),
    "sub_1digit": lambda q: int(q.split()[2]) - int(q.split()[4].rstrip("?")),
    "sub_2digit": lambda q: int(q.split()[2]) - int(q.split()[4].rstrip("?")),
    "times_table": lambda q: operator.mul(*_ints(q)),
    "exact_division": lambda q: Fraction(*_ints(q)),
    "bags_word_problem": lambda q: _ints(q)[0] + _ints(q)[1] * _ints(q)[2],
    "boxes_word_problem": lambda q: _ints(q)[0] * _ints(q)[1] - _ints(q)[2],
    "change_word_problem": lambda q: (lambda p, n, c, m, bill: bill - p * c - n * m)(*_ints(q)),
    "trip_word_problem": lambda q: (lambda v1, t1, v2, t2: v1 * t1 + v2 * t2)(*_ints(q)),
    "discount_word_problem": lambda q: (lambda price, pct: Fraction(price * (100 - pct), 100))(*_ints(q)),
    "share_word_problem": lambda q: (lambda n, total, eaten: total - n * eaten)(*_ints(q)),
    "average_word_problem": lambda q: Fraction(sum(_ints(q)), len(_ints(q))),
    "first_letter": lambda q: _quoted(q)[:1], "last_letter": lambda q: _quoted(q)[-1:],
    "bigger_number": lambda q: max(_ints(q)),
    "reverse_short_word": lambda q: "".join(reversed(_quoted(q))),
    "reverse_word": lambda q: "".join(reversed(_quoted(q))),
    "reverse_long_word": lambda q: "".join(reversed(_quoted(q))),
    "count_letter_in_word": lambda q: Counter(_quoted(q))[re.findall(r"'([^']*)'", q)[0]],
    "count_letter_in_sentence": lambda q: Counter(_quoted(q))[re.findall(r"'([^']*)'", q)[0]],
    "count_vowels": lambda q: sum(Counter(_quoted(q))[v] for v in "aeiou"),
    "largest_of_four": lambda q: functools.reduce(max, _list(q)),
    "second_largest": lambda q: sorted(set(_list(q)), reverse=True)[1],
    "sum_of_three": lambda q: functools.reduce(operator.add, _ints(q)),
    "sum_of_five": lambda q: functools.reduce(operator.add, _list(q)),
    "sum_of_evens": lambda q: sum(n for n in _list(q) if not n & 1),
    "nth_element": lambda q: _list(q)[_ORDINALS[re.search(r"the (\d+\w\w) number", q).group(1)] - 1],
    "sort_five": lambda q: [n for n in range(-100, 100) if n in _list(q)],
    "sort_seven_signed": lambda q: [n for n in range(-100, 100) if n in _list(q)],
    "next_or_previous_day": lambda q: (datetime(2024, 1, 1 + [datetime(2024, 1, d).strftime("%A") for d in
                                       range(1, 8)].index(q.split()[-1].rstrip("?")) + 7)
                                       + timedelta(days=1 if " after " in q else -1)).strftime("%A"),
    "next_month": lambda q: datetime(2024, datetime.strptime(q.split()[-1].rstrip("?"), "%B").month % 12 + 1,
                                     1).strftime("%B"),
    "time_constant": lambda q: next(v for k, v in _CONSTANTS.items() if k in q),
    "days_in_month": lambda q: {"January": 31, "March": 31, "April": 30, "May": 31, "June": 30, "July": 31,
                                "August": 31, "September": 30, "October": 31, "November": 30,
                                "December": 31}[q.split()[-1].rstrip("?")],
    "duration_conversion": _unit, "unit_conversion": _unit, "decimal_unit_conversion": _unit,
    "hours_and_minutes": lambda q: 60 * _ints(q)[0] + _ints(q)[1],
    "days_within_month": lambda q: _ints(q)[1] - _ints(q)[0],
    "days_across_months": lambda q: (lambda a, b: (_date(b) - _date(a)).days)(
        *re.search(r"after (.+?) is (.+?)\?", q).groups()),
    "weekday_within_month": lambda q: _date(re.search(r"was (\w+ \d+, \d+)\?", q).group(1)).strftime("%A"),
    "weekday_across_months": lambda q: _date(re.search(r"was (\w+ \d+, \d+)\?", q).group(1)).strftime("%A"),
    "date_after_days": lambda q: (_date(re.search(r"after (\w+ \d+, \d+)\?", q).group(1))
                                  + timedelta(days=_ints(q)[0])).strftime("%Y-%m-%d"),
    "clock_arithmetic": lambda q: (datetime.strptime(re.search(r"at (\d\d:\d\d)", q).group(1), "%H:%M")
                                   + timedelta(hours=_ints(q)[2], minutes=_ints(q)[3])).strftime("%H:%M"),
    "speed_conversion": lambda q: Fraction(_ints(q)[0] * 1000, 60),
    "two_people_same": _extreme, "two_people_opposite": _extreme, "three_in_order": _extreme,
    "four_shuffled": _extreme, "five_mixed": _second,
    "even_or_odd": lambda q: _parity(_ints(q)[0]),
    "product_parity": lambda q: _parity(operator.mul(*_ints(q))),
    "sum_parity": lambda q: _parity(sum(_ints(q))),
    "lamp_few_presses": _lamp, "lamp_many_presses": _lamp,
    "truth_chain_3": _truth_chain, "truth_chain_5": _truth_chain,
}


def test_every_template_has_an_independent_recomputation():
    """The workload's categories; the knowledge and code tasks are checked in test_probe_tasks.py."""
    names = {template.__name__ for (category, _), templates in TEMPLATES.items() for template in templates
             if category in HELD_OUT_CATEGORIES}
    assert names == set(RECOMPUTE)
    assert all(TEMPLATES[(c, d)] for c in CATEGORIES for d in DIFFICULTIES)


def _same(truth: str, expected, kind: str) -> bool:
    if kind == "number":
        return Fraction(truth) == Fraction(expected)
    if kind == "literal":
        return ast.literal_eval(truth) == expected
    return truth == expected


@pytest.mark.parametrize("category", HELD_OUT_CATEGORIES)
def test_generated_truths_recomputed_from_the_question(category):
    seen = Counter()
    for difficulty in DIFFICULTIES:
        for task, _ in zip(iter_cell(7, category, difficulty), range(60)):
            expected = RECOMPUTE[task.template](task.question)
            assert _same(task.truth, expected, task.kind), (task.question, task.truth, expected)
            seen[task.template] += 1
    in_category = {t.__name__ for d in DIFFICULTIES for t in TEMPLATES[(category, d)]}
    assert set(seen) == in_category  # every template drawn at least once in the sample


def test_weekday_questions_state_the_true_reference_weekday():
    for difficulty in (3, 4):
        for task, _ in zip(iter_cell(3, "dates_units", difficulty), range(80)):
            stated = re.match(r"(\w+ \d+, \d+) was a (\w+)\.", task.question)
            if stated:
                assert _date(stated.group(1)).strftime("%A") == stated.group(2)


# -- extraction and matching ---------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, expected", [
    ("```python\nprint(1)\n```\nSo the result is clear.\nAnswer: 42", "42"),  # the Answer line beats a fence
    ("Let me think.\n**Answer:** 42.", "42"),
    ("**Answer**: `[1, 2]`", "[1, 2]"),
    ("answer: 'abc'", "'abc'"),  # quotes belong to the literal
    ("Answer: 3\nwait, no.\nFinal answer: 4", "4"),  # the last Answer line
    ("First:\n```\n1\n```\nthen:\n```python\n2\n```\ndone", "2"),  # the last fence
    ("```python\ndef f(s):\n    return s\nassert f('a==b') == 'a==b'\n```", "'a==b'"),  # assert form
    ("Answer: assert f([1]) == [1, 2]", "[1, 2]"),
    ("Answer: f('') == ''", "''"),
    ("Answer:\n```python\n{'a': 1}\n```", "{'a': 1}"),  # the value on the block below an empty label
    ("Answer:\n\n  Monday", "Monday"),
    ("The answer is 7. Or 8?", "7"),  # the last "answer is"
    ("14 is the larger number.", "14 is the larger number"),  # a one-line reply is its own answer
    ("I am not sure.\nIt could be several things.", None),
    ("", None),
    ("Answer:", None),
    ("Answer:\n```\n42", None),  # a cut-off reply
])
def test_extract_answer(reply, expected):
    assert extract_answer(reply) == expected


@pytest.mark.parametrize("extracted, truth, kind, expected", [
    ("[1, 2]", "[1, 2]", "literal", True),
    ('{"a": (1, 2)}', "{'a': (1, 2)}", "literal", True),
    ("{'b', 'a'}", "{'a', 'b'}", "literal", True),
    ("'abc'", "'abc'", "literal", True),
    ("abc", "'abc'", "literal", False),  # a bare word is not the string literal
    ("(1, 2)", "[1, 2]", "literal", False),
    ("[1, 2", "[1, 2]", "literal", False),
    ("not a literal", "not  a literal", "literal", True),  # both unparsable: normalised text
    ("1,234", "1234", "number", True),
    ("12.0", "12", "number", True),
    ("42.", "42", "number", True),
    ("155 minutes", "155", "number", True),
    ("$1,200.50", "1200.5", "number", True),
    ("3 + 4 = 7", "7", "number", True),
    ("The answer is 9", "9", "number", True),
    ("3/4", "0.75", "number", True),
    ("41", "42", "number", False),
    ("forty-two", "42", "number", False),
    ("12.5", "12", "number", False),
    ("  **MONDAY.** ", "Monday", "text", True),
    ('"Ben"', "Ben", "text", True),
    ("It is Saturday", "Saturday", "text", True),
    ("new  york", "New York", "text", True),
    ("Tuesday", "Monday", "text", False),
    ("Ben and Ann", "Ben", "text", False),
    ("", "Ben", "text", False),
    (None, "1", "number", False),
    ("The first letter of the word 'tree' is 'T'", "t", "text", True),  # a reading: "<A> is <B>"
    ("Omar is taller than Ann", "Omar", "text", True),
    ("Omar is taller than Ann", "Ann", "text", False),
    ("The day after Sunday is Sunday", "Monday", "text", False),
    ("The sum is 15 and the product is 50", "50", "number", False),  # two clauses: taken whole
])
def test_matches(extracted, truth, kind, expected):
    assert matches(extracted, truth, kind) is expected


def test_matches_rejects_an_unknown_kind():
    with pytest.raises(ValueError):
        matches("1", "1", "float")


def test_extraction_round_trip_on_every_kind():
    for reply, truth, kind in (("Sure.\nAnswer: **1,200**", "1200", "number"),
                               ("```python\nassert f('x') == {'x': 1}\n```", "{'x': 1}", "literal"),
                               ("The lamp ends on.\nAnswer: on.", "on", "text")):
        assert matches(extract_answer(reply), truth, kind)


# -- the split -----------------------------------------------------------------------------------------------

def test_generated_split_is_disjoint_balanced_and_stable():
    first, second = load_workload(seed=0, n_generated=32, crux_limit=0), load_workload(0, 32, 0)
    assert first == second
    assert len(first.train) == len(first.eval) == 32
    assert not {t.id for t in first.train} & {t.id for t in first.eval}
    assert not {t.prompt for t in first.train} & {t.prompt for t in first.eval}
    for tasks, split in ((first.train, "train"), (first.eval, "eval")):
        assert Counter((t.category, t.difficulty) for t in tasks) == {(c, d): 2 for c in HELD_OUT_CATEGORIES
                                                                      for d in DIFFICULTIES}
        assert all(split_of(t.id, 0) == split for t in tasks)
        assert all(t.prompt.endswith("\n\n" + ANSWER_INSTRUCTION) for t in tasks)
    assert load_workload(seed=1, n_generated=32, crux_limit=0).eval != first.eval


def test_workload_takes_crux_train_rows_for_train_and_dev_rows_for_eval(crux_train_rows):
    first, second = load_workload(seed=0, n_generated=16, crux_limit=3), load_workload(0, 16, 3)
    assert first == second
    train_crux = [t for t in first.train if t.source == "crux"]
    eval_crux = [t for t in first.eval if t.source == "crux"]
    assert len(train_crux) == len(eval_crux) == 3
    assert {t.id for t in train_crux} <= set(crux_train_rows[0])
    assert {t.id for t in eval_crux} <= {row.id for row in read_rows("dev")[0]}
    assert not {t.id for t in first.train} & {t.id for t in first.eval}
    for task in train_crux + eval_crux:
        assert task.kind == "literal" and task.category == "crux" and 1 <= task.difficulty <= 4
        assert "[PYTHON]" in task.prompt and task.prompt.endswith(ANSWER_INSTRUCTION)
        assert ast.literal_eval(task.truth) == ast.literal_eval(task.truth)
