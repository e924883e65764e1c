"""The final answer of a model's reply, and whether two final answers state the same value: what the quality
monitor compares when both answers end in one, and what the benchmarks score against computed truth.

Extraction (`extract_answer`), in order:
1. the last line that starts with `Answer:` (any case; `Final answer:` too; markdown around the label is
   allowed: `**Answer:** 42`, `**Answer**: 42`, `### Answer: 42`, `> Answer: 42`). If its value is empty,
   the value is what follows: the next fenced code block if one opens on the next non-empty line, else that
   line;
2. else the content of the last closed fenced code block (``` or ```python ...);
3. else what follows the last "answer is" ("The answer is 7." -> 7), up to the end of its sentence or line;
4. else, when the whole reply is one line of at most 120 characters, that line ("14." -> 14);
5. else None.
Rules 3 and 4 exist for the smallest tier: SmolLM2-135M-Instruct never writes an `Answer:` line whatever the
instruction's wording (it replies "The answer is 1." or "14 is the larger number."), and scoring it 0 for
its format would hide what it does know.
The value is then trimmed: surrounding whitespace, markdown bold/italic stars and backticks, one trailing
period. If it is an assertion or comparison of a call, `assert f(...) == <rhs>` or `f(...) == <rhs>` (the
CRUXEval answer format), the value is `<rhs>`. Quotes are kept: for a Python literal they are part of the
value; numbers and text drop them when compared.

Comparing two final answers (`same_value`): equal as Python literals when both are ("[1, 2]" and "[1,2]"), else
equal as numbers when both state one ("1,250" and "1250.0"), else equal as text after case folding and
stripping quotes, punctuation, a lead-in and a leading article ("It is Monday." and "monday").
"""
from __future__ import annotations

import ast
import re
from fractions import Fraction

_ANSWER_LINE = re.compile(r"^[\s>#*_`-]*(?:final\s+)?answer\s*[*_`]*\s*:(.*)$", re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_ANSWER_IS = re.compile(r"\banswer\s+is\s*:?\s*(.+?)(?=[.!]\s|[.!]?$)", re.IGNORECASE | re.MULTILINE)
_MAX_BARE_LINE = 120
_IS = re.compile(r"\s+is\s+", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|an?)\s+", re.IGNORECASE)
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:final\s+)?(?:answer|result|total)\s+is\s*:?\s*|^(?:it\s+is|it's)\s+",
                      re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-+]?\.\d+")
_OPERATOR = re.compile(r"[-+*/×÷^]")
_QUOTES = "'\"`‘’“”"


def _trim(value: str) -> str:
    value = value.strip().strip("*`").strip()
    if value.endswith(".") and not value.endswith("..") and len(value) > 1:
        value = value[:-1].rstrip()
    return value


def _comparison_rhs(value: str) -> str:
    """`<rhs>` of `assert <call> == <rhs>` or `<call> == <rhs>` (the last such statement), else `value`."""
    try:
        tree = ast.parse(value)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        match = re.search(r"^\s*assert\b[^\n]*?==\s*(.+?)\s*$", value, re.MULTILINE)
        return match.group(1) if match else value
    for node in reversed(tree.body):
        test = node.test if isinstance(node, ast.Assert) else node.value if isinstance(node, ast.Expr) else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and (isinstance(node, ast.Assert) or isinstance(test.left, ast.Call))):
            segment = ast.get_source_segment(value, test.comparators[0])
            return segment if segment is not None else value
    return value


def _finish(value: str) -> str | None:
    value = _trim(_comparison_rhs(_trim(value)))
    return value or None


def extract_answer(reply: str | None, explicit: bool = False) -> str | None:
    """The final answer in `reply` (see the module's rules), or None when there is none. `explicit`: only an
    answer the reply marks as one (rules 1 and 3), as the quality monitor needs: two chat replies that are one
    line each, or two code blocks, are not final answers to compare exactly."""
    if not reply:
        return None
    lines = reply.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _ANSWER_LINE.match(lines[i])
        if not match:
            continue
        value = match.group(1)
        if _trim(value):
            return _finish(value)
        following = next((line for line in lines[i + 1:] if line.strip()), "")
        if not following.lstrip().startswith("```"):
            return _finish(following) if following else None
        fence = _FENCE.match("\n".join(lines[i + 1:]).lstrip())
        return _finish(fence.group(1)) if fence else None  # an unclosed fence: a cut-off reply
    fences = [] if explicit else _FENCE.findall(reply)
    if fences:
        return _finish(fences[-1])
    phrases = _ANSWER_IS.findall(reply)
    if phrases:
        return _finish(phrases[-1])
    if explicit:
        return None
    lines = [line for line in lines if line.strip()]
    return _finish(lines[0]) if len(lines) == 1 and len(lines[0]) <= _MAX_BARE_LINE else None


def _unquote(text: str) -> str:
    text = text.strip().strip("*_").strip()
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text


def parse_number(text: str) -> Fraction | None:
    """The number a value states (see `matches`), or None."""
    text = _LEAD_IN.sub("", _unquote(text).replace("−", "-")).lstrip("$€£ ")
    match = _NUMBER.match(text)
    if "=" in text and (match is None or _OPERATOR.search(text.split("=", 1)[0], match.end())):
        match = _NUMBER.match(text.rsplit("=", 1)[1].strip().lstrip("$€£ ")) or match
    if match is None:
        return None
    try:
        return Fraction(match.group(0).replace(",", "").replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return None


def normalise_text(text: str) -> str:
    text = " ".join(_unquote(text).split())
    text = _ARTICLE.sub("", _LEAD_IN.sub("", text))
    return _unquote(text.strip(".,;:!?")).casefold()


def literal(text: str) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(text.strip())
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError on hostile input
        return False, None


def readings(value: str) -> list[str]:
    """The value, and for a one-clause sentence "<A> is <B>" also A and B."""
    parts = _IS.split(value)
    return [value] + parts if len(parts) == 2 and all(p.strip() for p in parts) else [value]


def equal_literals(left: str, right: str) -> bool | None:
    """Whether two Python literals are equal (`==`, as CRUXEval's assertions compare); None unless both are."""
    (ok_left, a), (ok_right, b) = literal(left), literal(right)
    if not (ok_left and ok_right):
        return None
    try:
        return bool(a == b)
    except Exception:  # e.g. comparing huge nested values runs out of recursion
        return False


def same_value(left: str, right: str) -> bool:
    """Whether two extracted final answers state the same value (see the module's rules)."""
    equal = equal_literals(left, right)
    if equal is not None:
        return equal
    x, y = parse_number(left), parse_number(right)
    if x is not None and y is not None:
        return x == y
    return normalise_text(left) == normalise_text(right) != ""
