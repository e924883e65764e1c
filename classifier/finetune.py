"""The fine-tuned head: the encoder trained end to end with a classification layer
(`AutoModelForSequenceClassification`), weighted cross-entropy, AdamW, linear decay, `EPOCHS` epochs over the
training part, then temperature scaling on the validation split. Saved with `save_pretrained` in `model/`
(about 90 MB for MiniLM-L6: not for the shipped default) and `head.npz` (the temperature).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from classifier.calibration import fit_temperature, softmax, val_metrics

EPOCHS = 2
LEARNING_RATE = 5e-5
BATCH_SIZE = 16
MAX_TOKENS = 128  # training cost grows with length; the sklearn head keeps 256
MODEL_DIR = "model"


class FinetunedModel:
    def __init__(self, model: Any, tokenizer: Any, n_tiers: int, temperature: float = 1.0) -> None:
        self.model, self.tokenizer, self.n_tiers, self.temperature = model, tokenizer, n_tiers, float(temperature)

    def logits(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        import torch

        self.model.eval()
        out = np.zeros((len(texts), self.n_tiers))
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=MAX_TOKENS, return_tensors="pt")
                out[idx] = self.model(**batch).logits.double().numpy()
        return out

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return softmax(self.logits(texts) / self.temperature)

    def save(self, folder: Path) -> None:
        self.model.save_pretrained(folder / MODEL_DIR)
        self.tokenizer.save_pretrained(folder / MODEL_DIR)
        np.savez(folder / "head.npz", temperature=np.array(self.temperature))

    @classmethod
    def load(cls, folder: Path, n_tiers: int) -> "FinetunedModel":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        model = AutoModelForSequenceClassification.from_pretrained(folder / MODEL_DIR)
        if model.config.num_labels != n_tiers:
            raise ValueError(f"the model has {model.config.num_labels} labels, classifier.json says {n_tiers}")
        with np.load(folder / "head.npz", allow_pickle=False) as arrays:
            temperature = float(arrays["temperature"])
        return cls(model, AutoTokenizer.from_pretrained(folder / MODEL_DIR), n_tiers, temperature)


def train_finetuned(texts: list[str], y: np.ndarray, w: np.ndarray | None, n_tiers: int, tr: np.ndarray,
                    va: np.ndarray | None, *, encoder: str, seed: int = 0, epochs: int = EPOCHS
                    ) -> tuple[FinetunedModel, dict]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from classifier.encoder import resolve_encoder_path

    torch.manual_seed(seed)
    path = resolve_encoder_path(encoder)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=n_tiers)
    weights = np.ones(len(y)) if w is None else np.asarray(w, dtype=np.float64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    steps = epochs * math.ceil(len(tr) / BATCH_SIZE)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / max(1, steps)))
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        perm = rng.permutation(tr)
        for start in range(0, len(perm), BATCH_SIZE):
            idx = perm[start:start + BATCH_SIZE]
            batch = tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=MAX_TOKENS,
                              return_tensors="pt")
            logits = model(**batch).logits
            loss_each = torch.nn.functional.cross_entropy(logits, torch.as_tensor(y[idx]), reduction="none")
            bw = torch.as_tensor(weights[idx], dtype=loss_each.dtype)
            loss = (loss_each * bw).sum() / bw.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
    model.eval()
    result = FinetunedModel(model, tokenizer, n_tiers)
    metrics: dict[str, Any] = {"head": "finetuned", "epochs": epochs, "lr": LEARNING_RATE,
                               "num_train": int(len(tr)), "num_val": 0 if va is None else int(len(va))}
    if va is not None and len(va):
        logits = result.logits([texts[i] for i in va])
        result.temperature = fit_temperature(logits, y[va], None if w is None else weights[va])
        metrics.update(val_metrics(result.predict_proba([texts[i] for i in va]), y[va],
                                   None if w is None else weights[va]))
    metrics["temperature"] = round(result.temperature, 5)
    return result, metrics
