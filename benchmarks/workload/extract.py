"""The final answer of a model's reply, and whether it matches the computed truth.

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
value; `matches` drops them where the kind says they are not ("number", "text").

Matching (`matches(extracted, truth, kind)`):
- "literal": both sides through `ast.literal_eval`, compared with `==` (as CRUXEval's own assertion does); if
  either side is not a literal, their whitespace-normalised texts must be equal;
- "number": exact rational equality of the value's leading number, which may carry thousands separators
  ("1,234"), a trailing ".0", a currency sign, a fraction ("3/4"), trailing units or words ("155 minutes"),
  or a lead-in ("The answer is 7"); when an operator comes between that number and an `=` ("3 + 4 = 7"), or
  no number leads, the number after the last `=` counts instead;
- "text": equal after case folding, collapsing whitespace and stripping surrounding quotes, backticks,
  stars and punctuation, a lead-in ("It is Monday") and a leading article.
A value that is one clause "<A> is <B>" also matches when A or B alone does: "The first letter of the word
'tree' is 'T'" (B), "Omar is taller than Ann" for "Who is taller?" (A), "The lamp is off" (B). This reads
the short sentences small models answer in; a sentence with two or more "is" is taken whole.
"""
from __future__ import annotations

import ast
import re
from fractions import Fraction

KINDS = ("literal", "number", "text")

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


def extract_answer(reply: str | None) -> str | None:
    """The final answer in `reply` (see the module's rules), or None when there is none."""
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
    fences = _FENCE.findall(reply)
    if fences:
        return _finish(fences[-1])
    phrases = _ANSWER_IS.findall(reply)
    if phrases:
        return _finish(phrases[-1])
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


def _literal(text: str) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(text.strip())
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError on hostile input
        return False, None


def readings(value: str) -> list[str]:
    """The value, and for a one-clause sentence "<A> is <B>" also A and B."""
    parts = _IS.split(value)
    return [value] + parts if len(parts) == 2 and all(p.strip() for p in parts) else [value]


def matches(extracted: str | None, truth: str, kind: str) -> bool:
    """Whether the extracted answer, or one of its `readings`, equals the truth under `kind`'s rule."""
    if kind not in KINDS:
        raise ValueError(f"unknown answer kind {kind!r}")
    if extracted is None:
        return False
    return any(_matches_one(reading, truth, kind) for reading in readings(extracted))


def _matches_one(extracted: str, truth: str, kind: str) -> bool:
    if kind == "number":
        got, want = parse_number(extracted), parse_number(truth)
        return got is not None and want is not None and got == want
    if kind == "text":
        return normalise_text(extracted) == normalise_text(truth) != ""
    (ok_got, got), (ok_want, want) = _literal(extracted), _literal(truth)
    if ok_got and ok_want:
        try:
            return bool(got == want)
        except Exception:
            return False
    return " ".join(extracted.split()) == " ".join(truth.split())
