"""Weight-only INT4/INT8: RTN quantizers, QuantizedLinear's kernels against a dequantized reference, lossless
Q4_0/Q4_1 and AutoAWQ conversion, quantize_model."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from tiers.quantization import (Int4Weight, QuantizationError, QuantizedLinear, quantize_int4,
                                quantize_int8, quantize_model)
from tiers.models.awq import AWQ_ORDER, awq_gemm_to_int4
from tiers.native import native_library

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [(64, 256), (48, 96), (1536, 576), (40, 128)]  # (out, in); 40 rows: no CPU int4 kernel (N % 16)


def _bf16_close(y: torch.Tensor, ref: torch.Tensor, k: int) -> bool:
    # bf16 keeps 8 bits: each product and the activation cast lose ~2^-9 relative; the sum grows like sqrt(k)
    return bool(((y.float() - ref).abs() <= 2 ** -7 * ref.abs() + 2 ** -8 * k ** 0.5 * ref.abs().mean() + 1e-3).all())


@pytest.mark.parametrize("out_features,in_features", SHAPES)
@pytest.mark.parametrize("mode,group", [("int4", 32), ("int4", 128), ("int8", None)])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["torch", "native"])
def test_quantized_linear_matches_dequantized_matmul(out_features, in_features, mode, group, x_dtype, family):
    if group and in_features % group:
        pytest.skip("in_features not a multiple of the group")
    if family == "native" and native_library() is None:
        pytest.skip("the native kernel does not build here")
    torch.manual_seed(out_features + in_features)
    w = torch.randn(out_features, in_features) * 0.05
    qw = quantize_int4(w, group) if mode == "int4" else quantize_int8(w)
    bias = torch.randn(out_features)
    layer = QuantizedLinear(qw, bias, kernel=family)
    if family == "native":
        expected_kernel = {"int4": "cpu_w4a8", "int8": "cpu_w8a32"}[mode]
    else:
        expected_kernel = {"int4": "cpu_int4pack" if out_features % 16 == 0 else "dequant",
                           "int8": "cpu_int8pack"}[mode]
    assert layer.kernel == expected_kernel
    ref_w = qw.dequantize()
    for rows in (1, 7, 33):
        x = torch.randn(2, rows, in_features).to(x_dtype)
        y = layer(x)
        assert y.dtype == x_dtype and y.shape == (2, rows, out_features)
        ref = x.float() @ ref_w.t() + bias
        assert _bf16_close(y, ref, in_features), (y.float() - ref).abs().max()
    fallback = QuantizedLinear(qw, bias, kernel="dequant")
    x = torch.randn(5, in_features)
    assert torch.allclose(fallback(x), x @ ref_w.t() + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_rtn_error_within_half_a_step(group):
    w = torch.randn(32, 256)
    q = quantize_int4(w, group)
    err = (q.dequantize() - w).abs().view(32, -1, group)
    assert (err <= q.scales.unsqueeze(-1) / 2 * (1 + 1e-5) + 1e-7).all()
    assert q.nbytes == 32 * 128 + 2 * 4 * 32 * (256 // group)


def test_int8_rtn_error_within_half_a_step():
    w = torch.randn(32, 100)
    q = quantize_int8(w)
    assert ((q.dequantize() - w).abs() <= q.scales.unsqueeze(-1) / 2 * (1 + 1e-5)).all()


def test_bad_group_sizes_are_clear_errors():
    with pytest.raises(QuantizationError, match="not a multiple of the group size"):
        quantize_int4(torch.randn(16, 96), 64)
    q = quantize_int4(torch.randn(16, 64), 16)  # a group the CPU kernel does not take: the fallback runs it
    layer = QuantizedLinear(q)
    assert layer.kernel == "dequant" and layer(torch.randn(3, 64)).shape == (3, 16)
    with pytest.raises(QuantizationError, match="expects 64"):
        layer(torch.randn(3, 32))


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_q4_blocks_to_int4_are_lossless(kind):
    gguf = pytest.importorskip("gguf")
    from tiers.models.gguf.reader import q4_to_int4

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 160)) * 0.1 + rng.standard_normal((48, 1))).astype(np.float32)
    qtype = gguf.GGMLQuantizationType[kind]
    blocks = gguf.quants.quantize(w, qtype)
    tensor = SimpleNamespace(name="t", tensor_type=qtype, shape=np.array([160, 48]), data=blocks)
    int4 = q4_to_int4(tensor)
    reference = torch.from_numpy(gguf.quants.dequantize(blocks, qtype).copy())
    assert int4.group_size == 32 and torch.equal(int4.dequantize(), reference)
    layer = QuantizedLinear(int4, kernel="torch")
    assert layer.kernel == "cpu_int4pack"
    x = torch.randn(4, 160)
    assert _bf16_close(layer(x), x @ reference.t(), 160)
    if native_library() is not None:  # the native kernel keeps the file's fp16 scales and mins: exact weights
        native = QuantizedLinear(int4, kernel="native")
        assert native.kernel == "cpu_w4a8" and torch.equal(native.dequantized_weight(), reference)
        assert _bf16_close(native(x), x @ reference.t(), 160)


def _pack_awq(values: torch.Tensor) -> torch.Tensor:
    """uint [R, C] in 0..15 -> int32 [R, C / 8] the way AutoAWQ's GEMM packer writes them."""
    rows, cols = values.shape
    packed = torch.zeros(rows, cols // 8, dtype=torch.int64)
    for word in range(cols // 8):
        for nibble, col in enumerate(AWQ_ORDER):
            packed[:, word] |= values[:, 8 * word + col].long() << (4 * nibble)
    return packed.to(torch.int32) if packed.max() < 2 ** 31 else (packed - (packed >= 2 ** 31).long() * 2 ** 32).to(
        torch.int32)


@pytest.mark.parametrize("group", [32, 128])
def test_awq_gemm_unpacks_to_the_reference(group):
    torch.manual_seed(1)
    in_f, out_f = 256, 64
    q = torch.randint(0, 16, (in_f, out_f))
    z = torch.randint(0, 16, (in_f // group, out_f))
    s = (torch.rand(in_f // group, out_f) * 0.02 + 0.001).half()
    reference = ((q - z.repeat_interleave(group, 0)).float() * s.float().repeat_interleave(group, 0)).t()  # [out, in]
    int4 = awq_gemm_to_int4(_pack_awq(q), _pack_awq(z), s, group)
    assert int4.shape == (out_f, in_f) and torch.equal(int4.dequantize(), reference)
    x = torch.randn(3, in_f)
    assert _bf16_close(QuantizedLinear(int4)(x), x @ reference.t(), in_f)
    with pytest.raises(QuantizationError, match="shapes do not agree"):
        awq_gemm_to_int4(_pack_awq(q), _pack_awq(z)[:1], s, group)


def _tiny_model(tied: bool = True):
    from tiers.models.config import ModelConfig

    config = ModelConfig.from_dict({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": tied})
    from tiers.models.llama import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    for p in model.parameters():
        nn.init.normal_(p, std=0.15) if p.dim() > 1 else nn.init.ones_(p)
    return model.eval()


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_quantize_model_swaps_projections_only(mode):
    from quant_helpers import prefill_logits

    import copy

    model = _tiny_model()
    # The reference: the same model with each projection's weight replaced by its dequantized RTN weight.
    reference = copy.deepcopy(model)
    for name, module in reference.named_modules():
        if name.rpartition(".")[2] in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            q = quantize_int4(module.weight, 32) if mode == "int4" else quantize_int8(module.weight)
            module.weight.data.copy_(q.dequantize())
    ids = [3, 17, 42, 5, 88, 1]
    report = quantize_model(model, mode, group_size=32)
    assert sorted(report) == sorted(f"layers.{i}.{m}" for i in range(2) for m in (
        "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"))
    assert set(report.values()) & {f"cpu_{mode}pack", {"int4": "cpu_w4a8", "int8": "cpu_w8a32"}[mode]}
    assert isinstance(model.layers[1].mlp.gate_up_proj, QuantizedLinear)
    assert type(model.lm_head) is nn.Linear and model.lm_head.weight is model.embed_tokens.weight
    expected, got = prefill_logits(reference, ids), prefill_logits(model, ids)
    # The kernels' activations (int8 blocks native, bf16 in torch's) move the logits by 1.0-2.7% of the largest:
    # measured 0.010-0.019 on torch's kernels with every projection's output rounding perturbed (up to a bf16 unit,
    # emulating other CPUs), 0.027 native (the same on its scalar and AVX2 builds). A 2% scale error gives 0.045
    # (INT8) to 0.24 (INT4); a neighbouring group's scale, shuffled blocks or swapped nibbles 0.6-1.5. The bound
    # sits between.
    assert (got - expected).abs().max() <= 0.04 * expected.abs().max()
    assert torch.equal(got.argmax(-1), expected.argmax(-1))  # held under every perturbation tried


def test_quantize_model_skips_layers_the_group_does_not_divide():
    model = _tiny_model()
    report = quantize_model(model, "int4", group_size=256)
    assert all(v.startswith("skipped") for v in report.values())
    assert type(model.layers[0].self_attn.qkv_proj) is nn.Linear
    with pytest.raises(QuantizationError, match="unknown quantization mode"):
        quantize_model(model, "int3")


def test_int8_lm_head_shares_its_rows_with_the_tied_embedding():
    from quant_helpers import prefill_logits

    from tiers.quantization import QuantizedEmbedding, quantize_lm_head

    model = _tiny_model()
    reference = _tiny_model()
    reference.load_state_dict(model.state_dict())
    reference.embed_tokens.weight.data.copy_(quantize_int8(model.embed_tokens.weight).dequantize())
    ids = [3, 17, 42, 5, 88, 1]
    expected = prefill_logits(reference, ids)
    quantize_lm_head(model, torch.float32)
    assert isinstance(model.lm_head, QuantizedLinear) and model.lm_head.mode == "int8"
    assert isinstance(model.embed_tokens, QuantizedEmbedding)
    assert model.embed_tokens.qweight is model.lm_head.qweight  # one copy of the matrix
    got = prefill_logits(model, ids)
    assert (got - expected).abs().max() <= 0.03 * expected.abs().max()  # bf16 activations and scales
    assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_a_layer_built_for_cuda_takes_tensors_on_the_current_cuda_device():
    """Built with device="cuda", a layer's input reports "cuda:0": the same device (a 70B AWQ model failed every
    request on this); another type, or another index where both name one, is not."""
    import torch

    from tiers.quantization.linear import same_device

    cuda, cuda0, cuda1, cpu = (torch.device(d) for d in ("cuda", "cuda:0", "cuda:1", "cpu"))
    assert same_device(cuda0, cuda) and same_device(cuda, cuda0) and same_device(cuda1, cuda1)
    assert not same_device(cpu, cuda) and not same_device(cuda0, cpu) and not same_device(cuda1, cuda0)


def test_the_registry_has_one_method_per_format_and_one_kernel_object_per_name():
    from tiers.quantization.methods import KERNELS, METHODS, NATIVE_KERNELS, method_of

    assert set(METHODS) == {"int4", "int8", "kquant"}
    for method in METHODS.values():
        assert all(KERNELS[name].name == name for name in method.kernels + method.explicit)
    assert set(NATIVE_KERNELS) == {"cpu_w4a8", "cpu_w8a8", "cpu_w8a32", "cpu_kq"}
    int4, int8 = quantize_int4(torch.randn(32, 128), 32), quantize_int8(torch.randn(32, 128))
    assert method_of(int4) is METHODS["int4"] and method_of(int8) is METHODS["int8"]
    with pytest.raises(QuantizationError, match="Int4Weight or Int8Weight"):
        method_of(torch.randn(2, 2))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert METHODS["int8"].pick(int8, cuda).name == "dequant"
    assert METHODS["int4"].pick(int4, cpu, "torch").name == "cpu_int4pack"
    assert METHODS["int4"].pick(int4, cpu).name == ("cpu_w4a8" if native_library() else "cpu_int4pack")
    with pytest.raises(QuantizationError, match="unknown kernel"):
        QuantizedLinear(int4, kernel="marlin")


def test_quantization_modes_are_written_once_and_import_without_torch():
    import subprocess
    import sys

    from tiers.engine import config
    from tiers.models import checkpoint
    from tiers.quantization import modes

    assert config.QUANTIZATION_MODES is checkpoint.QUANTIZATION_MODES is modes.QUANTIZATION_MODES
    code = ("import sys; from tiers.engine.config import EngineConfig; from tiers.quantization.modes import "
            "QUANTIZATION_MODES; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
