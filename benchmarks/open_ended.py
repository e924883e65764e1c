"""Open-ended routing outcomes (issue 26): every tier's answer to every open-ended prompt, scored.

The family demo's tiers answer `classifier/data/open_ended.jsonl` and every answer is scored, so that a router is
judged by which tier's answer was good rather than by anyone's impression of how hard a prompt looks.

    python -m benchmarks.open_ended --out classifier/data/open_ended_outcomes.jsonl [--tiers small,medium,large]
                                    [--max-tokens 384] [--concurrency 4] [--limit N]

One live `aio serve` on the family demo (started as `benchmarks.end_to_end` starts it, quality monitor off, in a
temporary home that links the family's files from $AIO_HOME), the openai SDK, temperature 0:
1. each tier, asked by name, answers every prompt;
2. an answer to a prompt with a `reference` is scored by computed truth: 10 when its final answer
   (`quality_monitor.final_answer`) states the reference's value, else 1; every other answer is rated 1-10 by
   the large tier as an impartial judge (single-answer grading, MT-Bench style; the rating asked for first, so a
   few tokens suffice). A failed request, or a judge reply without a rating, scores null.
Writes one JSON line per prompt (id, category, text, reference, and per tier: score, method, completion_tokens,
answer, judge_reply, error) and prints the mean score per category and tier. `classifier.evaluate --only open`
reads the file."""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.end_to_end.traffic import Answer, send_all
from classifier.errors import ClassifierError
from classifier.open_ended import CATEGORIES, PROMPTS_PATH, TIERS, OpenPrompt, load_prompts
from quality_monitor.final_answer import extract_answer, readings, same_value

JUDGE_TIER = "large"
RIGHT, WRONG = 10.0, 1.0
ANSWER_CHARS = 2000  # of each answer, kept in the outcomes file

JUDGE_PROMPT = """You are an impartial judge of an AI assistant's work. Read the user's request and the \
assistant's answer below, then rate the answer on a scale from 1 (useless or wrong) to 10 (excellent).
Judge helpfulness, relevance, accuracy, depth, creativity where it matters, and whether every instruction in the \
request was followed. Do not reward length for its own sake, and ignore the assistant's tone about itself.
Give the rating first, strictly in this format: Rating: [[N]]
where N is a whole number from 1 to 10. You may add one short sentence of justification after it.

[The user's request]
{question}

[The assistant's answer]
{answer}
[End of the assistant's answer]"""

_BRACKETED = re.compile(r"\[\[\s*(\d{1,2}(?:\.\d+)?)\s*\]\]")
_INTEGER = re.compile(r"(?<![\d.])\d{1,2}(?![\d.])")


@dataclass(frozen=True)
class Request:
    """What `traffic.send_all` reads of a task: its id and the user message."""
    id: str
    prompt: str


@dataclass
class Outcome:
    score: float | None
    method: str  # "truth" or "judge"
    completion_tokens: int
    answer: str
    judge_reply: str | None
    error: str | None = None  # the failed request's error (the tier's or the judge's)


def parse_rating(reply: str | None) -> float | None:
    """The judge's rating: `[[N]]` (1..10), else the first whole number 1..10 in the reply, else None."""
    if not reply:
        return None
    bracketed = _BRACKETED.search(reply)
    if bracketed and 1 <= float(bracketed.group(1)) <= 10:
        return float(bracketed.group(1))
    return next((float(m.group(0)) for m in _INTEGER.finditer(reply) if 1 <= int(m.group(0)) <= 10), None)


def truth_score(answer: str, reference: str) -> float:
    """10 when the answer's final answer (or one reading of it, "<A> is <B>") states the reference, else 1."""
    value = extract_answer(answer)
    right = value is not None and any(same_value(reading, reference) for reading in readings(value))
    return RIGHT if right else WRONG


def judge_request(prompt: OpenPrompt, tier: str, answer: str) -> Request:
    return Request(f"{prompt.id}/{tier}", JUDGE_PROMPT.format(question=prompt.text, answer=answer))


def outcome(prompt: OpenPrompt, answer: Answer, verdict: Answer | None) -> Outcome:
    """The score of one tier's answer: by truth when the prompt has a reference, else by the judge's verdict."""
    method = "judge" if prompt.reference is None else "truth"
    if answer.error:
        return Outcome(None, method, 0, "", None, answer.error)
    kept = answer.text[:ANSWER_CHARS]
    if prompt.reference is not None:
        return Outcome(truth_score(answer.text, prompt.reference), method, answer.completion_tokens, kept, None)
    if verdict is None or verdict.error:
        error = "judge: " + (verdict.error if verdict else "not asked")
        return Outcome(None, method, answer.completion_tokens, kept, None, error)
    return Outcome(parse_rating(verdict.text), method, answer.completion_tokens, kept, verdict.text)


