"""The learned complexity classifier: sentence embedding ⊕ cheap signals → per-tier probabilities.

Label of a text = the index of the cheapest tier that answers it well, so P(tier t is good) = P(label <= t).

Heads:
- "sklearn-head": the frozen encoder's embedding (`classifier.encoder`) and the cheap signals
  (`classifier.features.feature_vector`), standardised, into a multinomial logistic regression (C picked by stratified cross-validation log loss on the training part),
  calibrated by temperature scaling on the validation split. Stored as arrays (`head.npz`) and rebuilt with numpy:
  no pickle.
- "finetuned": the encoder fine-tuned end to end with a classification head (`classifier.finetune`), saved with
  `save_pretrained`.
`head="auto"` trains the sklearn head and, for small training sets only (fine-tuning on this CPU does not fit the
time budget above `FINETUNE_AUTO_MAX` texts), a fine-tuned one too, and keeps the lower validation log loss.

Folder layout: `classifier.json` (kind, version, n_tiers, encoder name, options, metrics) + `head.npz`
(+ `model/` for a fine-tuned encoder).
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from classifier.features import FEATURE_NAMES, feature_matrix

CONFIG_NAME = "classifier.json"
HEAD_NAME = "head.npz"
FORMAT = 1
KIND_SKLEARN = "sklearn-head"
KIND_FINETUNED = "finetuned"
KINDS = (KIND_SKLEARN, KIND_FINETUNED)
HEADS = ("auto", "sklearn", "finetune")
MIN_EXAMPLES = 20
MIN_PER_CLASS = 2
FINETUNE_AUTO_MAX = 2_000  # head="auto" tries fine-tuning only up to this many texts (CPU time budget)
C_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)  # ~400 standardised inputs: strong L2 wins (README)


class ClassifierError(ValueError):
    """Bad training input, or a classifier folder that cannot be loaded."""


# ----------------------------------------------------------------------------------------------- helpers


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _log_loss(proba: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    p = np.clip(proba[np.arange(len(y)), y], 1e-12, 1.0)
    return float(np.average(-np.log(p), weights=w))


def validate_training_input(texts: Any, labels: Any, n_tiers: Any, sample_weight: Any = None
                            ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    if isinstance(n_tiers, bool) or not isinstance(n_tiers, (int, np.integer)) or n_tiers < 2:
        raise ClassifierError(f"n_tiers must be an integer >= 2, got {n_tiers!r}")
    if isinstance(texts, str) or not isinstance(texts, Sequence) and not isinstance(texts, np.ndarray):
        raise ClassifierError(f"texts must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ClassifierError(f"texts must all be str: item {bad[0]} is {type(texts[bad[0]]).__name__} "
                              f"({len(bad)} non-str items)")
    try:
        raw = list(labels)
    except TypeError:
        raise ClassifierError(f"labels must be a list of ints, got {type(labels).__name__}") from None
    if len(raw) != len(texts):
        raise ClassifierError(f"texts and labels differ in length: {len(texts)} texts, {len(raw)} labels")
    y = []
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, (float, np.floating)) and float(v).is_integer()):
            raise ClassifierError(f"labels must be integers in [0, {n_tiers}): label {i} is {v!r}")
        y.append(int(v))
    y = np.asarray(y, dtype=np.int64)
    out = np.nonzero((y < 0) | (y >= n_tiers))[0]
    if len(out):
        raise ClassifierError(f"labels must be in [0, {n_tiers}) for n_tiers={n_tiers}: label {out[0]} is "
                              f"{y[out[0]]} ({len(out)} out of range)")
    if len(texts) < MIN_EXAMPLES:
        raise ClassifierError(f"too few training examples: {len(texts)} (need at least {MIN_EXAMPLES})")
    counts = np.bincount(y, minlength=n_tiers)
    present = np.nonzero(counts)[0]
    if len(present) < 2:
        raise ClassifierError(f"labels hold a single class ({int(present[0])}): need at least two tiers present")
    thin = [int(c) for c in present if counts[c] < MIN_PER_CLASS]
    if thin:
        raise ClassifierError(f"class(es) {thin} have fewer than {MIN_PER_CLASS} examples (counts per tier: "
                              f"{counts.tolist()})")
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if len(w) != len(texts):
            raise ClassifierError(f"sample_weight has {len(w)} entries for {len(texts)} texts")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ClassifierError("sample_weight must be finite, non-negative and not all zero")
    return texts, y, w


def _split(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, validation) indices; every present class keeps >= 1 training example."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        k = int(round(fraction * len(idx)))
        k = min(k, len(idx) - 1)
        val.extend(idx[:k])
        train.extend(idx[k:])
    return np.sort(np.asarray(train, dtype=np.int64)), np.sort(np.asarray(val, dtype=np.int64))


def fit_temperature(logits: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    """The temperature T > 0 minimising the log loss of softmax(logits / T) (golden-section on log T)."""
    def loss(log_t: float) -> float:
        return _log_loss(_softmax(logits / math.exp(log_t)), y, w)

    lo, hi = math.log(0.05), math.log(20.0)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return float(math.exp((lo + hi) / 2))


# ------------------------------------------------------------------------------------- the linear head


class LinearHead:
    """Standardise → multinomial logits → softmax(logits / T), in numpy; columns of absent classes get 0."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: np.ndarray,
                 classes: np.ndarray, n_tiers: int, temperature: float = 1.0) -> None:
        self.mean, self.scale = mean.astype(np.float64), scale.astype(np.float64)
        self.coef, self.intercept = coef.astype(np.float64), intercept.astype(np.float64)
        self.classes, self.n_tiers, self.temperature = classes.astype(np.int64), int(n_tiers), float(temperature)

    def logits(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.scale) @ self.coef.T + self.intercept
        if z.shape[1] == 1:  # scikit-learn's binary form: one logit for the second class
            z = np.hstack([np.zeros_like(z), z])
        return z

    def proba(self, x: np.ndarray) -> np.ndarray:
        p = _softmax(self.logits(x) / self.temperature)
        out = np.zeros((len(x), self.n_tiers))
        out[:, self.classes] = p
        return out

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {f"{prefix}mean": self.mean, f"{prefix}scale": self.scale, f"{prefix}coef": self.coef,
                f"{prefix}intercept": self.intercept, f"{prefix}classes": self.classes,
                f"{prefix}temperature": np.array(self.temperature)}

    @classmethod
    def from_arrays(cls, arrays: Any, n_tiers: int, prefix: str = "") -> "LinearHead":
        return cls(arrays[f"{prefix}mean"], arrays[f"{prefix}scale"], arrays[f"{prefix}coef"],
                   arrays[f"{prefix}intercept"], arrays[f"{prefix}classes"], n_tiers,
                   float(arrays[f"{prefix}temperature"]))


