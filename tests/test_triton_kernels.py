"""The Triton kernels equal the PyTorch reference (interpreter mode on CPU, real kernels on CUDA), and the
reference equals a dense, independent computation. The CPU cases are marked triton_interpreter: on a GPU machine
they run in a process of their own (tests/test_triton_interpreter.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES
from tests.attention_reference import paged_attention_reference, store_kv_cache_reference

triton = pytest.importorskip("triton")
from tiers.attention.triton_kv_store import store_kv_cache  # noqa: E402
from tiers.attention.triton_paged_attention import paged_attention  # noqa: E402

# The interpreter's bf16 arithmetic is wrong, so bf16 runs only on a real GPU.
DEVICE_DTYPES = [pytest.param(device, dtype, id=f"{device}-{str(dtype).removeprefix('torch.')}",
                              marks=[pytest.mark.triton_interpreter] if device == "cpu" else [])
                 for device in DEVICES
                 for dtype in ([torch.float32] if device == "cpu" else [torch.float32, torch.bfloat16])]

# (q_len, seq_len) per sequence; seq_len - q_len tokens are an already cached prefix.
CASES = {
    "decode": [(1, 5), (1, 17), (1, 40), (1, 1)],
    "prefill_no_prefix": [(23, 23), (7, 7)],
    "prefill_with_cached_prefix": [(10, 45), (16, 32)],
    "single_sequence_chunk": [(19, 40)],
    "verification_mixed": [(1, 30), (5, 37), (4, 20), (12, 50), (1, 64)],
}
HEADS = {"gqa": (8, 2), "mqa": (4, 1), "mha": (4, 4)}


def make_case(seqs: list[tuple[int, int]], num_heads: int, num_kv_heads: int, head_dim: int, device: str,
              dtype: torch.dtype, block_size: int = 16, seed: int = 0) -> dict:
    """Random caches and queries; each sequence gets shuffled (non-contiguous, non-monotonic) blocks, and its
    unused block-table entries point at other sequences' blocks, so reading them would show."""
    g = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-seq_len // block_size) for _, seq_len in seqs]
    num_blocks = sum(blocks_per_seq) + 3
    perm = torch.randperm(num_blocks, generator=g)
    tables = torch.randint(0, num_blocks, (len(seqs), max(blocks_per_seq) + 1), generator=g, dtype=torch.int32)
    used = 0
    for i, n in enumerate(blocks_per_seq):
        tables[i, :n] = perm[used:used + n]
        used += n
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = torch.randn(cache_shape, generator=g), torch.randn(cache_shape, generator=g)
    query = torch.randn(sum(q for q, _ in seqs), num_heads, head_dim, generator=g)
    q_lens = torch.tensor([q for q, _ in seqs], dtype=torch.int32)
    return dict(query=query.to(device, dtype), k_cache=k_cache.to(device, dtype), v_cache=v_cache.to(device, dtype),
                block_tables=tables.to(device), seq_lens=torch.tensor([s for _, s in seqs], dtype=torch.int32,
                                                                      device=device),
                query_start_loc=F.pad(q_lens.cumsum(0), (1, 0)).to(device, torch.int32),
                max_query_len=int(q_lens.max()), scale=head_dim ** -0.5)


def reference_for(case: dict) -> torch.Tensor:
    """The reference in fp32 on CPU, from the very values (e.g. bf16-rounded) the kernel sees."""
    return paged_attention_reference(
        case["query"].cpu().float(), case["k_cache"].cpu().float(), case["v_cache"].cpu().float(),
        case["block_tables"].cpu(), case["seq_lens"].cpu(), case["query_start_loc"].cpu(), case["scale"])


def run_kernel(case: dict, **kwargs) -> torch.Tensor:
    return paged_attention(case["query"], case["k_cache"], case["v_cache"], case["block_tables"], case["seq_lens"],
                           case["query_start_loc"], case["max_query_len"], case["scale"], **kwargs)


def assert_matches_reference(out: torch.Tensor, case: dict) -> None:
    assert out.dtype == case["query"].dtype and out.shape == case["query"].shape
    tol = dict(atol=1e-4, rtol=1e-4) if out.dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out.cpu().float(), reference_for(case), **tol)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("case_name", list(CASES))
@pytest.mark.parametrize("heads", list(HEADS))
def test_paged_attention_matches_reference(device, dtype, case_name, heads):
    case = make_case(CASES[case_name], *HEADS[heads], 32, device, dtype)
    assert_matches_reference(run_kernel(case), case)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_non_power_of_two_head_dim(device, dtype):
    case = make_case(CASES["verification_mixed"], 4, 2, 80, device, dtype, seed=3)
    assert_matches_reference(run_kernel(case), case)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("block_size", [8, 64])
def test_other_block_sizes_and_long_prefill(device, dtype, block_size):
    # A 70-token chunk switches the wrapper to its larger prefill query tile.
    case = make_case([(1, 9), (70, 90), (5, 33)], 4, 2, 32, device, dtype, block_size=block_size, seed=4)
    assert_matches_reference(run_kernel(case), case)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_strided_query_and_given_out(device, dtype):
    """The engine's query is a view into a fused QKV projection; out may be a preallocated buffer."""
    case = make_case(CASES["verification_mixed"], 8, 2, 32, device, dtype, seed=6)
    num_tokens = case["query"].shape[0]
    qkv = torch.randn(num_tokens, 12, 32, generator=torch.Generator().manual_seed(7)).to(device, dtype)
    qkv[:, :8] = case["query"]
    case["query"] = qkv[:, :8]
    out = torch.full((num_tokens, 8, 32), float("nan"), device=device, dtype=dtype)
    assert run_kernel(case, out=out) is out
    assert_matches_reference(out, case)


