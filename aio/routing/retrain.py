"""`aio retrain`: a new classifier from the quality monitor's verdicts in the SQL log plus the seed data,
evaluated against the classifier in service on held-out data, promoted only if it is not worse.

Labels from the log: a verified low-tier answer that passed means that tier sufficed (label = its index); one that
failed means the query needed the reference tier (label = the reference tier's index, normally large). The probe's
outcomes join them (`probe_examples`), and the seed rows' weight falls as these own outcomes grow. The
held-out set is a fixed hash split of all examples (`is_holdout`), so every retrain judges on the same kind of
data and the shipped default never trained on the seed rows that are held out.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from aio.db.models import Request, Verification
from aio.db.records import utcnow
from aio.routing import registry
from aio.routing.embedding_cache import EmbeddingCache
from aio.routing.probe_examples import SOURCE as PROBE_SOURCE, probe_examples, seed_factor
from aio.routing.progress import NoProgress, Progress
from aio.settings import TIER_ORDER
from classifier.seed import is_holdout, seed_weight

logger = logging.getLogger(__name__)

RETRAIN_EVERY = timedelta(days=7)
MIN_TRAIN_EXAMPLES = 20
SEED_PREFIX = "seed:"


class RetrainError(ValueError):
    """Retraining cannot go ahead (too little data, bad options): the classifier in service stays."""


_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str) -> timedelta:
    """"7d", "36h", "2w", "90m" → a timedelta."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text or "")
    if match is None:
        raise RetrainError(f"--since takes a duration like 7d, 36h, 2w or 90m, got {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    return timedelta(**{_UNITS[unit]: value})


@dataclass
class Examples:
    texts: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def add(self, text: str, label: int, source: str) -> None:
        self.texts.append(text)
        self.labels.append(label)
        self.sources.append(source)

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for source in self.sources:
            out[source] = out.get(source, 0) + 1
        return out


def log_examples(engine: Engine, since: timedelta | None = None) -> tuple[Examples, dict[str, int]]:
    """One example per verified request whose prompt was logged (the latest verdict wins)."""
    from classifier.features import messages_to_text

    query = (sa.select(Request.request_id, Request.prompt, Verification.tier, Verification.reference_tier,
                       Verification.passed, Verification.demo_tiers)
             .join(Verification, Verification.request_id == Request.request_id)
             .order_by(Verification.created_at))
    if since is not None:
        query = query.where(Verification.created_at >= utcnow() - since)
    latest: dict[str, tuple[str | None, str, str, bool, bool]] = {}
    with Session(engine) as session:
        for request_id, prompt, tier, reference_tier, passed, demo in session.execute(query):
            latest[request_id] = (prompt, tier, reference_tier, passed, demo)
    examples, stats = Examples(), {"verified": len(latest), "redacted": 0, "unknown_tier": 0, "demo_tiers": 0,
                                   "passed": 0, "failed": 0}
    for prompt, tier, reference_tier, passed, demo in latest.values():
        if demo:  # answers of the embedded demo tiers (one model, or random weights): not evidence of anything
            stats["demo_tiers"] += 1
            continue
        if prompt is None:
            stats["redacted"] += 1
            continue
        label_tier = tier if passed else reference_tier
        if label_tier not in TIER_ORDER:
            stats["unknown_tier"] += 1
            continue
        try:
            text = messages_to_text(json.loads(prompt))
        except (ValueError, TypeError):
            text = prompt
        if not text.strip():
            stats["redacted"] += 1
            continue
        stats["passed" if passed else "failed"] += 1
        examples.add(text, TIER_ORDER.index(label_tier), "log")
    return examples, stats


def seed_examples(path: Path | None = None) -> Examples:
    """The seed data shipped with the classifier (or a CSV with columns text,label[,source])."""
    import csv
    import gzip

    examples = Examples()
    if path is None:
        from classifier.seed import load_seed_data

        for text, label, source in zip(*load_seed_data()):
            examples.add(text, int(label), f"{SEED_PREFIX}{source}")
        return examples
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                examples.add(row["text"], int(row["label"]), f"{SEED_PREFIX}{row.get('source') or Path(path).name}")
    except (OSError, KeyError, ValueError) as exc:
        raise RetrainError(f"cannot read seed data {path}: {exc}") from exc
    return examples


def evaluate(classifier: Any, texts: Sequence[str], labels: Sequence[int],
             embeddings: np.ndarray | None = None) -> dict[str, float]:
    """Log loss (lower is better: calibrated probabilities are what routing thresholds read) and accuracy.
    `embeddings` of `texts` are passed on to classifiers that take them (see `takes_embeddings`)."""
    if not texts:
        return {"n": 0}
    if embeddings is not None:
        proba = classifier.predict_proba(list(texts), embeddings=embeddings)
    else:
        proba = classifier.predict_proba(list(texts))
    proba = np.asarray(proba, dtype=np.float64)
    y = np.minimum(np.asarray(labels), proba.shape[1] - 1)
    picked = np.clip(proba[np.arange(len(y)), y], 1e-12, 1.0)
    return {"n": int(len(y)), "log_loss": float(-np.log(picked).mean()),
            "accuracy": float((proba.argmax(axis=1) == y).mean())}


def takes_embeddings(classifier: Any, cache: EmbeddingCache | None) -> bool:
    """An embedding head on the cache's encoder: it can be given the cached vectors instead of encoding again."""
    return (cache is not None and getattr(classifier, "kind", None) == "sklearn-head"
            and getattr(classifier, "encoder_name", None) == cache.encoder_name)


@dataclass
class RetrainReport:
    status: str  # "skipped" | "dry-run" | "promoted" | "rejected"
    reason: str
    candidate_version: str | None = None
    current_version: str | None = None
    candidate_metrics: dict[str, float] = field(default_factory=dict)
    current_metrics: dict[str, float] = field(default_factory=dict)
    data_counts: dict[str, int] = field(default_factory=dict)
    path: str | None = None
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # distinct texts embedded now ("new"), read from the cache ("cached") and from the shipped seed embeddings
    embedded: dict[str, int] = field(default_factory=dict)
    shipped_embeddings: str | None = None  # "used", why the shipped seed embeddings were not, or None: not needed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _default_train(texts: list[str], labels: list[int], n_tiers: int, sample_weight: np.ndarray | None = None,
                   embeddings: np.ndarray | None = None, encoder: str | None = None):
    """With cached embeddings (from `encoder`, the cache's): the embedding head only (fine-tuning would encode
    every text again, each epoch)."""
    from classifier import ComplexityClassifier

    if embeddings is None:
        return ComplexityClassifier.train(texts, labels, n_tiers=n_tiers, sample_weight=sample_weight)
    return ComplexityClassifier.train(texts, labels, n_tiers=n_tiers, head="sklearn", embeddings=embeddings,
                                      encoder_path=encoder, sample_weight=sample_weight)


