"""A GGUF file is untrusted input (the family demo's files are third-party repackagings; any configured path can be
anything): a truncated file or one with corrupted header, metadata or tensor-info bytes is refused with GGUFError,
never another exception. Seeded byte flips and truncations of a small valid file.

Not covered here, and not checked by the reader: non-finite values (a NaN scale loads and yields NaN logits), and
some well-formed but absurd metadata: tried by hand, a feed_forward_length of 1e9 is refused (the tensors' shapes
disagree) and a context_length of 1e9 loads (max_model_len caps it), but a block_count of 1e9 is not checked
against the tensors present and the engine was still building after 120 s. The family's files are pinned by
SHA-256 before they are read (aio.part_wheels)."""
from __future__ import annotations

import random

import pytest

from tests.quant_helpers import write_gguf
from tiers.models.gguf import load_gguf
from tiers.models.gguf.file import GGUFError


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "valid.gguf"
    write_gguf(path, hidden=64, heads=4, kv_heads=2, ffn=128, scale=0.3)
    load_gguf(path)
    return path.read_bytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a flipped scale byte can make a NaN (loaded: see above)
@pytest.mark.parametrize("seed", range(8))
def test_corrupt_or_truncated_files_are_refused_with_gguf_error(valid, tmp_path, seed):
    rng = random.Random(seed)
    refused = 0
    for case in range(12):
        data = bytearray(valid)
        if case % 2:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 4)):  # the header, metadata and tensor infos are the first few KB
                data[rng.randrange(min(len(data), 6000))] = rng.randrange(256)
        path = tmp_path / f"bad-{case}.gguf"
        path.write_bytes(bytes(data))
        try:
            load_gguf(path)
        except GGUFError:  # (most messages name the file; an unexpected tensor name's does not)
            refused += 1
    assert refused >= 6  # every truncation at least
