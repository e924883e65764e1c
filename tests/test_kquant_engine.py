"""A GGUF file of K-quant (and Q5_0 / Q8_0) projections through the loader and the Engine: quantization="auto" runs
them as stored on the native kernel, and agrees with the same weights dequantized to float32.

How close "agrees" is, derived rather than measured: the two models compute with the same weights bit for bit
(test_kquant_native.py), and differ only in the native path's activations, rounded to int8 per block of 32 before
each quantized matmul. For a block of 32 roughly normal activations the step is max|x| / 127 ~ 2.1 sigma / 127, the
rounding error uniform within half a step: RMS step / sqrt(12) ~ 0.5% of the activations' RMS. A token passes 9
such roundings (qkv, o, gate_up, down in each of 2 layers, then the lm_head), independent, so a logit's error has
an RMS of about sqrt(9) * 0.5% = 1.5% of the logits' RMS; 4 of those (a 4-sigma excursion) is 6% of the RMS, about
2% of max|logit| for ~300 roughly normal logits (max ~ 3 RMS). So: logits within 2% of max|logit| of float32's,
and greedy tokens equal up to the first step where float32's top two logits are closer than twice that; after
such a step the two may legitimately go different ways, and no later token is compared. The native kernel's
results are the same bits on every instruction set, so this holds alike on AVX-512, AVX2 and plain C machines.
"""
from __future__ import annotations

import pytest
import torch

from tests.kquant_helpers import write_kquant_gguf
from tests.quant_helpers import prefill_logits
from tiers.models.gguf import build_model, load_gguf
from tiers.native import native_library
from tiers.quantization.linear import QuantizedLinear

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(native_library() is None, reason="the native kernel does not build here")]

LOGIT_TOLERANCE = 0.02  # of max|logit|: see the module docstring
PROMPT = [5, 40, 77, 120, 9, 200, 31, 64]


@pytest.fixture(scope="module")
def kquant_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kq") / "qwen2-kquant.gguf"
    write_kquant_gguf(path)
    return path


def _projections(model) -> list[QuantizedLinear]:
    return [m for name, m in model.named_modules() if name.endswith("_proj") or name == "lm_head"]


def test_auto_keeps_every_block_type_as_stored(kquant_file):
    from tiers import Engine
    from tiers.models.gguf import load_gguf

    engine = Engine.from_pretrained(kquant_file, quantization="auto", kv_cache_bytes=8 << 20)
    model = engine.runner.model
    layers = _projections(model)
    assert len(layers) == 2 * 4 + 1 and all(getattr(m, "kernel", None) == "cpu_kq" for m in layers)
    # a fused mix, each part as stored; Q4_K, Q6_K and Q5_0 in the kernel's repacked layouts (the same bytes)
    assert model.layers[0].self_attn.qkv_proj.kq.types == ("Q4_K_R", "Q6_K_R")
    assert model.layers[0].mlp.gate_up_proj.kq.types == ("Q4_K_R", "Q5_0_R")
    assert model.layers[1].mlp.down_proj.kq.types == ("Q8_0",) and model.lm_head.kq.types == ("Q6_K_R",)
    assert type(model.embed_tokens).__name__ == "KQuantEmbedding" and model.embed_tokens.kq.types == ("Q8_0",)
    # as many bytes as the file's tensors
    import gguf

    reader = gguf.GGUFReader(str(kquant_file))
    kinds = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    stored = sum(int(t.n_bytes) for t in reader.tensors
                 if t.name == "output.weight" or t.name.endswith(".weight") and t.name.split(".")[-2] in kinds)
    assert sum(m.resident_bytes - (m.bias.numel() * 4 if m.bias is not None else 0) for m in layers) == stored
    # two engines from one checkpoint (the loader repacked its weights once): the same logits
    checkpoint = load_gguf(kquant_file)
    one, two = (Engine(checkpoint, engine.config).runner.model for _ in range(2))
    assert torch.equal(prefill_logits(one, PROMPT), prefill_logits(two, PROMPT))
    torch.testing.assert_close(prefill_logits(one, PROMPT), prefill_logits(model, PROMPT), rtol=0, atol=0)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # llama: q / k rows unpermuted, whole block rows moved
