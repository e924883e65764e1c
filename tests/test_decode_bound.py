"""benchmarks.decode_bound's arithmetic on a tiny random K-quant GGUF: the bytes a decode step reads (our loaded
model and the file as stored), each kernel group's bytes per call = the layer's weight bytes, GB/s and share from
its time. No timing is asserted: the figures are the benchmark's."""
from __future__ import annotations

import pytest
import torch

from benchmarks import decode_bound
from tests.kquant_helpers import write_kquant_gguf
from tiers.native import native_library
from tiers.quantization.linear import QuantizedLinear

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(native_library() is None, reason="the native kernel does not build here")]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from tiers import Engine

    path = tmp_path_factory.mktemp("bound") / "qwen2-kquant.gguf"
    write_kquant_gguf(path)
    engine = Engine.from_pretrained(path, quantization="auto", kv_cache_bytes=8 << 20)
    engine.path = path
    yield engine
    engine.close()


def test_the_step_reads_every_weight_and_one_embedding_row(engine):
    import gguf

    model = engine.runner.model
    reader = gguf.GGUFReader(str(engine.path))
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    file_total = sum(int(t.n_bytes) for t in reader.tensors)
    row = int(embd.n_bytes) // int(embd.shape[-1])
    assert decode_bound.gguf_step_bytes(engine.path) == file_total - int(embd.n_bytes) + row
    embed_bytes = sum(b.numel() * b.element_size() for b in model.embed_tokens.buffers())
    everything = sum(t.numel() * t.element_size() for n, t in list(model.named_parameters())
                     + list(model.named_buffers()) if not n.startswith("rotary."))
    vocab = engine.model_config.vocab_size
    assert decode_bound.step_weight_bytes(model) == everything - embed_bytes + embed_bytes // vocab
    # ours holds the file's blocks as stored (f32 norms and biases alike)
    assert decode_bound.step_weight_bytes(model) == decode_bound.gguf_step_bytes(engine.path)


def test_each_kernel_group_counts_its_layers_weight_bytes(engine):
    model = engine.runner.model
    rows = decode_bound.kernel_breakdown(model, threads=1, read_gb_s=10.0, rows=(1, 3), kernel_bytes=1 << 20,
                                         repeats=1)
    projections = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    assert sum(r["layers"] for r in rows) == len(projections)
    weights = sum(sum(rows_.numel() for _, rows_ in m.kq.parts) for m in projections)
    assert sum(r["bytes"] * r["layers"] for r in rows) == weights
    for r in rows:
        assert r["copies"] * (r["bytes"] * r["layers"]) >= (1 << 20) or r["copies"] == r["layers"]
        assert r["gb_s"] == pytest.approx(r["bytes"] / r["us"] / 1e3)
        assert r["share"] == pytest.approx(r["gb_s"] / 10.0)
        assert r["ms_per_token"] == pytest.approx(r["us"] * r["layers"] / 1e3)
        assert r["cost_m3_vs_m1"] == pytest.approx(r["us_m3"] / r["us"])
        assert r["cached_gb_s"] > 0 and r["cached_gb_s_m3"] > 0  # every projection here runs the GGUF blocks
    kinds = {(r["kind"], r["types"]) for r in rows}
    assert ("qkv_proj", "Q4_K_R+Q6_K_R") in kinds and ("lm_head", "Q6_K_R") in kinds  # repacked at load
    assert decode_bound.bound_row(2_000_000, 10.0, 40.0) == {
        "step_weight_bytes": 2_000_000, "weight_gb_s": 0.02, "share_of_read_bw": 0.0005}