@pytest.mark.parametrize("heads", list(HEADS))
def test_reference_equals_dense_sdpa(heads):
    num_heads, num_kv_heads = HEADS[heads]
    seqs = CASES["verification_mixed"] + CASES["prefill_no_prefix"]
    case = make_case(seqs, num_heads, num_kv_heads, 32, "cpu", torch.float32, seed=5)
    ref = reference_for(case)
    starts, tables, group = case["query_start_loc"].tolist(), case["block_tables"], num_heads // num_kv_heads
    for i, (q_len, seq_len) in enumerate(seqs):
        blocks = tables[i, :-(-seq_len // 16)].long()
        k = case["k_cache"][blocks].flatten(0, 1)[:seq_len].transpose(0, 1).repeat_interleave(group, 0)
        v = case["v_cache"][blocks].flatten(0, 1)[:seq_len].transpose(0, 1).repeat_interleave(group, 0)
        mask = torch.ones(q_len, seq_len, dtype=torch.bool).tril(diagonal=seq_len - q_len)
        q = case["query"][starts[i]:starts[i + 1]].transpose(0, 1)
        dense = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=case["scale"]).transpose(0, 1)
        torch.testing.assert_close(ref[starts[i]:starts[i + 1]], dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_store_kv_cache_writes_exactly_the_given_slots(device, dtype):
    g = torch.Generator().manual_seed(1)
    num_blocks, block_size, num_kv_heads, head_dim = 6, 16, 2, 80

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device, dtype)

    k_cache, v_cache = rand(num_blocks, block_size, num_kv_heads, head_dim), rand(num_blocks, block_size,
                                                                                  num_kv_heads, head_dim)
    key, value = rand(5, num_kv_heads, head_dim), rand(5, num_kv_heads, head_dim)
    slots = torch.tensor([17, -1, 95, 0, 40], dtype=torch.int64, device=device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    store_kv_cache_reference(key, value, expected_k, expected_v, slots)

    store_kv_cache(key, value, k_cache, v_cache, slots)

    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    for cache, before, new in ((k_cache, k_before, key), (v_cache, v_before, value)):
        flat, flat_before = cache.flatten(0, 1), before.flatten(0, 1)
        written = {17: 0, 95: 2, 0: 3, 40: 4}  # slot -> token; token 1 (slot -1) goes nowhere
        for slot in range(num_blocks * block_size):
            expected = new[written[slot]] if slot in written else flat_before[slot]
            assert torch.equal(flat[slot], expected), f"slot {slot}"


def test_wrappers_reject_bad_inputs():
    case = make_case(CASES["decode"], 4, 2, 32, "cpu", torch.float32)
    q, kc, vc = case["query"], case["k_cache"], case["v_cache"]
    args = (case["block_tables"], case["seq_lens"], case["query_start_loc"], case["max_query_len"], 1.0)
    with pytest.raises(ValueError, match="query heads"):
        paged_attention(q[:, :3], kc, vc, *args)
    with pytest.raises(ValueError, match="power of two"):
        paged_attention(q, kc[:, :12], vc[:, :12], *args)
    with pytest.raises(ValueError, match="dtype"):
        paged_attention(q.double(), kc, vc, *args)
    with pytest.raises(ValueError, match="number of sequences"):
        paged_attention(q, kc, vc, case["block_tables"], case["seq_lens"][:2], *args[2:])
    with pytest.raises(ValueError, match="one slot per token"):
        store_kv_cache(q[:, :2], q[:, :2], kc, vc, torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="slot_mapping"):
        store_kv_cache(q[:, :2], q[:, :2], kc, vc, torch.zeros(q.shape[0]))


def test_without_the_interpreter_cpu_tensors_are_a_clear_error(monkeypatch, llama_path):
    """A process with Triton compiled (a GPU machine's) cannot launch the kernels on CPU tensors: the wrappers and
    the engine's backend choice say so instead of failing inside the launch."""
    from tiers import Engine, triton_device

    monkeypatch.setattr(triton_device, "interpreted", lambda kernel: False)  # as where TRITON_INTERPRET is unset
    case = make_case(CASES["decode"], 4, 2, 32, "cpu", torch.float32)
    with pytest.raises(ValueError, match="only in Triton's interpreter"):
        run_kernel(case)
    k = case["k_cache"][0, :2]
    with pytest.raises(ValueError, match="only in Triton's interpreter"):
        store_kv_cache(k, k, case["k_cache"], case["v_cache"], torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="attention_backend='triton' cannot run on cpu: .*interpreter"):
        Engine.from_pretrained(llama_path, max_model_len=64, attention_backend="triton")
    with pytest.raises(ValueError, match="not on meta"):
        run_kernel({**case, **{name: case[name].to("meta") for name in
                                ("query", "k_cache", "v_cache", "block_tables", "seq_lens", "query_start_loc")}})
