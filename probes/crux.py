"""CRUXEval-O rows of the routing data, with their truth computed by running the code.

Source: the `task == "crux"` rows of `zeroeval_3tier.{train,dev}.csv` (see the data folder's README). Each
`question` is the CRUXEval-O prompt: a function and `assert f(<input>) == ??` between `[PYTHON]` and
`[/PYTHON]`. The data set's gold outputs are not in the files, so the truth is computed: the function runs in
the sandbox (`sandbox.evaluate`) on the input, and the row is kept only if

- it parses (a function source, then one top-level `assert <call> == ??`),
- the run succeeds within the limits (`CRUX_LIMITS`),
- `repr(result)` is a literal: `ast.literal_eval(repr(result)) == result` inside the sandbox, and
- a second run in a fresh interpreter (another string-hash seed) gives an equal value: set iteration order
  must not decide the output.

Anything else drops the row, counted by reason. Truths are cached in memory for the process, never on disk.

The data folder: an explicit argument, else `$AIO_ROUTING_DATA`, else `shared/data/routing` next to the
repository (`Path(__file__).resolve().parents[2]`).
"""
from __future__ import annotations

import ast
import csv
import os
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .sandbox import Limits, Outcome, evaluate

SPLIT_FILES = {"train": "zeroeval_3tier.train.csv", "dev": "zeroeval_3tier.dev.csv"}
# The six models whose outcomes the files record: Phi-3.5-mini, Llama-3.1-8B / -70B, Qwen2.5 3B / 7B / 72B.
REFERENCE_COLUMNS = ("llama_small_correct", "llama_medium_correct", "llama_large_correct",
                     "qwen_small_correct", "qwen_medium_correct", "qwen_large_correct")
CRUX_LIMITS = Limits(cpu_seconds=2, wall_seconds=10.0)
DEFAULT_WORKERS = 2

csv.field_size_limit(1 << 24)


class CruxParseError(ValueError):
    """The question does not hold a function and one `assert <call> == ??`."""


@dataclass(frozen=True)
class CruxRow:
    id: str
    split: str  # "train" or "dev": the file it came from
    question: str  # the CRUXEval-O prompt as stored
    source: str  # the function definition(s)
    call: str  # the expression whose value is asked, e.g. "f('')"
    reference_correct: tuple[int, ...]  # 0/1 per reference model that has an outcome

    @property
    def difficulty(self) -> int:
        """1..4 from the share of the reference models (3B..72B) that got it right: 1 all, 2 at least 2/3,
        3 at least 1/3, 4 fewer. A label for analysis, measured on models far larger than the tiers."""
        if not self.reference_correct:
            return 4
        right, n = sum(self.reference_correct), len(self.reference_correct)
        return 1 if right == n else 2 if 3 * right >= 2 * n else 3 if 3 * right >= n else 4


@dataclass(frozen=True)
class CruxTruth:
    outcome: str  # "ok", a sandbox Outcome value, "not_literal", "nondeterministic" or "bad_result"
    value: str | None  # repr of the output when outcome is "ok"
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True)
class CruxItem:
    row: CruxRow
    truth: str  # repr of f(<input>), a literal


