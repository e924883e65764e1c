"""The open-ended routing check (issue 26): the prompt file's shape, the outcome-based metrics on synthetic
outcomes whose answer is known, the benchmark's scoring (computed truth, the judge's rating) and the evaluate
hook. No model and no server."""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import open_ended as bench
from benchmarks.end_to_end.traffic import Answer
from classifier import open_ended, routing_metrics as rm
from classifier.chat_data import SANITY_PATH, TRAIN_PATH
from classifier.errors import ClassifierError

ROOT = Path(__file__).resolve().parents[1]


def _answer(text: str, error: str | None = None, tokens: int = 5) -> Answer:
    return Answer("t", "p", "m", None if error else "r", text, 3, tokens, None, 0.1, error)


def _outcomes(small, large, medium=None, categories=None) -> open_ended.Outcomes:
    n = len(small)
    scores = {"small": np.asarray(small, float), "large": np.asarray(large, float)}
    if medium is not None:
        scores["medium"] = np.asarray(medium, float)
    cats = categories or [open_ended.CATEGORIES[i % 8] for i in range(n)]
    return open_ended.Outcomes([f"p{i}" for i in range(n)], cats, [f"text {i}" for i in range(n)], scores)


def _proba_from_need(need) -> np.ndarray:
    """Three-tier probabilities whose 1 − P(small) is `need` (the rest on large)."""
    need = np.asarray(need, float)
    return np.stack([1 - need, np.zeros_like(need), need], axis=1)


# ------------------------------------------------------------------------------------------- the prompt file


def test_the_prompt_file_holds_80_prompts_ten_per_category_with_unique_ids():
    prompts = open_ended.load_prompts()
    assert [p.id for p in prompts] == [f"open-{i:03d}" for i in range(80)]
    assert {c: sum(p.category == c for p in prompts) for c in open_ended.CATEGORIES} == dict.fromkeys(
        open_ended.CATEGORIES, 10)
    assert len({p.text.casefold() for p in prompts}) == 80


def test_references_are_short_strings_and_ask_for_an_answer_line():
    prompts = open_ended.load_prompts()
    for p in prompts:
        if p.category in ("math", "reasoning"):
            assert p.reference is not None, p.id
        if p.reference is not None:
            assert isinstance(p.reference, str) and 0 < len(p.reference) <= 40 and "\n" not in p.reference, p.id
            assert '"Answer: <value>"' in p.text, p.id
    raw = [json.loads(line) for line in open_ended.PROMPTS_PATH.read_text().splitlines()]
    assert all(set(row) <= {"id", "category", "text", "reference"} for row in raw)


