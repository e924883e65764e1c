"""The learned complexity classifier: sentence embedding ⊕ cheap signals → per-tier probabilities.

Label of a text = the index of the cheapest tier that answers it well, so P(tier t is good) = P(label <= t).

Heads:
- "sklearn-head": the frozen encoder's embedding (`classifier.encoder`) and the cheap signals
  (`classifier.features.feature_vector`), standardised, into a multinomial logistic regression
  (`classifier.linear_head`: C picked by stratified cross-validation log loss on the training part), calibrated by
  temperature scaling on the validation split (`classifier.calibration`). Stored as arrays (`head.npz`) and rebuilt
  with numpy: no pickle.
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
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from classifier.calibration import fit_temperature, log_loss, val_metrics
from classifier.errors import ClassifierError
from classifier.features import FEATURE_NAMES, feature_matrix
from classifier.knn_head import KnnHead
from classifier.linear_head import C_GRID, LinearHead, choose_c, fit_linear_head
from classifier.training_input import stratified_split, validate_training_input

CONFIG_NAME = "classifier.json"
HEAD_NAME = "head.npz"
FORMAT = 1
KIND_SKLEARN = "sklearn-head"
KIND_FINETUNED = "finetuned"
KINDS = (KIND_SKLEARN, KIND_FINETUNED)
HEADS = ("auto", "sklearn", "finetune")
FINETUNE_AUTO_MAX = 2_000  # head="auto" tries fine-tuning only up to this many texts (CPU time budget)
# The kNN head's share of the probabilities and its k: off by default, it lost to the logistic head alone in
# cross-validation (`python -m classifier.select_router`); `knn_weight=` turns it on.
KNN_WEIGHT, KNN_K = 0.0, 100


class ComplexityClassifier:
    """Per-tier probabilities for chat texts (see the module docstring)."""

    def __init__(self, *, n_tiers: int, kind: str, version: str, encoder: str, head: LinearHead | None,
                 num_train_examples: int, metrics: dict, created_at: str, options: dict,
                 finetuned: Any = None, knn: KnnHead | None = None, knn_weight: float = 0.0) -> None:
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
        self.knn, self.knn_weight = knn, float(knn_weight)  # the sklearn head's kNN half over the embeddings

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

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) unit-length sentence embeddings from this classifier's encoder."""
        return self._encoder().encode(list(texts))

    def predict_with_embeddings(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """(probabilities, embeddings) from one encoder pass; embeddings are None for a fine-tuned encoder."""
        if self.kind == KIND_FINETUNED:
            return self.predict_proba(texts), None
        embeddings = self.embed(list(texts)) if len(texts) else None
        return self.predict_proba(texts, embeddings=embeddings), embeddings

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
            proba = self._mix(self._inputs(texts, embeddings))
        proba = np.clip(proba, 0.0, 1.0)
        return proba / proba.sum(axis=1, keepdims=True)

    def _mix(self, x: np.ndarray, head: LinearHead | None = None, knn: KnnHead | None = None) -> np.ndarray:
        head, knn = head or self.head, knn or self.knn
        proba = head.proba(x)
        if knn is not None and self.knn_weight > 0:
            dim = x.shape[1] - len(FEATURE_NAMES)
            proba = (1 - self.knn_weight) * proba + self.knn_weight * knn.proba(x[:, :dim])
        return proba

    # -- training --------------------------------------------------------------------------------------

    @classmethod
    def train(cls, texts: Sequence[str], labels: Sequence[int], n_tiers: int = 3, *,
              encoder_path: str | None = None, head: str = "auto", seed: int = 0,
              validation_fraction: float = 0.15, sample_weight: Sequence[float] | None = None,
              embeddings: np.ndarray | None = None, knn_weight: float = KNN_WEIGHT,
              knn_k: int = KNN_K) -> "ComplexityClassifier":
        """Train on texts labelled with the cheapest good tier. `embeddings` (n, dim) may be passed when the
        caller already has them from the same encoder (evaluation scripts), else they are computed."""
        start = time.perf_counter()
        texts, y, w = validate_training_input(texts, labels, n_tiers, sample_weight)
        if head not in HEADS:
            raise ClassifierError(f"head must be one of {HEADS}, got {head!r}")
        if not isinstance(validation_fraction, (int, float)) or not 0.0 <= validation_fraction < 0.5:
            raise ClassifierError(f"validation_fraction must be in [0, 0.5), got {validation_fraction!r}")
        if not 0.0 <= float(knn_weight) <= 1.0 or int(knn_k) < 1:
            raise ClassifierError(f"knn_weight must be in [0, 1] and knn_k >= 1, got {knn_weight!r}, {knn_k!r}")
        from classifier.encoder import RECIPE_ENCODER, EncoderError

        encoder = RECIPE_ENCODER if encoder_path is None else str(encoder_path)
        tr, va = (np.arange(len(y)), None)
        if validation_fraction > 0:
            tr, va = stratified_split(y, validation_fraction, seed)
        if va is not None and len(va) == 0:
            va = None
        options = {"head": head, "seed": int(seed), "validation_fraction": float(validation_fraction),
                   "encoder": encoder, "c_grid": list(C_GRID), "knn_weight": float(knn_weight), "knn_k": int(knn_k)}
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
            shell = cls(kind=KIND_SKLEARN, head=None, metrics={}, options=options, knn_weight=knn_weight, **common)
            try:
                if embeddings is None:
                    embeddings = shell._encoder().encode(texts)
            except EncoderError as exc:
                raise ClassifierError(str(exc)) from exc
            x = shell._inputs(texts, np.asarray(embeddings))
            candidates.append(cls._train_sklearn(shell, x, y, w, tr, va, seed, int(knn_k)))
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
                       tr: np.ndarray, va: np.ndarray | None, seed: int, knn_k: int) -> "ComplexityClassifier":
        n_tiers = shell.n_tiers
        dim = x.shape[1] - len(FEATURE_NAMES)

        def knn_on(rows):
            if shell.knn_weight <= 0:
                return None
            return KnnHead.fit(x[rows, :dim], y[rows], None if w is None else w[rows], n_tiers, knn_k)

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
            proba = shell._mix(x[va], fitted, knn_on(tr))
            metrics.update(val_metrics(proba, y[va], wv))
            metrics["val_log_loss_uncalibrated"] = round(log_loss(
                np.clip(LinearHead(fitted.mean, fitted.scale, fitted.coef, fitted.intercept, fitted.classes,
                                   n_tiers).proba(x[va]), 1e-12, 1), y[va], wv), 5)
        metrics["temperature"] = round(temperature, 5)
        final = fit_linear_head(x, y, w, n_tiers, c, seed)  # all the data, the validated C and temperature
        final.temperature = temperature
        shell.head, shell.knn = final, knn_on(np.arange(len(y)))
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
            np.savez(folder / HEAD_NAME, **self.head.arrays(), **(self.knn.arrays() if self.knn is not None else {}))
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
                knn = KnnHead.from_arrays(arrays, n_tiers) if "knn_embeddings" in arrays.files else None
        except (OSError, KeyError, ValueError) as exc:
            raise ClassifierError(f"cannot read {folder / HEAD_NAME}: {exc}") from exc
        if head.coef.shape[1] != head.mean.shape[0] or head.mean.shape != head.scale.shape:
            raise ClassifierError(f"{folder / HEAD_NAME} is inconsistent: coef {head.coef.shape}, mean "
                                  f"{head.mean.shape}, scale {head.scale.shape}")
        if len(head.classes) and (head.classes.max() >= n_tiers or head.classes.min() < 0):
            raise ClassifierError(f"{folder / HEAD_NAME} has classes {head.classes.tolist()} outside n_tiers={n_tiers}")
        knn_weight = float(common["options"].get("knn_weight", 0.0)) if knn is not None else 0.0
        return cls(head=head, knn=knn, knn_weight=knn_weight, **common)


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