@dataclass
class CruxSet:
    split: str
    items: list[CruxItem]
    examined: int  # rows whose truth was computed (or that failed to parse) to fill `items`
    dropped: Counter = field(default_factory=Counter)  # reason -> rows
    dropped_ids: dict[str, str] = field(default_factory=dict)  # row id -> reason


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The routing data folder: `path`, else $AIO_ROUTING_DATA, else shared/data/routing beside the repo."""
    if path is not None:
        return Path(path)
    env = os.environ.get("AIO_ROUTING_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data" / "routing"


def parse_question(question: str) -> tuple[str, str]:
    """(function source, call expression) of a CRUXEval-O prompt; raises CruxParseError."""
    start, end = question.rfind("[PYTHON]"), question.rfind("[/PYTHON]")
    if start < 0 or end < start:
        raise CruxParseError("no [PYTHON] ... [/PYTHON] block")
    lines = question[start + len("[PYTHON]"):end].strip("\n").splitlines()
    asserts = [i for i, line in enumerate(lines) if line.startswith("assert")]
    if not asserts:
        raise CruxParseError("no top-level assert")
    source = "\n".join(lines[:asserts[-1]]).rstrip() + "\n"
    assertion = "\n".join(lines[asserts[-1]:]).strip()
    head, sep, tail = assertion.rpartition("==")
    if not sep or tail.strip() != "??" or not head.startswith("assert"):
        raise CruxParseError(f"the assert is not 'assert <call> == ??': {assertion[:80]!r}")
    call = head[len("assert"):].strip()
    try:
        tree = ast.parse(source)
        expression = ast.parse(call, mode="eval").body
    except SyntaxError as error:
        raise CruxParseError(f"does not parse: {error}") from None
    if not isinstance(expression, ast.Call) or not any(
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body):
        raise CruxParseError("expected a function definition and a call")
    return source, call


def _reference(raw: dict[str, str]) -> tuple[int, ...]:
    return tuple(int(float(raw[c])) for c in REFERENCE_COLUMNS if (raw.get(c) or "").strip())


def read_rows(split: str, directory: str | os.PathLike | None = None) -> tuple[list[CruxRow], dict[str, str]]:
    """The CRUX rows of one split file, in file order, and {id: reason} of those that do not parse.
    Raises FileNotFoundError when the file is missing."""
    path = data_dir(directory) / SPLIT_FILES[split]
    if not path.is_file():
        raise FileNotFoundError(f"routing data file {path} not found (pass a directory or set AIO_ROUTING_DATA)")
    rows, unparsable = [], {}
    with path.open(encoding="utf-8", newline="") as f:
        for raw in csv.DictReader(f):
            if raw.get("task") != "crux":
                continue
            try:
                source, call = parse_question(raw["question"])
            except CruxParseError as error:
                unparsable[raw["id"]] = f"unparsable: {error}"
                continue
            rows.append(CruxRow(raw["id"], split, raw["question"], source, call, _reference(raw)))
    return rows, unparsable


# Runs in the sandbox after the row's source: the value's repr and whether that repr is a literal equal to it.
_LITERAL_CHECK = '''
def __aio_literal_repr(value):
    import ast
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except Exception:
        same = False
    return (text, bool(same))
'''

_cache: dict[tuple[str, str, int, Limits], CruxTruth] = {}
_cache_lock = threading.Lock()


def _run_once(source: str, call: str, limits: Limits) -> CruxTruth:
    result = evaluate(source + "\n" + _LITERAL_CHECK, f"__aio_literal_repr({call})", limits)
    if result.outcome is not Outcome.OK:
        detail = f"{result.error_type}: {result.message}" if result.error_type else result.message
        return CruxTruth(result.outcome.value, None, detail)
    try:
        text, same = ast.literal_eval(result.value)
        if not (isinstance(text, str) and isinstance(same, bool)):
            raise ValueError
    except Exception:
        return CruxTruth("bad_result", None, f"unexpected result {result.value[:80]!r}")
    if not same:
        return CruxTruth("not_literal", None, f"repr is not a literal equal to the value: {text[:80]}")
    return CruxTruth("ok", text)


def compute_truth(source: str, call: str, *, repeats: int = 2, limits: Limits = CRUX_LIMITS) -> CruxTruth:
    """The truth of one row: `repeats` sandboxed runs that must all succeed and agree. Memoised in memory."""
    key = (source, call, repeats, limits)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    truth = _run_once(source, call, limits)
    for _ in range(repeats - 1):
        if not truth.ok:
            break
        again = _run_once(source, call, limits)
        if not again.ok:
            truth = again
        elif ast.literal_eval(again.value) != ast.literal_eval(truth.value):
            truth = CruxTruth("nondeterministic", None, f"{truth.value[:40]} vs {again.value[:40]}")
    with _cache_lock:
        _cache[key] = truth
    return truth


def load_crux(split: str, *, limit: int | None = None, seed: int = 0, directory: str | os.PathLike | None = None,
              workers: int = DEFAULT_WORKERS, repeats: int = 2, limits: Limits = CRUX_LIMITS) -> CruxSet:
    """Up to `limit` rows of `split` ("train" or "dev") with a computed truth, in a seeded order.

    Rows are ordered by id, shuffled with `random.Random(f"crux:{seed}")`, and taken in that order until
    `limit` are kept; only the rows needed are run (in `workers` threads, each driving one sandbox process).
    """
    rows, unparsable = read_rows(split, directory)
    rows.sort(key=lambda r: r.id)
    random.Random(f"crux:{seed}").shuffle(rows)
    out = CruxSet(split, [], examined=len(unparsable))
    for row_id, reason in unparsable.items():
        out.dropped["unparsable"] += 1
        out.dropped_ids[row_id] = reason
    want = len(rows) if limit is None else max(0, limit)
    position = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while len(out.items) < want and position < len(rows):
            batch = rows[position:position + want - len(out.items)]
            position += len(batch)
            truths = pool.map(lambda r: compute_truth(r.source, r.call, repeats=repeats, limits=limits), batch)
            for row, truth in zip(batch, truths):
                out.examined += 1
                if not truth.ok:
                    out.dropped[truth.outcome] += 1
                    out.dropped_ids[row.id] = f"{truth.outcome}: {truth.message}"
                else:
                    out.items.append(CruxItem(row, truth.value))
    return out