def test_no_prompt_repeats_a_chat_prompt():
    chat = {json.loads(line)["text"].casefold() for path in (TRAIN_PATH, SANITY_PATH)
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
    assert not [p.id for p in open_ended.load_prompts() if p.text.casefold() in chat]


# ------------------------------------------------------------------------------------------------- metrics


def test_the_two_tier_metrics_take_real_valued_scores():
    weak, strong = np.array([2.0, 8.0, 5.0]), np.array([9.0, 8.0, 6.0])
    # routing the first prompt to strong gains 7 of the 8 points the strong tier gains in all
    assert rm.pgr([1.0, 0.0, 0.5], weak, strong, 1 / 3) == pytest.approx(7 / 8)


def test_a_router_that_knows_the_gap_beats_a_random_one():
    rng = np.random.default_rng(0)
    small = rng.integers(1, 11, 160).astype(float)
    large = np.clip(small + rng.choice([0, 0, 0, 3, 6], 160), 1, 10)
    outcomes = _outcomes(small, large)
    gap = large - small
    knows = open_ended.evaluate(outcomes, _proba_from_need(gap / 10), n_boot=100)
    guesses = open_ended.evaluate(outcomes, _proba_from_need(rng.random(160)), n_boot=100)
    assert knows.pairs[0].figures["apgr"][0] > guesses.pairs[0].figures["apgr"][0] + 0.2
    assert knows.pairs[0].spearman[0] == pytest.approx(1.0)
    assert knows.pairs[0].figures["apgr"][1] <= knows.pairs[0].figures["apgr"][0] <= knows.pairs[0].figures["apgr"][2]


def test_a_perfect_ordering_needs_no_more_strong_calls_than_the_prompts_that_gain():
    small = np.full(100, 4.0)
    large = small.copy()
    large[:20] = 10.0  # 20 prompts gain; half of the whole gain lies in 10 of them
    outcomes = _outcomes(small, large)
    report = open_ended.evaluate(outcomes, _proba_from_need(large - small > 0), n_boot=50)
    cpt = report.pairs[0].figures["cpt50"][0]
    assert cpt <= 0.2 and cpt == pytest.approx(0.1)
    assert report.pairs[0].figures["pgr20"][0] == pytest.approx(1.0)


def test_weak_as_good_as_strong_gives_a_clear_result_not_a_crash():
    scores = np.linspace(1, 10, 40)
    report = open_ended.evaluate(_outcomes(scores, scores, medium=scores), _proba_from_need(np.full(40, 0.3)),
                                 n_boot=50)
    assert all(p.figures is None and "undefined" in p.reason for p in report.pairs)
    text = open_ended.format_report(report)
    assert "PGR is undefined" in text and "nan" in text  # Spearman of a constant score: nan, said so
    assert all(row.gap == 0 for row in report.categories)


def test_null_scores_are_left_out_and_counted_and_the_medium_pair_uses_its_own_score():
    small = np.array([1, 2, np.nan, 3, 4, 5, 6, 7.0])
    medium = np.array([5, 5, 5, np.nan, 5, 5, 5, 5.0])
    large = np.array([9, 9, 9, 9, np.nan, 9, 9, 9.0])
    proba = np.tile([0.2, 0.3, 0.5], (8, 1))
    report = open_ended.evaluate(_outcomes(small, large, medium), proba, n_boot=20)
    (first, second) = report.pairs
    assert (first.weak, first.n, first.left_out) == ("small", 6, 2)
    assert (second.weak, second.n, second.left_out) == ("medium", 6, 2)
    assert open_ended.needs_strong(proba, 1) == pytest.approx(np.full(8, 0.5))
    assert "2 left out for a null score" in open_ended.format_report(report)
    two_tier = open_ended.evaluate(_outcomes(small, large, medium), proba[:, :2] / 0.5, n_boot=20)
    assert [p.weak for p in two_tier.pairs] == ["small"]  # a two-tier router has no medium-vs-large decision


def test_the_category_table_holds_the_mean_router_score_and_the_gap():
    cats = ["writing", "writing", "math", "math"]
    report = open_ended.evaluate(_outcomes([8, 8, 2, 4], [8, 9, 9, 9], categories=cats),
                                 _proba_from_need([0.2, 0.4, 0.7, 0.9]), n_boot=20)
    rows = {r.category: r for r in report.categories}
    assert rows["writing"].router == pytest.approx(0.3) and rows["writing"].gap == pytest.approx(0.5)
    assert rows["math"].router == pytest.approx(0.8) and rows["math"].gap == pytest.approx(6.0)
    assert list(rows) == ["writing", "math"]  # in the categories' order


# ------------------------------------------------------------------------------------------ the outcomes file


def test_the_benchmark_writes_what_the_evaluation_reads(tmp_path):
    prompts = open_ended.load_prompts()[:8]
    rows = [bench.outcome_row(p, {"small": bench.outcome(p, _answer("Answer: 36"), _answer("Rating: [[3]]")),
                                  "large": bench.outcome(p, _answer("Answer: 36"), _answer("[[9]]"))})
            for p in prompts]
    path = tmp_path / "outcomes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    outcomes = open_ended.load_outcomes(path)
    assert outcomes.ids == [p.id for p in prompts] and set(outcomes.scores) == {"small", "large"}
    math = outcomes.categories.index("math")  # open-003, "What is 15% of 240?": computed truth, right
    assert outcomes.scores["small"][math] == 10.0
    assert outcomes.scores["small"][0] == 3.0 and outcomes.scores["large"][0] == 9.0


@pytest.mark.parametrize("content, message", [
    (None, "benchmarks.open_ended"),
    ("{not json\n", "not JSON"),
    ('{"id": "a", "category": "writing", "text": "t", "small": {"score": 4}}\n', "`large` tier"),
    ('{"id": "a", "category": "writing", "text": "t", "small": {"score": 11}, "large": {"score": 4}}\n', "1 to 10"),
    ('{"id": "a", "category": "poetry", "text": "t", "small": {"score": 1}, "large": {"score": 4}}\n', "category"),
])
def test_a_missing_or_malformed_outcomes_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "outcomes.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ClassifierError, match=re.escape(message)):
        open_ended.load_outcomes(path)


# --------------------------------------------------------------------------------------- the benchmark's scoring


@pytest.mark.parametrize("reply, rating", [
    ("Rating: [[7]]", 7.0), ("[[10]]", 10.0), ("Rating: [[ 4 ]] The answer is thin.", 4.0), ("Rating: 8/10", 8.0),
    ("garbage", None), ("", None), (None, None), ("[[0]]", None), ("Rating: [[12]]", None),
])
def test_the_judge_reply_is_parsed(reply, rating):
    assert bench.parse_rating(reply) == rating


@pytest.mark.parametrize("answer, reference, score", [
    ("3 times 4 is 12, plus 3 is 15.\nAnswer: 15", "15", 10.0),
    ("**Answer:** $2,315.25", "2315.25", 10.0),
    ("Answer: Bo is the knight.", "Bo", 10.0),
    ("The answer is Friday.", "Friday", 10.0),
    ("Answer: 671/1296", "671/1296", 10.0),
    ("Answer: 14", "15", 1.0),
    ("I am not sure, it could be many things.", "15", 1.0),
])
def test_truth_scoring_reads_the_final_answer(answer, reference, score):
    assert bench.truth_score(answer, reference) == score


def test_an_outcome_by_truth_by_judge_and_for_a_failed_request():
    prompts = {p.id: p for p in open_ended.load_prompts()}
    with_reference, open_prompt = prompts["open-003"], prompts["open-000"]
    right = bench.outcome(with_reference, _answer("Answer: 36", tokens=9), None)
    assert (right.score, right.method, right.completion_tokens, right.judge_reply) == (10.0, "truth", 9, None)
    judged = bench.outcome(open_prompt, _answer("Happy birthday!" * 300), _answer("Rating: [[6]] fine"))
    assert (judged.score, judged.method, judged.judge_reply) == (6.0, "judge", "Rating: [[6]] fine")
    assert len(judged.answer) == bench.ANSWER_CHARS
    unrated = bench.outcome(open_prompt, _answer("hi"), _answer("I think it is good"))
    assert unrated.score is None and unrated.judge_reply == "I think it is good"
    failed = bench.outcome(with_reference, _answer("", error="APIError: boom"), None)
    assert failed.score is None and failed.error == "APIError: boom"
    judge_failed = bench.outcome(open_prompt, _answer("hi"), _answer("", error="timeout"))
    assert judge_failed.score is None and judge_failed.error == "judge: timeout"


def test_the_judge_prompt_holds_the_request_and_the_answer_and_asks_for_the_rating_first():
    prompt = open_ended.load_prompts()[0]
    request = bench.judge_request(prompt, "small", "Many happy returns!")
    assert request.id == "open-000/small"
    assert prompt.text in request.prompt and "Many happy returns!" in request.prompt
    assert "Rating: [[N]]" in request.prompt and "impartial" in request.prompt


def test_run_asks_every_tier_and_judges_only_the_answers_without_a_reference(tmp_path, monkeypatch):
    import benchmarks.end_to_end.__main__ as e2e

    class FakeServer:
        api_url = "http://fake/v1"

        def stop(self) -> None:
            pass

    asked: list[tuple[str, str, int]] = []

    def fake_ask(base_url, requests, phase, model, max_tokens, concurrency):
        asked.append((phase, model, len(requests)))
        text = "Rating: [[5]]" if phase == "judge" else "Answer: 36"
        return [_answer(text) for _ in requests]

    monkeypatch.setattr(bench, "family_home", lambda: contextlib.nullcontext(tmp_path))
    monkeypatch.setattr(e2e.Bench, "server", lambda self, monitor: FakeServer())
    monkeypatch.setattr(bench, "ask", fake_ask)
    args = argparse.Namespace(tiers=["small", "large"], max_tokens=8, judge_max_tokens=4, concurrency=2)
    prompts = open_ended.load_prompts()[:8]  # one per category; four of them have a reference
    rows = bench.run(args, prompts)
    assert asked == [("answer-small", "small", 8), ("answer-large", "large", 8), ("judge", "large", 8)]
    for row, prompt in zip(rows, prompts):
        for tier in ("small", "large"):
            assert row[tier]["method"] == ("truth" if prompt.reference else "judge")
            assert row[tier]["score"] == (10.0 if prompt.reference == "36" else 1.0 if prompt.reference else 5.0)


def test_the_benchmark_prints_its_help():
    done = subprocess.run([sys.executable, "-m", "benchmarks.open_ended", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "--limit" in done.stdout and "--tiers" in done.stdout


# ------------------------------------------------------------------------------------------ the evaluate hook


def test_evaluate_says_how_to_produce_missing_outcomes(tmp_path, capsys):
    from classifier.evaluate import main

    assert main(["--only", "open", "--open-outcomes", str(tmp_path / "none.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "python -m benchmarks.open_ended" in out and "none.jsonl" in out


def test_evaluate_reports_the_open_ended_figures(tmp_path, monkeypatch, capsys):
    import classifier
    from classifier.evaluate import main

    rows = []
    for i in range(40):
        small, medium, large = 3.0 + (i % 2) * 5, 6.0, 9.0
        rows.append({"id": f"p{i}", "category": open_ended.CATEGORIES[i % 8], "text": f"prompt {i}", "reference": None,
                     "small": {"score": small}, "medium": {"score": medium}, "large": {"score": large}})
    path = tmp_path / "outcomes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    class Fake:
        version = "fake-1"

        def predict_proba(self, texts):
            need = np.array([0.9 if int(t.split()[1]) % 2 == 0 else 0.1 for t in texts])
            return _proba_from_need(need)

    monkeypatch.setattr(classifier, "load_default", lambda: Fake(), raising=False)
    assert main(["--only", "open", "--open-outcomes", str(path), "--boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "classifier fake-1" in out and "small vs large (40 prompts, 0 left out" in out
    assert "medium vs large" in out and "APGR" in out and "Spearman" in out and "writing" in out
