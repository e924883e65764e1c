"""The split-KV decode path (tiers/attention/triton_decode_attention.py) equals the reference and the unified
kernel, its idle rows (length 0) give zeros, and its split count depends on shapes only."""
from __future__ import annotations

import pytest
import torch

from conftest import TRITON_DEVICES
from test_triton_kernels import DEVICE_DTYPES, assert_matches_reference, make_case, run_kernel

pytest.importorskip("triton")
from tiers.attention import triton_decode_attention as tda  # noqa: E402

# Slices are whole tiles (cdiv(length, splits) rounded up to 32 keys): lengths 32 and 64 end on a slice boundary
# for 1, 3 and 16 splits; 1, 31, 33, 70 and 100 do not, and 70 with 3 splits fills three slices.
# Block size 16: 7 blocks for the longest plus make_case's spare one, 128 keys per table row.
DECODE_LENS = [1, 31, 32, 33, 64, 70, 100]
GROUPS = {"group1": (4, 4), "group4": (8, 2), "group8": (8, 1)}


def decode_case(seq_lens: list[int], heads: tuple[int, int], head_dim: int, device: str, dtype: torch.dtype,
                block_size: int = 16, seed: int = 0) -> dict:
    return make_case([(1, n) for n in seq_lens], *heads, head_dim, device, dtype, block_size=block_size, seed=seed)


def assert_split_matches(case: dict, num_splits: int | None) -> torch.Tensor:
    out = run_kernel(case, split_kv=True, num_splits=num_splits)
    assert_matches_reference(out, case)
    unified = run_kernel(case, split_kv=False)
    tol = dict(atol=1e-4, rtol=1e-4) if out.dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out.float(), unified.float(), **tol)
    return out


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("num_splits", [1, 3, 16])
@pytest.mark.parametrize("group", list(GROUPS))
def test_split_kv_matches_reference_and_unified_kernel(device, dtype, num_splits, group):
    assert_split_matches(decode_case(DECODE_LENS, GROUPS[group], 64, device, dtype), num_splits)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("head_dim", [128, 80])
@pytest.mark.parametrize("block_size", [16, 32])
def test_split_kv_head_dims_and_block_sizes(device, dtype, head_dim, block_size):
    case = decode_case([1, 45, 96, 130], GROUPS["group4"], head_dim, device, dtype, block_size=block_size, seed=1)
    assert_split_matches(case, 3)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_picked_splits_match_and_are_a_function_of_shapes(device, dtype, monkeypatch):
    """One sequence of one KV head and a 320-key table (20 blocks): the picker cuts it in two slices of 160 keys;
    lengths 300, 5 and 0 on the same shapes launch the same grid."""
    grids = []
    kernel = tda._split_kernel

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return kernel[grid]

    monkeypatch.setattr(tda, "_split_kernel", Spy())
    outs = []
    for seq_len in (300, 5, 0):
        case = decode_case([300], (4, 1), 32, device, dtype, seed=2)
        case["seq_lens"].fill_(seq_len)
        outs.append(run_kernel(case, split_kv=True))
        if seq_len:
            assert_matches_reference(outs[-1], case)
    assert grids[0][2] > 1 and grids == [grids[0]] * 3
    assert torch.count_nonzero(outs[-1]) == 0


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_idle_rows_give_zeros_and_strided_query_works(device, dtype):
    """A CUDA graph's padding rows have length 0; the engine's query is a view into the fused QKV projection and
    out may be a preallocated buffer."""
    seq_lens = [40, 0, 1, 0, 77]
    case = decode_case(seq_lens, GROUPS["group4"], 32, device, dtype, seed=3)
    case["block_tables"][[1, 3]] = 0
    num_seqs = len(seq_lens)
    qkv = torch.randn(num_seqs, 12, 32, generator=torch.Generator().manual_seed(4)).to(device, dtype)
    qkv[:, :8] = case["query"]
    case["query"] = qkv[:, :8]
    out = torch.full((num_seqs, 8, 32), float("nan"), device=device, dtype=dtype)
    assert run_kernel(case, split_kv=True, num_splits=3, out=out) is out
    assert not out.isnan().any()
    assert torch.count_nonzero(out[[1, 3]]) == 0
    assert_matches_reference(out, case)


def test_split_count_rule():
    sms, llama_kv_heads = 132, 8
    # Batch 1: enough slices for PROGRAMS_PER_SM programs per SM.
    assert tda.pick_num_splits(1, llama_kv_heads, sms) == 33
    # A batch that already gives every SM two programs: no split.
    assert tda.pick_num_splits(33, llama_kv_heads, sms) == 1
    # Never more than MAX_SPLITS.
    assert tda.pick_num_splits(1, 1, 1 << 20) == tda.MAX_SPLITS
    counts = [tda.pick_num_splits(n, llama_kv_heads, sms) for n in range(1, 40)]
    assert counts == sorted(counts, reverse=True) and counts[-1] == 1


@pytest.mark.triton_interpreter  # CPU tensors: on a GPU machine, in the interpreter's process
def test_split_kv_rejects_bad_inputs():
    case = make_case([(1, 5), (3, 9)], 4, 2, 32, "cpu", torch.float32)
    case["max_query_len"] = 3
    with pytest.raises(ValueError, match="decode-only"):
        run_kernel(case, split_kv=True)
    with pytest.raises(ValueError, match="num_splits"):
        run_kernel(make_case([(1, 5)], 4, 2, 32, "cpu", torch.float32), split_kv=True, num_splits=0)
    with pytest.raises(ValueError, match="program"):
        tda.pick_num_splits(0, 8, 132)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_engine_gives_the_unified_kernels_tokens(llama_path, device, monkeypatch):
    """Decode steps through the split path, eagerly and in padded graph steps (rows of length 0), give the tokens of
    the unified kernel's eager run. With 64 SMs pretended, a batch of one to four gets 16 to 64 splits, so slices
    are one tile and contexts of 33 to 43 tokens span two."""
    from tiers import Engine

    monkeypatch.setattr(tda, "INTERPRETER_SM_COUNT", 64)

    def generate(graphs: bool, split: bool) -> list[list[int]]:
        from tiers.engine.sampling_params import SamplingParams

        monkeypatch.setattr(tda, "FORCE_SPLIT_KV", split)
        engine = Engine.from_pretrained(llama_path, device=device, dtype="float32", max_model_len=96,
                                        attention_backend="triton", cuda_graph_sizes=(1, 2, 4),
                                        enforce_eager=not graphs)
        if graphs and device == "cpu":
            engine.runner.capture_cuda_graphs(engine.config, engine.max_model_len, capture=False)
        prompts = [[5 + i, 9, 17 + 3 * i] * (8 + i) for i in range(3)]
        params = [SamplingParams(max_tokens=4 + 5 * i, temperature=0.0, ignore_eos=True) for i in range(3)]
        return [o.token_ids for o in engine.generate(prompts, params)]

    launches = []
    monkeypatch.setattr(tda, "split_kv_decode", lambda *a, _f=tda.split_kv_decode: launches.append(1) or _f(*a))
    expected = generate(graphs=False, split=False)
    assert not launches
    assert generate(graphs=False, split=True) == expected
    assert generate(graphs=True, split=True) == expected
    assert launches
