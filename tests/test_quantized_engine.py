"""The engine on quantized weights (EngineConfig.quantization): INT4 / INT8 round-to-nearest at load time on tiny
random models, and the engine features (fused projections, tied embeddings, prefix caching, chunked prefill,
preemption, speculative decoding) unchanged on them."""
import logging

import pytest
import torch
from torch import nn

from quant_helpers import prefill_logits
from test_engine_equality import engine_greedy, make_prompts
from tiers import Engine, EngineConfig
from tiers.models.loader import load_model
from tiers.models.config import ModelConfig
from tiers.native import native_library
from tiers.quantization import QuantizedLinear, quantize_int4, quantize_int8

pytestmark = pytest.mark.usefixtures("one_thread")

GROUP = 32  # the tiny models' in_features (64, 128) are not multiples of the default 128
MODES = ["int4", "int8"]


def quantized(path, mode, **kw):
    return Engine.from_pretrained(path, quantization=mode, quantization_group_size=GROUP,
                                  **{"max_model_len": 256, **kw})


def float_model(path):
    return load_model(path, ModelConfig.from_pretrained(path), torch.device("cpu"), torch.float32)


def rtn(weight, mode, blockwise=False):
    """blockwise: INT8 in blocks of 32 (the native kernel's), else per channel."""
    return (quantize_int4(weight, GROUP) if mode == "int4" else quantize_int8(weight, blockwise)).dequantize()