def outcome_row(prompt: OpenPrompt, by_tier: dict[str, Outcome]) -> dict:
    return {"id": prompt.id, "category": prompt.category, "text": prompt.text, "reference": prompt.reference,
            **{tier: asdict(o) for tier, o in by_tier.items()}}


def summary(rows: list[dict], tiers: list[str]) -> str:
    """Mean score per category and tier, and how many scores are null."""
    def mean(tier: str, category: str | None) -> str:
        got = [r[tier]["score"] for r in rows if category in (None, r["category"]) and r[tier]["score"] is not None]
        return f"{sum(got) / len(got):8.2f}" if got else f"{'-':>8s}"

    present = [c for c in CATEGORIES if any(r["category"] == c for r in rows)]
    lines = [f"{'category':<11s}" + "".join(f"{t:>8s}" for t in tiers)]
    lines += [f"{c:<11s}" + "".join(mean(t, c) for t in tiers) for c in present]
    lines.append(f"{'all':<11s}" + "".join(mean(t, None) for t in tiers))
    nulls = {t: sum(r[t]["score"] is None for r in rows) for t in tiers}
    lines.append("null scores (failed request or no rating in the judge's reply): "
                 + ", ".join(f"{t} {n}" for t, n in nulls.items()))
    return "\n".join(lines)


@contextlib.contextmanager
def family_home() -> Iterator[Path]:
    """A temporary AIO_HOME whose models/ links the family files assembled once in $AIO_HOME."""
    from aio.demo_family import FamilyUnavailable, assemble_family, models_dir
    from aio.settings import default_home

    try:
        assemble_family(default_home())
    except FamilyUnavailable as exc:
        sys.exit(f"the family demo is not installed: {exc}")
    with tempfile.TemporaryDirectory(prefix="aio-open-ended-") as tmp:
        home = Path(tmp)
        (home / "models").symlink_to(models_dir(default_home()))
        yield home


def ask(base_url: str, requests: list[Request], phase: str, model: str, max_tokens: int,
        concurrency: int) -> list[Answer]:
    start = time.perf_counter()
    answers = send_all(base_url, requests, phase, model, concurrency=concurrency, max_tokens=max_tokens)
    failed = [a for a in answers if a.error]
    print(f"  {phase}: {len(answers)} requests in {time.perf_counter() - start:.0f} s"
          + (f", {len(failed)} failed: {failed[0].error}" if failed else ""), flush=True)
    return answers


def run(args: argparse.Namespace, prompts: list[OpenPrompt]) -> list[dict]:
    from benchmarks.end_to_end.__main__ import Bench

    with family_home() as home:
        server = Bench(args, home).server(monitor=False)
        try:
            answers = {t: ask(server.api_url, [Request(p.id, p.text) for p in prompts], f"answer-{t}", t,
                              args.max_tokens, args.concurrency) for t in args.tiers}
            to_judge = [(p, t, answers[t][i]) for t in args.tiers for i, p in enumerate(prompts)
                        if p.reference is None and not answers[t][i].error]
            verdicts = ask(server.api_url, [judge_request(p, t, a.text) for p, t, a in to_judge], "judge",
                           JUDGE_TIER, args.judge_max_tokens, args.concurrency)
        finally:
            server.stop()
    by_key = {(p.id, t): v for (p, t, _), v in zip(to_judge, verdicts)}
    return [outcome_row(p, {t: outcome(p, answers[t][i], by_key.get((p.id, t))) for t in args.tiers})
            for i, p in enumerate(prompts)]


def tier_list(value: str) -> list[str]:
    tiers = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in tiers if t not in TIERS]
    if unknown or not tiers:
        raise argparse.ArgumentTypeError(f"tiers must be a comma-separated subset of {','.join(TIERS)}")
    return tiers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.open_ended", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the outcomes file (JSON lines) to write")
    parser.add_argument("--prompts", type=Path, default=PROMPTS_PATH)
    parser.add_argument("--tiers", type=tier_list, default=list(TIERS), help="comma-separated tiers to ask")
    parser.add_argument("--max-tokens", type=int, default=384, help="per answer")
    parser.add_argument("--judge-max-tokens", type=int, default=16, help="per judge reply (the rating comes first)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts (a smoke run)")
    args = parser.parse_args(argv)
    if min(args.max_tokens, args.judge_max_tokens, args.concurrency, args.limit or 1) < 1 or args.limit == 0:
        parser.error("--max-tokens, --judge-max-tokens, --concurrency and --limit must be >= 1")
    try:
        prompts = load_prompts(args.prompts)[:args.limit]
    except ClassifierError as exc:
        parser.error(str(exc))
    print(f"{len(prompts)} prompts, tiers {','.join(args.tiers)}, judge: the {JUDGE_TIER} tier", flush=True)
    rows = run(args, prompts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(summary(rows, args.tiers))
    print(f"wrote {args.out}; read it with `python -m classifier.evaluate --only open`", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