def test_logits_close_to_the_dequantized_model(tmp_path, arch):
    write_kquant_gguf(tmp_path / "m.gguf", arch=arch, seed=3)
    native = build_model(load_gguf(tmp_path / "m.gguf"))
    reference = build_model(load_gguf(tmp_path / "m.gguf", keep_int4=False))
    assert native.layers[0].mlp.down_proj.kernel == "cpu_kq"
    assert type(reference.layers[0].mlp.down_proj).__name__ == "Linear"
    for name, layer in native.named_modules():  # the weights themselves: equal
        if isinstance(layer, QuantizedLinear):
            assert torch.equal(layer.dequantized_weight(), reference.get_submodule(name).weight)
    ids = torch.tensor([PROMPT, PROMPT[::-1]])
    assert torch.equal(native.embed_tokens(ids), reference.embed_tokens(ids))  # kept as stored, rows exact
    a, b = prefill_logits(reference, PROMPT), prefill_logits(native, PROMPT)
    assert (a - b).abs().max() <= LOGIT_TOLERANCE * a.abs().max(), (a - b).abs().max() / a.abs().max()


@pytest.mark.parametrize("dense_min_rows", [None, 6])
def test_greedy_tokens_equal_the_dequantized_model(kquant_file, dense_min_rows):
    """Engine greedy tokens equal before the first step where float32's top two logits are within the tolerance;
    teacher-forced along float32's path, the native argmax is float32's wherever they are not. With dense_min_rows
    the prefill runs the dense path (bf16 GEMM where the CPU has bf16 units: a rounding of 2^-9, finer than the
    int8 activations' the tolerance is derived for) and the decode steps (6 rows) the kernel."""
    from tiers import Engine, SamplingParams

    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    engines = {q: Engine.from_pretrained(kquant_file, quantization=q, kv_cache_bytes=8 << 20,
                                         quantized_dense_min_rows=dense_min_rows if q else None)
               for q in ("auto", None)}
    assert engines[None].runner.model.layers[0].mlp.down_proj.__class__.__name__ == "Linear"
    generator = torch.Generator().manual_seed(0)
    prompts = [PROMPT] + [torch.randint(3, 250, (8,), generator=generator).tolist() for _ in range(5)]
    outputs = {q: [o.token_ids for o in e.generate(prompts, params)] for q, e in engines.items()}
    compared_steps = separated_positions = 0
    for i, prompt in enumerate(prompts):
        path = prompt + outputs[None][i][:-1]
        logits = {q: prefill_logits(e.runner.model, path)[len(prompt) - 1:] for q, e in engines.items()}
        top2 = logits[None].topk(2, dim=-1).values
        separated = (top2[:, 0] - top2[:, 1]) >= 2 * LOGIT_TOLERANCE * logits[None].abs().amax(-1)
        assert torch.equal(logits["auto"].argmax(-1)[separated], logits[None].argmax(-1)[separated])
        compared = int((~separated).nonzero()[0]) if not separated.all() else len(separated)
        assert outputs["auto"][i][:compared] == outputs[None][i][:compared], (i, outputs, compared)
        compared_steps += compared
        separated_positions += int(separated.sum())
    assert separated_positions >= len(prompts) * 24 // 4  # the test compares something


def test_other_modes_dequantize_gguf_blocks(kquant_file):
    """None: float32; int4: K-quant -> float32 -> round-to-nearest INT4 (the path before they ran natively)."""
    from tiers import Engine

    for quantization, kernels in ((None, {None}), ("int4", {"cpu_w4a8"})):
        model = Engine.from_pretrained(kquant_file, quantization=quantization, kv_cache_bytes=8 << 20).runner.model
        projections = [m for n, m in model.named_modules() if n.endswith("_proj")]
        assert {getattr(m, "kernel", None) for m in projections} == kernels, quantization


def test_many_rows_take_the_dense_path_and_few_the_kernel(kquant_file):
    """dense_min_rows: a projection fed that many rows multiplies the dequantized weight with torch's GEMM (in
    dense_dtype()), fewer rows go to the kernel; the one-call native layer steps aside for such steps."""
    from tiers import Engine
    from tiers.quantization.kquant import gemm
    from tiers.quantization.kquant_dense import dense_dtype

    engine = Engine.from_pretrained(kquant_file, quantization="auto", kv_cache_bytes=8 << 20,
                                    quantized_dense_min_rows=6)
    layer = engine.runner.model.layers[0]
    proj = layer.mlp.gate_up_proj
    assert proj.dense_min_rows == 6 and layer.native_layer is not None
    assert layer.native_layer.runs(5) and not layer.native_layer.runs(6)
    x = torch.randn(6, proj.in_features, generator=torch.Generator().manual_seed(0))
    weight = proj.dequantized_weight()
    dense = torch.nn.functional.linear(x.to(dense_dtype()), weight.to(dense_dtype())).float()
    assert torch.equal(proj(x), dense)
    assert torch.equal(proj(x[:5]), gemm(proj.native, x[:5], proj.kq))
    with pytest.raises(Exception, match="dense_min_rows must be >= 1"):
        Engine.from_pretrained(kquant_file, quantization="auto", kv_cache_bytes=8 << 20, quantized_dense_min_rows=0)