def test_the_cached_slice_is_the_first_rows_of_each_part(engine):
    """The in-cache timing runs the same kernel on each part's first rows: its outputs are the full call's columns
    of those rows, bit for bit (a row's result does not depend on the rows beside it)."""
    from tiers.quantization import kquant

    model = engine.runner.model
    module = next(m for m in model.modules() if isinstance(m, QuantizedLinear) and len(m.kq.parts) == 2)
    parts = module.kq.parts
    call, nbytes = decode_bound._cached(module, max_bytes=module.kq.nbytes // 2)
    keep = [min(rows.shape[0], max(16, rows.shape[0] // 2 // 16 * 16)) for _, rows in parts]
    assert nbytes == sum(n * rows.shape[1] for n, (_, rows) in zip(keep, parts)) < module.kq.nbytes
    x = torch.randn(3, module.in_features)
    got = torch.full((3, sum(keep)), float("nan"))
    assert call(x, got) > 0
    full = kquant.gemm(module.native, x, module.kq)
    starts = [0, parts[0][1].shape[0]]
    assert torch.equal(got, torch.cat([full[:, start:start + n] for start, n in zip(starts, keep)], dim=1))


def test_kernel_calls_run_each_weight_in_c():
    """benchmarks.kernel_calls' pass calls the kernel on every weight in order, the last call's product left in out;
    weights of another shape or block types are refused."""
    from benchmarks.kernel_calls import kq_calls
    from tiers.quantization import kquant

    native = native_library()
    weights = [kquant.repack(native, kquant.quantize(torch.randn(48, 256) * 0.1, "Q5_0"), in_place=True)
               for _ in range(3)]
    x, out = torch.randn(2, 256), torch.full((2, 48), float("nan"))
    assert kq_calls(native, weights)(x, out) > 0
    assert torch.equal(out, kquant.gemm(native, x, weights[-1]))
    assert not torch.equal(out, kquant.gemm(native, x, weights[0]))
    other = kquant.repack(native, kquant.quantize(torch.randn(32, 256), "Q5_0"), in_place=True)
    with pytest.raises(ValueError, match="shape and block types"):
        kq_calls(native, [weights[0], other])
    with pytest.raises(ValueError, match="features"):
        kq_calls(native, weights)(torch.randn(2, 128))


def test_cpu_and_read_bandwidth_are_reported():
    info = decode_bound.cpu_info()
    assert info["model"] and info["native_isa"] in ("avx512vnni", "avx2", "scalar") and info["k_blocked_from"] > 0
    assert set(info["isa"]) <= set(decode_bound.ISA_FLAGS)
    bw = decode_bound.read_bandwidth(1, nbytes=1 << 22, repeats=2)
    readers = {name: bw[f"{name}_gb_s"] for name in decode_bound.READERS}
    assert all(gb_s > 0 for gb_s in readers.values())  # the native library's two loops and torch's sum all ran
    assert bw["read_gb_s"] == max(bw["runs"]) == max(readers.values()) == readers[bw["source"]]


def test_passes_before_and_after_merge_into_the_fastest_and_each_readers_best():
    from benchmarks import decode_bound

    before = {"read_gb_s": 20.0, "source": "torch_sum", "native_gb_s": 18.0, "native_no_prefetch_gb_s": None,
              "torch_sum_gb_s": 20.0}
    after = {"read_gb_s": 22.0, "source": "native", "native_gb_s": 22.0, "native_no_prefetch_gb_s": None,
             "torch_sum_gb_s": 19.0}
    merged = decode_bound.merge_bandwidth([before, after])
    assert merged == {"read_gb_s": 22.0, "source": "native", "before_after": [20.0, 22.0], "native_gb_s": 22.0,
                      "native_no_prefetch_gb_s": None, "torch_sum_gb_s": 20.0}
    assert decode_bound.describe_readers(merged) == "the native read loop 22.0, torch sum 20.0"
    assert decode_bound.describe_readers(merged, "; ", skip="native") == "torch sum 20.0"


def test_the_native_read_loop_reads_every_byte():
    """aio_read_bytes returns the xor of every 64-bit word it was given, whatever the thread count: it cannot skip
    the bytes whose reading it times."""
    import functools
    import operator

    from tiers.native import native_library

    lib = native_library().lib
    words = torch.randint(-2**62, 2**62, (3 * 4096 + 48,), dtype=torch.int64, generator=torch.Generator().manual_seed(0))
    expected = functools.reduce(operator.xor, words.tolist()) % 2**64
    for prefetch in (0, 1):
        for threads in (1, 2, 3):
            assert lib.aio_read_bytes(words.data_ptr(), words.numel() * 8, threads, prefetch) == expected
    words[-1] ^= 1
    assert lib.aio_read_bytes(words.data_ptr(), words.numel() * 8, 2, 0) == expected ^ 1
    assert lib.aio_read_bytes(words.data_ptr(), words.numel() * 8, 2, 1) == expected ^ 1


def test_the_attention_step_reads_every_layers_kv_rows(engine):
    from benchmarks.decode_attention import attention_step

    config = engine.model_config
    threads = torch.get_num_threads()
    row = attention_step(config, engine.config.block_size, 40, threads=2, read_gb_s=10.0, repeats=1)
    # K and V rows of the 40 cached tokens and the new one, every KV head, every layer, float32
    assert row["kv_bytes"] == config.num_layers * 2 * 41 * config.num_kv_heads * config.head_dim * 4
    assert row["ms_per_token"] > 0 and row["gb_s"] == pytest.approx(row["kv_bytes"] / row["ms_per_token"] / 1e6)
    assert row["share"] == pytest.approx(row["gb_s"] / 10.0)
    assert torch.get_num_threads() == threads  # the decode's thread count is restored