@pytest.mark.parametrize("family", ["torch", "native"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", ["llama", "llama-tied", "qwen2"])
def test_projections_are_rtn_of_the_float_weights(checkpoint_dir, arch, mode, family):
    """Fused qkv / gate_up hold each shard's quantized rows in place; embeddings (tied or not), lm_head and norms
    stay float in the default dtype: bf16 on CPU with torch's kernels, float32 with the native ones."""
    if family == "native" and native_library() is None:
        pytest.skip("the native kernel does not build here")
    path = checkpoint_dir(arch)
    engine = quantized(path, mode, quantized_kernel=family)
    model, ref = engine.runner.model, float_model(path)
    dtype = torch.bfloat16 if family == "torch" else torch.float32
    assert engine.runner.dtype == dtype
    kernel = {("torch", "int4"): "cpu_int4pack", ("torch", "int8"): "cpu_int8pack",
              ("native", "int4"): "cpu_w4a8", ("native", "int8"): "cpu_w8a32"}[family, mode]
    for (name, layer), (_, ref_layer) in zip(model.named_modules(), ref.named_modules()):
        if name.rpartition(".")[2] in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            assert isinstance(layer, QuantizedLinear) and layer.kernel == kernel, name
            # the kernels keep scales in bf16: the read-back weight is the RTN weight to bf16 precision
            want = rtn(ref_layer.weight, mode, blockwise=family == "native")
            torch.testing.assert_close(layer.dequantized_weight(), want, rtol=2 ** -7, atol=2e-3)
            if ref_layer.bias is not None:
                torch.testing.assert_close(layer.bias.float(), ref_layer.bias, rtol=0, atol=0)
    assert not any(isinstance(m, QuantizedLinear) for m in (model.lm_head, model.embed_tokens))
    assert model.embed_tokens.weight.dtype == model.lm_head.weight.dtype == model.norm.weight.dtype == dtype
    assert (model.lm_head.weight is model.embed_tokens.weight) == (arch == "llama-tied")


@pytest.mark.parametrize("family", ["torch", "native"])
@pytest.mark.parametrize("mode", MODES)
def test_quantized_logits_match_the_dequantized_float_model(llama_path, mode, family):
    """The quantized model computes what a float32 model holding its (read-back) weights computes, up to the
    kernels' activations: bf16 for torch's, int8 blocks of 32 for the native ones (each element within half a
    step of 1/127 of its block's largest).

    The bounds, from what the test can tell apart (the weights are read back, so only the kernels' arithmetic
    shows): the largest logit error is 1.6-1.9% of the largest logit on torch's kernels here, up to 3.5% with
    every projection's output rounding perturbed by up to a bf16 unit (other CPUs round differently), 3.3% native
    (int8 activations; the same on its scalar and AVX2 builds); a kernel with its output 2% off gives 9.5%, one
    that drops a block of inputs or a column of outputs 100%+. Top-1 over the 66 positions: 92-100% correct (some
    positions' top two logits lie 0.003 apart and flip with the rounding), 77-91% with the output 2-5% off, 0-17%
    for the dropped block or column: the logit bound is the sharp test, the top-1 one a coarse second."""
    if family == "native" and native_library() is None:
        pytest.skip("the native kernel does not build here")
    engine = quantized(llama_path, mode, dtype="float32", quantized_kernel=family)
    ref = float_model(llama_path)
    with torch.no_grad():
        for name, layer in engine.runner.model.named_modules():
            if isinstance(layer, QuantizedLinear):
                ref.get_submodule(name).weight.copy_(layer.dequantized_weight())
    prompt = make_prompts(512)[3]
    got, want = prefill_logits(engine.runner.model, prompt), prefill_logits(ref, prompt)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.85


@pytest.mark.parametrize("family", ["torch", "native"])
@pytest.mark.parametrize("mode", MODES)
def test_prefix_caching_chunked_prefill_and_preemption_keep_the_outputs(llama_path, mode, family):
    """In float32, token for token. Torch's kernels take bf16 activations, which absorb the last-bit differences
    that another chunking makes in float32 attention. With the native kernels every op of the step is
    batch-invariant (the INT4/INT8 matmuls row by row, attention token by token in tiers/native/ops.c), so the
    chunking changes no bit."""
    if family == "native" and native_library() is None:
        pytest.skip("the native kernel does not build here")
    kw = dict(max_model_len=128, dtype="float32", quantized_kernel=family)
    plain = quantized(llama_path, mode, enable_prefix_caching=False, **kw)
    prompts = make_prompts(plain.model_config.vocab_size)
    want = engine_greedy(plain, prompts)
    block = plain.runner.kv_bytes_per_block
    busy = quantized(llama_path, mode, kv_cache_bytes=11 * block, max_num_batched_tokens=13, **kw)
    for _ in range(2):  # the second time from cached prefixes
        got = engine_greedy(busy, prompts)
        assert got == want
        stats = busy.stats()
        assert stats.num_preemptions > 0 and stats.prefix_cache_hit_rate > 0 and stats.num_used_blocks == 0


@pytest.mark.parametrize("mode", MODES)
def test_quantized_draft_for_a_float_target_keeps_its_greedy_output(llama_path, mode):
    """The same model quantized drafts for its float32 self: the output is the target's alone, and a fair part
    of the drafts is accepted (a random tiny model's greedy path is fragile: about 35% with INT4 groups of 32)."""
    target = Engine.from_pretrained(llama_path)
    prompts = make_prompts(target.model_config.vocab_size)
    want = engine_greedy(target, prompts)
    draft = quantized(llama_path, mode, dtype="float32")  # a shared draft runs in the target's dtype
    spec = Engine.from_pretrained(llama_path, draft=draft, speculative_adaptive=False, num_speculative_tokens=3)
    assert engine_greedy(spec, prompts) == want
    stats = spec.stats().speculative
    assert stats.num_accepted_tokens > 0.25 * stats.num_draft_tokens


def test_quantized_target_with_ngram_speculation(llama_path):
    plain = quantized(llama_path, "int4")
    prompts = make_prompts(plain.model_config.vocab_size)
    spec = quantized(llama_path, "int4", speculative="ngram", speculative_adaptive=False)
    assert engine_greedy(spec, prompts) == engine_greedy(plain, prompts)
    assert spec.stats().speculative.num_verifications > 0


def test_default_dtype_follows_quantization(llama_path):
    assert Engine.from_pretrained(llama_path, max_model_len=64).runner.dtype == torch.float32
    # quantized: float32 activations on the native kernels, bf16 on torch's
    assert quantized(llama_path, "int8").runner.dtype == (torch.float32 if native_library() else torch.bfloat16)
    assert quantized(llama_path, "int8", quantized_kernel="torch").runner.dtype == torch.bfloat16
    assert quantized(llama_path, "int4", dtype="float32").runner.dtype == torch.float32
    assert EngineConfig(quantization="none").quantization is None


def test_layers_the_group_does_not_divide_stay_float_with_a_warning(llama_path, caplog):
    with caplog.at_level(logging.WARNING):
        engine = Engine.from_pretrained(llama_path, quantization="int4", max_model_len=64)  # group 128
    layers = engine.runner.model.layers[0]
    assert isinstance(layers.mlp.down_proj, QuantizedLinear)  # in_features 128
    assert type(layers.self_attn.qkv_proj) is nn.Linear  # in_features 64
    assert "projections stay float under int4" in caplog.text


@pytest.mark.parametrize("options, message", [
    ({"quantization": "int3"}, "quantization must be 'auto', 'int8', 'int4' or None"),
    ({"quantization": "awq"}, "quantization must be"),
    ({"quantization": "int4", "quantization_group_size": 48}, "quantization_group_size must be one of"),
])
def test_bad_quantization_options_are_clear_errors(llama_path, options, message):
    with pytest.raises(ValueError, match=message):
        Engine.from_pretrained(llama_path, **options)