def fit_linear_head(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, n_tiers: int, c: float, seed: int
                    ) -> LinearHead:
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-8] = 1.0
    lr = LogisticRegression(C=c, max_iter=2000, tol=1e-4, random_state=seed)
    lr.fit((x - mean) / scale, y, sample_weight=w)
    return LinearHead(mean, scale, lr.coef_, lr.intercept_, lr.classes_, n_tiers)


def _folds(y: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    fold = np.zeros(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        fold[idx] = np.arange(len(idx)) % k
    return [np.nonzero(fold == f)[0] for f in range(k)]


def choose_c(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, n_tiers: int, seed: int,
             grid: Sequence[float] = C_GRID, k: int = 3) -> tuple[float, dict[str, float]]:
    """C with the lowest k-fold cross-validated log loss on the training part."""
    folds = _folds(y, k, seed)
    scores = {}
    for c in grid:
        losses = []
        for f in folds:
            tr = np.setdiff1d(np.arange(len(y)), f)
            if len(np.unique(y[tr])) < 2:
                continue
            head = fit_linear_head(x[tr], y[tr], None if w is None else w[tr], n_tiers, c, seed)
            losses.append(_log_loss(np.clip(head.proba(x[f]), 1e-12, 1), y[f], None if w is None else w[f]))
        scores[c] = float(np.mean(losses)) if losses else float("inf")
    best = min(grid, key=lambda c: (scores[c], -c))
    return float(best), {str(c): round(v, 5) for c, v in scores.items()}


# ------------------------------------------------------------------------------------- the classifier


class ComplexityClassifier:
    """Per-tier probabilities for chat texts (see the module docstring)."""

    def __init__(self, *, n_tiers: int, kind: str, version: str, encoder: str, head: LinearHead | None,
                 num_train_examples: int, metrics: dict, created_at: str, options: dict,
                 finetuned: Any = None, folder: Path | None = None) -> None:
        self.n_tiers = int(n_tiers)
        self.kind = kind
        self.version = version
        self.encoder_name = encoder
        self.head = head
        self.num_train_examples = int(num_train_examples)
        self.metrics = dict(metrics)
        self.created_at = created_at
        self.options = dict(options)
        self._finetuned = finetuned  # classifier.finetune.FinetunedModel for kind "finetuned"

    def __repr__(self) -> str:
        return f"ComplexityClassifier(kind={self.kind!r}, version={self.version!r}, n_tiers={self.n_tiers})"

    # -- inputs ----------------------------------------------------------------------------------------

    def _encoder(self):
        from classifier.encoder import Encoder, EncoderError

        try:
            return Encoder.cached(self.encoder_name)
        except EncoderError as exc:
            raise ClassifierError(str(exc)) from exc

    def _inputs(self, texts: list[str], embeddings: np.ndarray | None = None) -> np.ndarray:
        if embeddings is None:
            embeddings = self._encoder().encode(texts)
        return np.hstack([embeddings.astype(np.float64), feature_matrix(texts).astype(np.float64)])

    # -- inference -------------------------------------------------------------------------------------

    def predict_proba(self, texts: Sequence[str], *, embeddings: np.ndarray | None = None) -> np.ndarray:
        """(n, n_tiers) probabilities, rows summing to 1. `embeddings` (n, dim) from the same encoder may be
        passed by callers that already computed them (the sklearn head only)."""
        if isinstance(texts, str):
            raise ClassifierError("predict_proba takes a list of strings, not one string")
        texts = list(texts)
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise ClassifierError(f"texts must all be str: item {bad[0]} is {type(texts[bad[0]]).__name__}")
        if not texts:
            return np.zeros((0, self.n_tiers))
        if self.kind == KIND_FINETUNED:
            proba = self._finetuned.predict_proba(texts)
        else:
            proba = self.head.proba(self._inputs(texts, embeddings))
        proba = np.clip(proba, 0.0, 1.0)
        return proba / proba.sum(axis=1, keepdims=True)

    # -- training --------------------------------------------------------------------------------------

    @classmethod
    def train(cls, texts: Sequence[str], labels: Sequence[int], n_tiers: int = 3, *,
              encoder_path: str | None = None, head: str = "auto", seed: int = 0,
              validation_fraction: float = 0.15, sample_weight: Sequence[float] | None = None,
              embeddings: np.ndarray | None = None) -> "ComplexityClassifier":
        """Train on texts labelled with the cheapest good tier. `embeddings` (n, dim) may be passed when the
        caller already has them from the same encoder (evaluation scripts), else they are computed."""
        start = time.perf_counter()
        texts, y, w = validate_training_input(texts, labels, n_tiers, sample_weight)
        if head not in HEADS:
            raise ClassifierError(f"head must be one of {HEADS}, got {head!r}")
        if not isinstance(validation_fraction, (int, float)) or not 0.0 <= validation_fraction < 0.5:
            raise ClassifierError(f"validation_fraction must be in [0, 0.5), got {validation_fraction!r}")
        from classifier.encoder import DEFAULT_ENCODER, EncoderError

        encoder = DEFAULT_ENCODER if encoder_path is None else str(encoder_path)
        tr, va = _split(y, validation_fraction, seed) if validation_fraction > 0 else (np.arange(len(y)), None)
        if va is not None and len(va) == 0:
            va = None
        options = {"head": head, "seed": int(seed), "validation_fraction": float(validation_fraction),
                   "encoder": encoder, "c_grid": list(C_GRID)}
        digest = hashlib.sha256()
        for t, label in zip(texts, y):
            digest.update(t.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00%d\x00" % label)
        if w is not None:
            digest.update(np.ascontiguousarray(w).tobytes())
        digest.update(json.dumps({**options, "n_tiers": int(n_tiers)}, sort_keys=True).encode())
        now = datetime.now(timezone.utc)
        version = f"clf-{now:%Y%m%d-%H%M}-{digest.hexdigest()[:6]}"
        common = dict(n_tiers=n_tiers, version=version, encoder=encoder, num_train_examples=len(texts),
                      created_at=now.isoformat(timespec="seconds"))

        candidates = []
        if head in ("auto", "sklearn"):
            shell = cls(kind=KIND_SKLEARN, head=None, metrics={}, options=options, **common)
            try:
                if embeddings is None:
                    embeddings = shell._encoder().encode(texts)
            except EncoderError as exc:
                raise ClassifierError(str(exc)) from exc
            x = shell._inputs(texts, np.asarray(embeddings))
            candidates.append(cls._train_sklearn(shell, x, y, w, tr, va, seed))
        if head == "finetune" or (head == "auto" and len(texts) <= FINETUNE_AUTO_MAX and va is not None):
            from classifier.finetune import train_finetuned

            model, metrics = train_finetuned(texts, y, w, n_tiers, tr, va, encoder=encoder, seed=seed)
            candidates.append(cls(kind=KIND_FINETUNED, head=None, metrics=metrics, options=options,
                                  finetuned=model, **common))
        best = min(candidates, key=lambda c: c.metrics.get("val_log_loss", float("inf")))
        best.metrics["candidates"] = {c.kind: c.metrics.get("val_log_loss") for c in candidates}
        best.metrics["train_seconds"] = round(time.perf_counter() - start, 2)
        return best

    @staticmethod
    def _train_sklearn(shell: "ComplexityClassifier", x: np.ndarray, y: np.ndarray, w: np.ndarray | None,
                       tr: np.ndarray, va: np.ndarray | None, seed: int) -> "ComplexityClassifier":
        n_tiers = shell.n_tiers
        wt = None if w is None else w[tr]
        c, cv = choose_c(x[tr], y[tr], wt, n_tiers, seed)
        metrics: dict[str, Any] = {"head": "logistic-regression", "C": c, "cv_log_loss": cv,
                                   "num_train": int(len(tr)), "num_val": 0 if va is None else int(len(va))}
        temperature = 1.0
        if va is not None:
            fitted = fit_linear_head(x[tr], y[tr], wt, n_tiers, c, seed)
            wv = None if w is None else w[va]
            logits = fitted.logits(x[va])
            present = np.isin(y[va], fitted.classes)
            if present.any():
                col = {int(k): i for i, k in enumerate(fitted.classes)}
                yv = np.array([col[int(k)] for k in y[va][present]])
                temperature = fit_temperature(logits[present], yv, None if wv is None else wv[present])
            fitted.temperature = temperature
            proba = fitted.proba(x[va])
            metrics.update(val_metrics(proba, y[va], wv))
            metrics["val_log_loss_uncalibrated"] = round(_log_loss(
                np.clip(LinearHead(fitted.mean, fitted.scale, fitted.coef, fitted.intercept, fitted.classes,
                                   n_tiers).proba(x[va]), 1e-12, 1), y[va], wv), 5)
        metrics["temperature"] = round(temperature, 5)
        final = fit_linear_head(x, y, w, n_tiers, c, seed)  # all the data, the validated C and temperature
        final.temperature = temperature
        shell.head = final
        shell.metrics = metrics
        return shell

    # -- persistence -----------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {"kind": self.kind, "format": FORMAT, "version": self.version, "n_tiers": self.n_tiers,
                "encoder": self.encoder_name, "feature_names": list(FEATURE_NAMES),
                "num_train_examples": self.num_train_examples, "created_at": self.created_at,
                "options": self.options, "metrics": self.metrics}

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.kind == KIND_FINETUNED:
            self._finetuned.save(folder)
        else:
            np.savez(folder / HEAD_NAME, **self.head.arrays())
        path = folder / CONFIG_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "ComplexityClassifier":
        folder = Path(folder)
        data = read_config(folder)
        kind = data.get("kind")
        if kind not in KINDS:
            raise ClassifierError(f"{folder / CONFIG_NAME} is a {kind!r} classifier, not one of {KINDS}")
        try:
            n_tiers = int(data["n_tiers"])
            if n_tiers < 2:
                raise ClassifierError(f"{folder / CONFIG_NAME}: n_tiers must be >= 2, got {n_tiers}")
            common = dict(n_tiers=n_tiers, kind=kind, version=str(data["version"]), encoder=str(data["encoder"]),
                          num_train_examples=int(data.get("num_train_examples", 0)),
                          metrics=dict(data.get("metrics") or {}), created_at=str(data.get("created_at", "")),
                          options=dict(data.get("options") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ClassifierError):
                raise
            raise ClassifierError(f"{folder / CONFIG_NAME} is missing or has a bad field: {exc}") from exc
        if kind == KIND_FINETUNED:
            from classifier.finetune import FinetunedModel

            try:
                model = FinetunedModel.load(folder, n_tiers)
            except Exception as exc:
                raise ClassifierError(f"cannot load the fine-tuned model in {folder}: {exc}") from exc
            return cls(head=None, finetuned=model, **common)
        try:
            with np.load(folder / HEAD_NAME, allow_pickle=False) as arrays:
                head = LinearHead.from_arrays(arrays, n_tiers)
        except (OSError, KeyError, ValueError) as exc:
            raise ClassifierError(f"cannot read {folder / HEAD_NAME}: {exc}") from exc
        if head.coef.shape[1] != head.mean.shape[0] or head.mean.shape != head.scale.shape:
            raise ClassifierError(f"{folder / HEAD_NAME} is inconsistent: coef {head.coef.shape}, mean "
                                  f"{head.mean.shape}, scale {head.scale.shape}")
        if len(head.classes) and (head.classes.max() >= n_tiers or head.classes.min() < 0):
            raise ClassifierError(f"{folder / HEAD_NAME} has classes {head.classes.tolist()} outside n_tiers={n_tiers}")
        return cls(head=head, **common)


def val_metrics(proba: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> dict[str, float]:
    m = {"val_log_loss": round(_log_loss(np.clip(proba, 1e-12, 1), y, w), 5),
         "val_accuracy": round(float(np.average(proba.argmax(axis=1) == y, weights=w)), 5)}
    if proba.shape[1] >= 2 and len(np.unique(y > 0)) == 2:
        from sklearn.metrics import roc_auc_score

        m["val_auc_not_small"] = round(float(roc_auc_score(y > 0, 1 - proba[:, 0], sample_weight=w)), 5)
    return m


def read_config(folder: Path) -> dict:
    path = Path(folder) / CONFIG_NAME
    if not Path(folder).is_dir():
        raise ClassifierError(f"classifier folder {folder} does not exist")
    if not path.is_file():
        raise ClassifierError(f"{folder} holds no {CONFIG_NAME}: not a classifier folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ClassifierError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ClassifierError(f"{path} must hold a JSON object")
    return data


def load_folder(folder: str | Path):
    """The classifier saved in `folder`: a HeuristicClassifier or a ComplexityClassifier, by `kind`."""
    from classifier.heuristic import KIND as HEURISTIC_KIND, HeuristicClassifier

    folder = Path(folder)
    data = read_config(folder)
    kind = data.get("kind")
    if kind == HEURISTIC_KIND:
        try:
            clf = HeuristicClassifier.load(folder)
        except (KeyError, TypeError, ValueError) as exc:
            raise ClassifierError(f"cannot load the heuristic classifier in {folder}: {exc}") from exc
        return clf
    if kind in KINDS:
        return ComplexityClassifier.load(folder)
    raise ClassifierError(f"{folder / CONFIG_NAME} has unknown kind {kind!r} (known: {HEURISTIC_KIND!r}, "
                          f"{', '.join(repr(k) for k in KINDS)})")
