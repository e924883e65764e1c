"""Whether a model's final answer (quality_monitor.final_answer.extract_answer) matches the computed truth.

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

from quality_monitor.final_answer import equal_literals, extract_answer, normalise_text, parse_number, readings

__all__ = ["KINDS", "extract_answer", "matches", "normalise_text", "parse_number", "readings"]

KINDS = ("literal", "number", "text")


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
    equal = equal_literals(extracted, truth)
    return equal if equal is not None else " ".join(extracted.split()) == " ".join(truth.split())