def training_weights(sources: Sequence[str], labels: Sequence[int], own: int = 0) -> np.ndarray:
    """The weight of each example: seed rows as the shipped default weighs them (`classifier.seed.seed_weight`:
    hand-labelled chat rows by their label), times `probe_examples.seed_factor` of the deployment's `own` rows; the
    monitor's verdicts and the probe's outcomes 1."""
    factor = seed_factor(own)
    return np.array([factor * seed_weight(s.removeprefix(SEED_PREFIX), label) if s.startswith(SEED_PREFIX) else 1.0
                     for s, label in zip(sources, labels, strict=True)])


def own_rows(sources: Sequence[str]) -> int:
    """The deployment's own outcomes among the examples: the monitor's verdicts and the probe's."""
    return sum(not s.startswith(SEED_PREFIX) for s in sources)


class _Stages:
    """Reports each stage to `progress` and keeps how long it took."""

    def __init__(self, progress: Progress) -> None:
        self.progress, self.seconds = progress, {}
        self._name, self._start = None, 0.0

    def __call__(self, name: str, total: int | None = None) -> None:
        self._end()
        self._name, self._start = name, time.perf_counter()
        self.progress.stage(name, total)

    def _end(self) -> None:
        if self._name is not None:
            self.seconds[self._name] = round(time.perf_counter() - self._start, 2)
            self._name = None

    def close(self) -> dict[str, float]:
        self._end()
        self.progress.close()
        return self.seconds


def retrain(engine: Engine, current: Any, output_dir: Path, *, since: timedelta | None = None,
            margin: float = 0.0, dry_run: bool = False, if_due: bool = False, seed_path: Path | None = None,
            use_seed: bool = True, train: Callable[..., Any] = _default_train, now: datetime | None = None,
            embeddings: EmbeddingCache | None = None, progress: Progress | None = None) -> RetrainReport:
    """Trains a candidate and promotes it when its held-out log loss <= the current one's + margin. With an
    embedding cache, the default trainer and embedding heads reuse cached vectors and, once checked against the
    encoder, the shipped seed embeddings (only new texts are encoded)."""
    start = time.perf_counter()
    now = now or utcnow()
    if if_due:
        last = registry.last_training(engine)
        flagged = registry.router_state(engine).retrain_due_at
        if last is not None and now - last < RETRAIN_EVERY and (flagged is None or flagged < last):
            return RetrainReport("skipped", f"not due: last trained {last:%Y-%m-%d %H:%M} UTC, "
                                            f"less than {RETRAIN_EVERY.days} days ago, and the quality monitor "
                                            "has not asked for one since", current_version=current.version)
    stage = _Stages(progress or NoProgress())
    try:
        report = _retrain(engine, current, output_dir, stage, since=since, margin=margin, dry_run=dry_run,
                          seed_path=seed_path, use_seed=use_seed, train=train, cache=embeddings)
    finally:
        seconds = stage.close()
    report.stage_seconds = seconds
    report.seconds = time.perf_counter() - start
    return report


