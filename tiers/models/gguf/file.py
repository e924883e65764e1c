"""Opening a GGUF file and reading its key-value metadata; GGUFError for anything unreadable."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from tiers.models.config import UnsupportedModelError

# Large arrays are read on demand (tokenizer.py), not into the metadata dict.
BULK_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


class GGUFError(UnsupportedModelError):
    """A GGUF file this engine cannot load; the message names the file and the problem."""



@functools.cache
def reader_class() -> type:
    """gguf.GGUFReader, reading its fields from a plain ndarray view of the file's mapping: numpy's memmap subclass
    runs its __array_finalize__ on each of the ~10^5 slices that a tokenizer's token and merge arrays take, which made
    reading SmolLM2's header take 10 s. The same fields and tensors, as ndarrays over the same mapping."""
    from gguf import GGUFReader

    class Reader(GGUFReader):
        def _get(self, offset: int, dtype, count: int = 1, override_order=None) -> np.ndarray:
            plain = self.__dict__.get("_plain")
            if plain is None:  # the first call, in GGUFReader.__init__ just after it maps the file into self.data
                plain = self._plain = self.data.view(np.ndarray)
            dtype = np.dtype(dtype)
            count = int(count)
            arr = plain[offset:offset + dtype.itemsize * count].view(dtype)[:count]
            ordered = arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order)
            return arr if ordered == arr.dtype else arr.view(ordered)

    return Reader


def open_gguf(path: str | Path):
    """gguf.GGUFReader over the file, after checking that every tensor's data lies inside it."""
    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"no GGUF file at {path}")
    try:
        reader = reader_class()(path, "r")
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors... on a bad header
        raise GGUFError(f"{path} is not a readable GGUF file (truncated or corrupt?): {type(e).__name__}: {e}") from e
    size = path.stat().st_size
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size or t.data.size * t.data.itemsize != int(t.n_bytes):
            raise GGUFError(f"{path} is truncated: tensor {t.name!r} needs bytes up to {end}, the file has {size}")
    return reader


def read_metadata(reader) -> dict[str, Any]:
    """Every key-value pair except the tokenizer's large arrays (see BULK_KEYS)."""
    metadata: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key in BULK_KEYS:
            continue
        try:
            metadata[key] = f.contents()
        except Exception as e:
            raise GGUFError(f"unreadable metadata value {key!r}: {type(e).__name__}: {e}") from e
    return metadata


def string_array(reader, key: str) -> list[str] | None:
    f = reader.fields.get(key)
    if f is None:
        return None
    return [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]


def number_array(reader, key: str) -> list | None:
    f = reader.fields.get(key)
    if f is None:
        return None
    return np.concatenate([f.parts[i] for i in f.data]).tolist() if len(f.data) else []
