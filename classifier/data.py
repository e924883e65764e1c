"""The routing data sets (see the data folder's README): loaders and label rules.

Files: `routellm_{gsm8k,mmlu}.{train,dev}.csv` (two tiers: weak_correct, strong_correct) and
`zeroeval_3tier.{train,dev}.csv` (three Llama-trio tiers, plus Qwen2.5 outcomes on the same questions).
The data folder is `--data-dir`, else `$AIO_ROUTING_DATA`, else `../shared/data/routing` next to the repo.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
ROUTELLM_SETS = ("gsm8k", "mmlu")
ZEROEVAL_TIERS = ("small", "medium", "large")
ZEROEVAL_COSTS = (0.0001, 0.0005, 0.003)  # USD per request: the design's tier prices

csv.field_size_limit(1 << 24)


def data_dir(path: str | os.PathLike | None = None) -> Path:
    if path is not None:
        return Path(path)
    env = os.environ.get("AIO_ROUTING_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data" / "routing"


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"routing data file {path} not found (set --data-dir or AIO_ROUTING_DATA)")
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class RoutingSet:
    name: str
    texts: list[str]
    correct: np.ndarray  # (n, n_tiers) 0/1 of the tiers that define the labels
    groups: list[str]  # task / subject, for statistics
    aux_correct: np.ndarray | None = None  # zeroeval: Qwen trio (nan where missing)

    @property
    def labels(self) -> np.ndarray:
        return cheapest_correct(self.correct)


def cheapest_correct(correct: np.ndarray) -> np.ndarray:
    """The cheapest correct tier per row; the smallest tier when none is (a larger one would not help)."""
    correct = np.asarray(correct) > 0.5
    return np.where(correct.any(axis=1), correct.argmax(axis=1), 0).astype(np.int64)


def load_routellm(name: str, split: str, folder: str | os.PathLike | None = None) -> RoutingSet:
    rows = _rows(data_dir(folder) / f"routellm_{name}.{split}.csv")
    correct = np.array([[float(r["weak_correct"]), float(r["strong_correct"])] for r in rows])
    groups = [r.get("subject") or name for r in rows]
    return RoutingSet(f"routellm_{name}", [r["prompt"] for r in rows], correct, groups)


def load_zeroeval(split: str, folder: str | os.PathLike | None = None) -> RoutingSet:
    rows = _rows(data_dir(folder) / f"zeroeval_3tier.{split}.csv")
    correct = np.array([[float(r[f"llama_{t}_correct"]) for t in ZEROEVAL_TIERS] for r in rows])
    aux = np.array([[float(r[f"qwen_{t}_correct"]) if r[f"qwen_{t}_correct"] != "" else np.nan
                     for t in ZEROEVAL_TIERS] for r in rows])
    return RoutingSet("zeroeval_3tier", [r["question"] for r in rows], correct, [r["task"] for r in rows], aux)