def _retrain(engine: Engine, current: Any, output_dir: Path, stage: _Stages, *, since: timedelta | None,
             margin: float, dry_run: bool, seed_path: Path | None, use_seed: bool, train: Callable[..., Any],
             cache: EmbeddingCache | None) -> RetrainReport:
    stage("reading the log and the seed data")
    log, log_stats = log_examples(engine, since)
    data = seed_examples(seed_path) if use_seed else Examples()
    for text, label, source in zip(log.texts, log.labels, log.sources):
        data.add(text, label, source)
    for text, label in probe_examples(engine):
        data.add(text, label, PROBE_SOURCE)
    n_tiers = len(TIER_ORDER)
    train_set, holdout, train_weights = Examples(), Examples(), []
    # a row at weight 0 (a hand label of hardness, see classifier.seed) is neither trained on nor judged by
    for text, label, source, weight in zip(data.texts, data.labels, data.sources,
                                           training_weights(data.sources, data.labels, own_rows(data.sources))):
        if weight > 0 and is_holdout(text):
            holdout.add(text, label, source)
        elif weight > 0:
            train_set.add(text, label, source)
            train_weights.append(weight)
    counts = {**{f"train_{k}": v for k, v in train_set.counts().items()},
              **{f"holdout_{k}": v for k, v in holdout.counts().items()},
              "train": len(train_set), "holdout": len(holdout), **{f"log_{k}": v for k, v in log_stats.items()}}
    if len(train_set) < MIN_TRAIN_EXAMPLES:
        raise RetrainError(f"only {len(train_set)} training examples (need >= {MIN_TRAIN_EXAMPLES}): "
                           f"{log_stats['passed'] + log_stats['failed']} usable verdicts in the log"
                           + ("" if use_seed else " and no seed data"))
    if len(set(train_set.labels)) < 2:
        raise RetrainError(f"every training example has label {train_set.labels[0]}: a classifier needs two classes")
    if not holdout.texts:
        raise RetrainError("no held-out examples to compare the candidate with the current classifier")
    default_trainer = train is _default_train
    vectors, embedded = None, {}
    if cache is not None and (default_trainer or takes_embeddings(current, cache)):
        everything = train_set.texts + holdout.texts
        if cache.shipped_path is not None and cache.missing(everything):
            stage("checking the shipped seed embeddings against the encoder")
            cache.check_shipped()
        embedded = cache.sources(everything)
        stage(f"embedding {embedded['new']} new texts ({embedded['shipped']} shipped, {embedded['cached']} cached)",
              total=embedded["new"])
        vectors = cache.embed(everything, on_progress=stage.progress.advance)
    train_vectors = None if vectors is None else vectors[:len(train_set)]
    holdout_vectors = None if vectors is None else vectors[len(train_set):]
    stage(f"fitting on {len(train_set)} examples")
    try:
        weights = np.asarray(train_weights)
        if default_trainer:
            candidate = train(train_set.texts, train_set.labels, n_tiers, sample_weight=weights,
                              embeddings=train_vectors, encoder=None if cache is None else cache.encoder_name)
        else:
            candidate = train(train_set.texts, train_set.labels, n_tiers, sample_weight=weights)
    except Exception as exc:  # bad data or a broken encoder: report it, the current classifier stays
        raise RetrainError(f"training failed: {type(exc).__name__}: {exc}") from exc
    stage(f"evaluating on {len(holdout)} held-out examples", total=2)
    candidate_metrics = evaluate(candidate, holdout.texts, holdout.labels,
                                 holdout_vectors if takes_embeddings(candidate, cache) else None)
    stage.progress.advance()
    current_metrics = evaluate(current, holdout.texts, holdout.labels,
                               holdout_vectors if takes_embeddings(current, cache) else None)
    stage.progress.advance()
    stage("deciding")
    better = candidate_metrics["log_loss"] <= current_metrics["log_loss"] + margin
    verdict = (f"held-out log loss {candidate_metrics['log_loss']:.4f} vs {current_metrics['log_loss']:.4f} "
               f"for {current.version} (margin {margin})")
    report = RetrainReport("dry-run" if dry_run else ("promoted" if better else "rejected"),
                           ("not worse: " if better else "worse: ") + verdict, candidate.version, current.version,
                           candidate_metrics, current_metrics, counts, embedded=embedded,
                           shipped_embeddings=None if cache is None else cache.shipped_status)
    if not dry_run:
        stage("saving")
        path = output_dir / candidate.version
        candidate.save(path)
        report.path = str(path)
        registry.register(engine, version=candidate.version, kind=getattr(candidate, "kind", type(candidate).__name__),
                          path=str(path), status="active" if better else "rejected",
                          num_train_examples=len(train_set),
                          metrics={"holdout": candidate_metrics, "current_holdout": current_metrics,
                                   "training": getattr(candidate, "metrics", {}) or {}},
                          data_counts=counts, parent_version=current.version, notes=report.reason)
        registry.clear_retrain_due(engine)
    return report
