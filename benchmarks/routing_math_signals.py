"""A routing study: do math-structure signals (how many quantities and reasoning steps a question holds) help the
router beyond the shipped signals?

    python -m benchmarks.routing_math_signals [--cache-dir .bench/clf] [--only gsm8k,zeroeval,mmlu,chat] [--repeats 3]

GSM8K problems get harder with the number of quantities to combine and the steps between them; the shipped
signals (`classifier.features`) count words, sentences, entities and domain terms but not those. The candidate
signals, all regex counts as log1p or flags:
- quantities: numerals (with $ and %) and number words (two, twice, half, dozen, ...), and how many distinct
  numerals;
- steps: sentences that carry a quantity, a proxy for the reasoning steps a word problem needs;
- operations: words that name an operation or a relation (each, per, times, percent, more than, remaining, ...);
- flags: a percentage, a fraction, a decimal.
Both variants go into the shipped head unchanged (logistic, C = 1e-3) with the shipped embedding; grouped,
repeated 5-fold cross-validation as `classifier.select_router` (MMLU: 1 repeat; chat: the chat training prompts
out of fold, trained with the benchmark rows at the shipped weight 20). A study, not a test.
"""
from __future__ import annotations

import argparse
import math
import os
import re

import numpy as np

from classifier import cv_report, families
from classifier.cv import bootstrap, cross_val_proba, fmt, near_duplicate_groups
from classifier.data import ZEROEVAL_COSTS

_NUMERAL = re.compile(r"(?<![\w.])\$?\d+(?:[.,]\d+)*%?")
_NUMBER_WORD = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|"
                          r"fifty|hundred|thousand|million|half|third|quarter|twice|double|triple|dozen)s?\b", re.I)
_OPERATION = re.compile(r"\b(?:percent|each|per|every|times|twice|half|more than|less than|fewer|remaining|left|"
                        r"total|average|rate|ratio|fraction|profit|discount|interest|sum|difference|increase|"
                        r"decrease|after|before|until|respectively)\b|%", re.I)
_SENTENCE = re.compile(r"[.!?]+\s")


def math_signals(text: str) -> list[float]:
    numerals = _NUMERAL.findall(text)
    sentences = [s for s in _SENTENCE.split(text) if s.strip()]
    steps = sum(1 for s in sentences if _NUMERAL.search(s) or _NUMBER_WORD.search(s))
    return [math.log1p(len(numerals)), math.log1p(len(set(numerals))), math.log1p(len(_NUMBER_WORD.findall(text))),
            math.log1p(len(_OPERATION.findall(text))), math.log1p(steps),
            float("%" in text or "percent" in text.lower()),
            float(bool(re.search(r"\d+/\d+|fraction|half|third|quarter", text, re.I))),
            float(bool(re.search(r"\d+\.\d+", text)))]


def study(name: str, emb, args) -> None:
    from classifier.select_router import benchmark, chat_mix

    if name == "chat":
        from classifier.chat_data import category_pairs, difficulty_score, pair_order

        d, rows, chat = chat_mix(emb, args.data_dir, 20.0)
        texts, groups, pairs = d.texts, np.arange(len(d.y)), category_pairs(chat)
    else:
        texts, d, correct = benchmark(name, emb, args.data_dir)
        groups = near_duplicate_groups(d.e)
    extra = np.array([math_signals(t) for t in texts], dtype=np.float32)
    repeats = 1 if name in ("mmlu", "chat") else args.repeats
    print(f"\n{name}: {len(texts)} rows, 5-fold x {repeats}", flush=True)
    for label, f in (("shipped signals", d.f), ("+ math structure", np.hstack([d.f, extra]))):
        v = families.Inputs(d.e, f, d.y, d.w, d.n_tiers)
        oof = cross_val_proba(lambda tr, te: families.logistic(v, tr, te, 1e-3), len(texts), d.n_tiers, groups, 5,
                              repeats, eval_rows=rows if name == "chat" else None)
        if name == "chat":
            scores = difficulty_score(oof[0, rows])
            order = bootstrap(lambda idx: pair_order(scores, [pairs[i] for i in idx]), len(pairs), args.boot)
            print(f"  {label:18s} chat training pairs ordered {fmt(order, True)}", flush=True)
        else:
            print(f"  {label:18s} {cv_report.headline(oof, correct, ZEROEVAL_COSTS, args.boot)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.routing_math_signals", description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--only", default="gsm8k,zeroeval,mmlu,chat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--boot", type=int, default=300)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from classifier.evaluate import Embeddings

    emb = Embeddings(args.cache_dir)
    for name in args.only.split(","):
        study(name, emb, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
