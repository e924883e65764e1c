"""The native library's float32 ops (tiers/native/ops.c, layer.c) against torch: RMSNorm, SiLU-and-mul, rotary
(bit for bit), paged attention (the torch backend's, to float32 rounding), and a whole decoder layer in one call
equal, bit for bit, to the same native ops called one by one from Python."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from test_engine_equality import engine_greedy, make_prompts
from tests.kquant_helpers import write_kquant_gguf
from tiers import Engine
from tiers.attention.backend import BatchLayout
from tiers.attention.native_backend import NativeCPUAttentionBackend
from tiers.attention.selector import get_attention_backend
from tiers.models.rotary import apply_rotary_one
from tiers.native import DEFAULT_FLAGS, build_library, native_library
from tiers.native.ops import argmax, argmax_prob, paged_attention, rmsnorm, rotary_, silu_mul

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(native_library() is None, reason="the native library does not build here")]


def test_rmsnorm_and_silu_mul_match_torch():
    torch.manual_seed(0)
    native = native_library()
    x, w = torch.randn(7, 96) * 3, torch.randn(96)
    want = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(rmsnorm(native, x, w, 1e-5), want, rtol=1e-6, atol=1e-6)
    gate_up = torch.randn(5, 2 * 40)
    gate, up = gate_up.split(40, dim=-1)
    torch.testing.assert_close(silu_mul(native, gate_up), F.silu(gate) * up, rtol=1e-6, atol=1e-6)


def test_argmax_prob_matches_torch():
    """A draft token and its confidence: torch.argmax (the first of equal maxima) and the softmax's probability of
    it, also for a row mostly -inf (a reduced draft head's) and lengths off the 16 lanes."""
    torch.manual_seed(0)
    x = torch.randn(4, 151936) * 4
    x[1, 3000:] = float("-inf")
    x[2, 11] = x[2, 700] = x[2].max() + 2  # a tie: the first wins
    x[3, :] = 0.0  # all equal: index 0, probability 1 / V
    token, prob = argmax_prob(native_library(), x)
    assert torch.equal(token, x.argmax(-1)) and token[2] == 11
    _assert_within_summation_bound(prob, x)
    for v in (1, 17, 33):
        y = torch.randn(2, v)
        token, prob = argmax_prob(native_library(), y)
        assert torch.equal(token, y.argmax(-1))
        _assert_within_summation_bound(prob, y)


def test_argmax_is_torchs_first_of_equal_maxima_and_first_nan():
    """torch.argmax's index on rows that reach every branch of the 64-lane scan: ties inside one lane and across
    lanes (the earlier wins), a tie in the tail, all equal, all -inf, -0.0 beside 0.0, NaNs (the first NaN, as
    torch counts NaN the largest), lengths around the lanes, and strided rows."""
    torch.manual_seed(0)
    native = native_library()
    for v in (1, 2, 17, 63, 64, 65, 127, 128, 129, 1000, 151936):
        x = torch.randn(12, v) * 3
        top = x.abs().max() + 1
        x[1, v // 2] = x[1, v - 1] = top  # a tie, the later one in the tail where there is one
        x[2, v - 1] = x[2, 0] = top
        x[3, :] = 0.5  # all equal
        x[4, :] = float("-inf")
        x[5, :] = -1.0
        x[5, v - 1] = 0.0
        x[5, v // 3] = -0.0
        x[6, v // 2] = float("nan")
        x[7, v - 1] = float("nan")
        x[7, v // 4] = float("nan")
        x[8, ::64] = top  # one per lane position 0: every lane's first
        x[9, 64 * (v // 128):] = top  # ties in several lanes, the first in a later block
        x[10, :] = float("-inf")
        x[10, v - 1] = -1e30
        assert torch.equal(argmax(native, x), x.argmax(-1)), v
        wide = torch.randn(3, v + 40)
        assert torch.equal(argmax(native, wide[:, 7:7 + v]), wide[:, 7:7 + v].argmax(-1))


def test_argmax_prob_over_kept_rows_is_the_whole_vocabularys():
    """A reduced draft head's kept rows with their token ids (in any order): the token is torch.argmax over the whole
    vocabulary with -inf elsewhere (the least id of equal maxima), the probability that row's softmax's."""
    torch.manual_seed(1)
    native = native_library()
    vocab = 5000
    for n in (3, 64, 65, 777):
        ids = torch.randperm(vocab)[:n].contiguous()
        values = torch.randn(4, n) * 4
        values[1, : n // 2] = values[1].max() + 1  # n // 2 equal maxima under ids in random order
        if n > 69:  # two equal maxima in one lane, the later under the smaller id
            values[0, 5] = values[0, 69] = values[0].max() + 1
            if ids[69] > ids[5]:
                ids[[5, 69]] = ids[[69, 5]]
        values[2, :] = 0.0
        values[3, n - 1] = float("nan")
        full = torch.full((4, vocab), float("-inf")).index_copy_(1, ids, values)
        token, prob = argmax_prob(native, values, ids)
        assert torch.equal(token, full.argmax(-1)), n
        _assert_within_summation_bound(prob[:3], full[:3])


def _assert_within_summation_bound(prob: torch.Tensor, logits: torch.Tensor) -> None:
    """Against the float64 softmax, not torch's float32 one (which sums in another order and, on an AVX2 AMD EPYC, was
    the further of the two from float64: 4.5e-5 against 2.2e-5). The bound is derived, not tuned: 16 partial sums of
    V / 16 terms each at most 1 (x - max <= 0), the 16 added, e^x within an ulp, a division: (V / 16 + 19) ulps."""
    want = torch.softmax(logits.double(), -1).max(-1).values
    bound = (logits.shape[-1] / 16 + 19) * 2.0 ** -24
    assert ((prob.double() - want).abs() / want).max() <= bound


def test_silu_mul_splits_rows_across_threads_with_the_same_bits():
    """A decode step's single row of 8,960 and a verification's 5 are cut in runs across the threads: each element's
    arithmetic is the same, so 1 and 2 threads give the same bits, and torch's values."""
    native = native_library()
    for rows, inter in ((1, 8960), (5, 4864), (3, 1000)):
        gate_up = torch.randn(rows, 2 * inter) * 4
        one = silu_mul(native, gate_up)
        torch.set_num_threads(2)
        try:
            two = silu_mul(native, gate_up)
        finally:
            torch.set_num_threads(1)
        assert torch.equal(one, two)
        gate, up = gate_up.split(inter, dim=-1)
        torch.testing.assert_close(two, F.silu(gate) * up, rtol=1e-6, atol=1e-6)


def test_silu_mul_gives_a_value_the_same_bits_in_a_lane_and_in_the_remainder():
    """8 lanes at a time, the rest one by one: e^x and the division are the same operations, so where an element
    falls does not change its bits (the same value in the vectors at positions 0-15 and in the remainder at 16-22
    of a row of 23), over the clamps of e^x too."""
    native = native_library()
    values = torch.tensor([0.0, -0.0, 1e-30, -3.5, 2.25, 17.0, -17.0, 88.0, -88.0, 90.0, -90.0, 1e4, -1e4, 0.7,
                           -1.3, 40.0])
    for seed in range(4):
        gate = values[torch.randperm(16, generator=torch.Generator().manual_seed(seed))]
        up = torch.randn(16, generator=torch.Generator().manual_seed(seed))
        gate_up = torch.cat([gate, gate[:7], up, up[:7]]).reshape(1, 46)
        out = silu_mul(native, gate_up)[0]
        assert torch.equal(out[:7], out[16:23])
        torch.testing.assert_close(out, F.silu(gate_up[0, :23]) * gate_up[0, 23:], rtol=1e-6, atol=1e-6)


def test_rotary_is_the_python_rotary_bit_for_bit():
    torch.manual_seed(1)
    t, heads, d = 6, 5, 64
    qkv = torch.randn(t, heads * d + 32)  # rows wider than the rotated heads (v after q and k)
    cos, ssin = torch.randn(t, 1, d), torch.randn(t, 1, d)
    want = apply_rotary_one(qkv[:, :heads * d].reshape(t, heads, d), cos, ssin)
    rest = qkv[:, heads * d:].clone()
    rotary_(native_library(), qkv, heads, d, cos, ssin)
    assert torch.equal(qkv[:, :heads * d].reshape(t, heads, d), want) and torch.equal(qkv[:, heads * d:], rest)


def test_paged_attention_matches_the_torch_backend():
    """A decode, a verification chunk and a prefill chunk over a cached prefix, in one step, on scattered blocks."""
    torch.manual_seed(2)
    h, hkv, d, bs, num_blocks = 6, 2, 32, 4, 16
    seq_lens, q_lens = [9, 7, 12], [1, 3, 5]
    block_ids = [[3, 0, 7], [5, 1], [2, 9, 4]]
    starts = [0, 1, 4, 9]
    slots = [block_ids[i][p // bs] * bs + p % bs for i in range(3) for p in range(seq_lens[i] - q_lens[i], seq_lens[i])]
    layout = BatchLayout(block_ids, seq_lens, starts, slots, bs)
    t = sum(q_lens)
    q, k, v = torch.randn(t, h, d), torch.randn(t, hkv, d), torch.randn(t, hkv, d)
    caches = [torch.randn(num_blocks, bs, hkv, d) for _ in range(2)]
    native_caches = [c.clone() for c in caches]
    cpu = torch.device("cpu")
    torch_backend = get_attention_backend("torch", cpu)
    want = torch_backend.forward(q, k, v, *caches, torch_backend.prepare_metadata(layout, [caches], cpu,
                                                                                 torch.float32), 0.125)
    backend = NativeCPUAttentionBackend(native_library())
    meta = backend.prepare_metadata(layout, [native_caches], cpu, torch.float32)
    got = paged_attention(backend.native, q, k, v, *native_caches, meta.slot_mapping, *meta.token_tables, 0.125)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(native_caches[0], caches[0]) and torch.equal(native_caches[1], caches[1])  # same KV stored


def test_token_tables_name_each_tokens_sequence_and_visible_context():
    """The C attention's per-token tables for a step mixing a decode, a verification of 3 rows and a prefill chunk
    that continues a cached prefix: each token's sequence, and its 1-based position in that sequence's context."""
    from tiers.attention.backend import BatchLayout
    from tiers.attention.native_backend import token_tables

    layout = BatchLayout([[0, 1], [2], [3, 4, 5]], seq_lens=[20, 9, 40], query_start_loc=[0, 1, 4, 10],
                         slot_mapping=list(range(10)), block_size=16)
    token_seq, visible = token_tables(layout)
    assert token_seq.dtype == visible.dtype == torch.int64
    assert token_seq.tolist() == [0, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert visible.tolist() == [20, 7, 8, 9, 35, 36, 37, 38, 39, 40]


def test_paged_attention_gives_the_same_bits_however_its_heads_are_split():
    """A decode token's query heads are split between the threads when its KV heads alone are too few tasks (6
    query heads over 2 KV heads: parts of 3, 2 + 1 or 1 + 1 + 1 for 1, 2 or 4 threads): every head's arithmetic is
    the same, so the same bits, and the torch backend's values."""
    torch.manual_seed(3)
    h, hkv, d, bs, num_blocks = 6, 2, 64, 4, 8
    layout = BatchLayout([[3, 0, 7, 5]], [13], [0, 1], [5 * bs], bs)
    q, k, v = torch.randn(1, h, d), torch.randn(1, hkv, d), torch.randn(1, hkv, d)
    caches = [torch.randn(num_blocks, bs, hkv, d) for _ in range(2)]
    cpu = torch.device("cpu")
    torch_backend = get_attention_backend("torch", cpu)
    want = torch_backend.forward(q, k, v, *[c.clone() for c in caches],
                                 torch_backend.prepare_metadata(layout, [caches], cpu, torch.float32), 0.125)
    backend = NativeCPUAttentionBackend(native_library())
    results = []
    for threads in (1, 2, 4):
        native_caches = [c.clone() for c in caches]
        meta = backend.prepare_metadata(layout, [native_caches], cpu, torch.float32)
        torch.set_num_threads(threads)
        try:
            results.append(paged_attention(backend.native, q, k, v, *native_caches, meta.slot_mapping,
                                           *meta.token_tables, 0.125))
        finally:
            torch.set_num_threads(1)
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])
    torch.testing.assert_close(results[0], want, rtol=1e-5, atol=1e-5)


def _attend(native, q, k, v, caches, slots, token_seq, visible, tables, threads=1):
    torch.set_num_threads(threads)
    try:
        return paged_attention(native, q, k, v, *caches, torch.tensor(slots), torch.tensor(token_seq),
                               torch.tensor(visible), tables, 0.125)
    finally:
        torch.set_num_threads(1)


BASE_FLAGS = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=c11")
VARIANTS = {"native": DEFAULT_FLAGS, "avx2": (*BASE_FLAGS, "-mavx2", "-mfma", "-mf16c"), "scalar": BASE_FLAGS}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("head_dim", [64, 40, 136])
def test_paged_attention_gives_a_token_the_same_bits_alone_or_with_others(head_dim, variant):
    """A verification's 5 tokens in one call, beside another sequence's decode token, give each token the bits it
    gets alone (a decode step), whatever the thread count: 300 positions span two key tiles, a head of 40 leaves a
    tail off the 16 lanes and one of 136 a tail past 128 (AVX-512 weighs V 64 floats of two queries at a time); on
    each instruction-set path the compiler can build here. The values are softmax(q K^T scale) V computed by torch."""
    if variant == "avx2" and "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    torch.manual_seed(4)
    h, hkv, d, bs, num_blocks = 6, 2, head_dim, 16, 48
    tables = torch.tensor([list(range(0, 40, 2)), list(range(1, 41, 2))], dtype=torch.int64)
    first, other = [295, 296, 297, 298, 299], 140  # positions: the run's five, the other sequence's one
    slot = lambda seq, p: int(tables[seq, p // bs]) * bs + p % bs  # noqa: E731
    caches = [torch.randn(num_blocks, bs, hkv, d) for _ in range(2)]
    q, k, v = torch.randn(6, h, d), torch.randn(6, hkv, d), torch.randn(6, hkv, d)
    slots = [slot(0, p) for p in first] + [slot(1, other)]
    token_seq, visible = [0] * 5 + [1], [p + 1 for p in first] + [other + 1]
    native = build_library(VARIANTS[variant])
    together = [_attend(native, q, k, v, [c.clone() for c in caches], slots, token_seq, visible, tables, threads)
                for threads in (1, 2, 3)]
    assert torch.equal(together[0], together[1]) and torch.equal(together[0], together[2])
    written = [c.clone() for c in caches]
    _attend(native, q, k, v, written, slots, token_seq, visible, tables)  # every token's k / v in the cache
    for i in range(6):
        for threads in (1, 2):
            alone = _attend(native, q[i:i + 1], k[i:i + 1], v[i:i + 1], written, slots[i:i + 1], token_seq[i:i + 1],
                            visible[i:i + 1], tables, threads)
            assert torch.equal(alone[0], together[0][i]), (i, threads)
    for i in range(6):  # softmax(q K^T / 8) V over the positions the token sees, K and V gathered by its table
        positions = torch.tensor([slot(token_seq[i], p) for p in range(visible[i])])
        keys, values = written[0].view(-1, hkv, d)[positions], written[1].view(-1, hkv, d)[positions]
        for head in range(h):
            weights = torch.softmax(keys[:, head // 3] @ q[i, head] * 0.125, dim=0)
            torch.testing.assert_close(together[0][i, head], weights @ values[:, head // 3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_dim", [64, 40, 136])
def test_paged_attention_gives_the_same_bits_on_the_native_and_avx2_paths(head_dim):
    """Every FMA path runs a lane's operations in the same order: the build for this CPU (AVX-512 where it has it)
    gives the AVX2 build's bits, a decode and a verification beside each other, over two key tiles."""
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    torch.manual_seed(6)
    h, hkv, d, bs, num_blocks = 6, 2, head_dim, 16, 48
    tables = torch.tensor([list(range(0, 40, 2)), list(range(1, 41, 2))], dtype=torch.int64)
    slot = lambda seq, p: int(tables[seq, p // bs]) * bs + p % bs  # noqa: E731
    caches = [torch.randn(num_blocks, bs, hkv, d) for _ in range(2)]
    q, k, v = torch.randn(6, h, d), torch.randn(6, hkv, d), torch.randn(6, hkv, d)
    slots = [slot(0, p) for p in (295, 296, 297, 298, 299)] + [slot(1, 140)]
    token_seq, visible = [0] * 5 + [1], [296, 297, 298, 299, 300, 141]
    native, avx2 = (_attend(build_library(VARIANTS[name]), q, k, v, [c.clone() for c in caches], slots, token_seq,
                            visible, tables, 2) for name in ("native", "avx2"))
    assert torch.equal(native, avx2)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_paged_attention_at_a_long_context_gives_the_same_bits_however_the_threads_share_it(variant):
    """Past 4 key tiles the threads split a decode's keys (each tile's softmax folded into the others in key order),
    a prefill chunk goes by runs of tokens and a short context by heads: a token gets the same bits in a 1,100-token
    prefill (5 tiles at its end), in a decode alone or beside another sequence's, on 1 to 4 threads; the values are
    softmax(q K^T scale) V computed by torch."""
    if variant == "avx2" and "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    torch.manual_seed(5)
    h, hkv, d, bs, num_blocks, length = 6, 2, 64, 16, 160, 1100
    tables = torch.tensor([list(range(0, 160, 2)), list(range(1, 161, 2))], dtype=torch.int64)
    slot = lambda seq, p: int(tables[seq, p // bs]) * bs + p % bs  # noqa: E731
    caches = [torch.randn(num_blocks, bs, hkv, d) for _ in range(2)]
    q, k, v = torch.randn(length, h, d), torch.randn(length, hkv, d), torch.randn(length, hkv, d)
    native = build_library(VARIANTS[variant])
    slots, visible = [slot(0, p) for p in range(length)], [p + 1 for p in range(length)]
    prefill = [_attend(native, q, k, v, [c.clone() for c in caches], slots, [0] * length, visible, tables, threads)
               for threads in (1, 2)]
    assert torch.equal(prefill[0], prefill[1])
    written = [c.clone() for c in caches]
    _attend(native, q, k, v, written, slots, [0] * length, visible, tables)
    for p in (0, 255, 256, 700, 1023, 1024, 1099):
        for threads in (1, 2, 3, 4):
            alone = _attend(native, q[p:p + 1], k[p:p + 1], v[p:p + 1], written, slots[p:p + 1], [0], [p + 1],
                            tables, threads)
            beside = _attend(native, torch.cat([q[p:p + 1], q[:1]]), torch.cat([k[p:p + 1], k[:1]]),
                             torch.cat([v[p:p + 1], v[:1]]), written, [slots[p], slot(1, 900)], [0, 1],
                             [p + 1, 901], tables, threads)
            assert torch.equal(alone[0], prefill[0][p]) and torch.equal(beside[0], prefill[0][p]), (p, threads)
        keys, values = written[0].view(-1, hkv, d)[slots[:p + 1]], written[1].view(-1, hkv, d)[slots[:p + 1]]
        for head in range(h):
            weights = torch.softmax(keys[:, head // 3] @ q[p, head] * 0.125, dim=0)
            torch.testing.assert_close(prefill[0][p, head], weights @ values[:, head // 3], rtol=1e-5, atol=1e-5)


def test_paged_attention_of_no_tokens_is_empty():
    """A step with no query tokens returns [0, H, D] and leaves the caches alone (the threads' share of no runs
    divided by zero before)."""
    caches = [torch.randn(4, 16, 2, 64) for _ in range(2)]
    before = [c.clone() for c in caches]
    empty = torch.empty(0, dtype=torch.int64)
    out = paged_attention(native_library(), torch.empty(0, 6, 64), torch.empty(0, 2, 64), torch.empty(0, 2, 64),
                          *caches, empty, empty, empty, torch.zeros(1, 4, dtype=torch.int64), 0.125)
    assert out.shape == (0, 6, 64)
    assert torch.equal(caches[0], before[0]) and torch.equal(caches[1], before[1])


def test_one_call_layer_equals_the_native_ops_one_by_one(llama_path):
    engine = Engine.from_pretrained(llama_path, quantization="int4", quantization_group_size=32, max_model_len=128)
    layers = engine.runner.model.layers
    assert all(layer.native_layer is not None for layer in layers)
    prompts = make_prompts(engine.model_config.vocab_size)
    fused = engine_greedy(engine, prompts)
    for layer in layers:
        layer.native_layer = None  # the Python layer, each op still native
    assert engine_greedy(engine, prompts) == fused


def test_the_decoder_stack_in_one_call_equals_the_layers_one_by_one(llama_path, monkeypatch):
    from tiers.native.layer import NativeStack

    engine = Engine.from_pretrained(llama_path, quantization="int4", quantization_group_size=32, max_model_len=128)
    model = engine.runner.model
    assert model.native_stack is not None
    calls = []
    forward = NativeStack.forward
    monkeypatch.setattr(NativeStack, "forward", lambda self, *a: calls.append(1) or forward(self, *a))
    prompts = make_prompts(engine.model_config.vocab_size)
    stacked = engine_greedy(engine, prompts)
    assert calls  # the steps ran as one call
    model.native_stack = None  # one call per layer
    assert engine_greedy(engine, prompts) == stacked


def test_the_stack_takes_the_rows_its_layers_take_after_the_dense_path_is_switched(llama_path):
    """The stack runs a step when every layer would: a projection's dense path switched on the loaded weights (the
    quantization benchmark's serving comparison does) moves the limit at once."""
    engine = Engine.from_pretrained(llama_path, quantization="int4", quantization_group_size=32, max_model_len=128)
    model = engine.runner.model
    projections = [p for layer in model.native_stack.layers for p in layer.projections]
    for limit, rows, runs in ((4, 3, True), (4, 4, False), (None, 1000, True), (8, 8, False)):
        for p in projections:
            p.dense_min_rows = limit
        assert model.native_stack.runs(rows) is runs, (limit, rows)
        assert all(layer.runs(rows) is runs for layer in model.native_stack.layers)


def test_a_position_past_the_rotary_table_fails_its_request_clearly(llama_path):
    """The one-call stack looks the rotary rows up itself: a position past the table is refused, not read."""
    from tiers.engine.errors import RequestFailedError

    engine = Engine.from_pretrained(llama_path, quantization="int4", quantization_group_size=32, max_model_len=128)
    rotary = engine.runner.model.rotary
    rotary.cos, rotary.signed_sin = rotary.cos[:4].clone(), rotary.signed_sin[:4].clone()
    with pytest.raises(RequestFailedError, match="rotary table"):
        engine_greedy(engine, [[1, 2, 3, 4, 5, 6]])


def test_the_stack_keeps_each_kv_cache_lists_addresses_until_its_cache_is_gone():
    """The layers' cache addresses are built once per KV cache list (a drafting model steps with two), rebuilt for
    a new list, and forgotten when the cache is freed (a draft's cache must not live on in the model it borrows)."""
    import gc

    from tiers.native.layer import NativeStack

    stack = NativeStack([])
    stack.layers = [None, None]  # two layers' worth of caches; no layer struct is read here

    def caches() -> list[tuple[torch.Tensor, torch.Tensor]]:
        k, v = torch.zeros(2, 8), torch.zeros(2, 8)
        return [(k[0], v[0]), (k[1], v[1])]

    a, b = caches(), caches()
    ka, va = stack._kv_pointers(a)
    assert list(ka) == [t.data_ptr() for t, _ in a] and list(va) == [t.data_ptr() for _, t in a]
    kb, _ = stack._kv_pointers(b)
    assert list(kb) == [t.data_ptr() for t, _ in b]
    assert stack._kv_pointers(a)[0] is ka  # not rebuilt
    assert len(stack._kv_arrays) == 2
    del a, ka, va
    gc.collect()
    assert len(stack._kv_arrays) == 1


@pytest.mark.parametrize("weights", ["int4", "gguf blocks"])
def test_a_qkv_bias_and_gguf_blocks_take_the_one_call_layer(checkpoint_dir, tmp_path, weights):
    """Qwen2's q/k/v bias is added inside the one-call layer, and GGUF K-quant / Q5_0 / Q8_0 projections (cpu_kq,
    several block types in one fused qkv) run there too: the same tokens as the Python layer, each op native."""
    if weights == "int4":
        engine = Engine.from_pretrained(checkpoint_dir("qwen2"), quantization="int4", quantization_group_size=32,
                                        max_model_len=256)
    else:
        write_kquant_gguf(tmp_path / "kq.gguf")
        engine = Engine.from_pretrained(tmp_path / "kq.gguf", quantization="auto", max_model_len=256)
    layers = engine.runner.model.layers
    assert all(layer.native_layer is not None for layer in layers)
    assert all(layer.self_attn.qkv_proj.bias is not None for layer in layers)
    prompts = make_prompts(engine.model_config.vocab_size)[:4]
    fused = engine_greedy(engine, prompts)
    for layer in layers:
        layer.native_layer = None
    assert engine_greedy(engine, prompts) == fused
