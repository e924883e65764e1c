"""QuantizedLinear's dense path (EngineConfig.quantized_dense_min_rows): inputs of many rows through one float32 GEMM
over the weight the packed CPU kernel computes with; and the one-op rotary (x.roll) against transformers'."""
import pytest
import torch
from torch import nn

from test_engine_equality import engine_greedy, make_prompts
from tiers import Engine, EngineConfig
from tiers.models.rotary import RotaryEmbedding, apply_rotary_one
from tiers.models.config import RopeConfig
from tiers.quantization import QuantizationError, QuantizedLinear, quantize_int4, quantize_int8

pytestmark = pytest.mark.usefixtures("one_thread")


def linear(n: int = 96, k: int = 128, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(k, n, bias=False)
    nn.init.normal_(layer.weight, std=0.05)
    return layer


def quantized(mode: str, dense_min_rows: int | None) -> QuantizedLinear:
    w = linear().weight.detach()
    weight = quantize_int4(w, 32) if mode == "int4" else quantize_int8(w)
    return QuantizedLinear(weight, device="cpu", dense_min_rows=dense_min_rows, kernel="torch")


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_dense_rows_compute_what_the_packed_kernel_computes(mode):
    packed, dense = quantized(mode, None), quantized(mode, 8)
    assert packed.kernel == dense.kernel == ("cpu_int4pack" if mode == "int4" else "cpu_int8pack")
    x = torch.randn(40, 128).bfloat16()
    with torch.inference_mode():
        # below the threshold: the packed kernel itself, bit for bit
        assert torch.equal(dense(x[:7]), packed(x[:7]))
        # at and above it: the same weights and fp32 accumulation, so equal up to the bf16 rounding of the output
        for rows in (8, 40):
            got, want = dense(x[:rows]), packed(x[:rows])
            assert got.dtype == torch.bfloat16
            torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=1e-3)
        # the dense weight is the kernel's weight: read back through the kernel with an identity input
        torch.testing.assert_close(dense.dequantized_weight(), packed.dequantized_weight(), rtol=2 ** -8, atol=1e-4)


def test_dense_rows_keep_the_int4_nibbles_and_check_their_argument():
    packed, dense = quantized("int4", None), quantized("int4", 64)
    assert dense.resident_bytes - packed.resident_bytes == 96 * 128 // 2
    assert quantized("int8", 64).resident_bytes == quantized("int8", None).resident_bytes
    with pytest.raises(QuantizationError, match="dense_min_rows"):
        quantized("int8", 0)
    with pytest.raises(ValueError, match="quantized_dense_min_rows"):
        EngineConfig(quantized_dense_min_rows=0)


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_engine_greedy_tokens_are_the_same_with_dense_prefill(llama_path, mode):
    """Prefill chunks of 4+ rows dense against every row through the packed kernel: the same greedy tokens."""
    kw = dict(quantization=mode, quantization_group_size=32, max_model_len=256, quantized_kernel="torch")
    prompts = make_prompts(Engine.from_pretrained(llama_path, **kw).model_config.vocab_size)
    packed = engine_greedy(Engine.from_pretrained(llama_path, quantized_dense_min_rows=None, **kw), prompts)
    dense_engine = Engine.from_pretrained(llama_path, quantized_dense_min_rows=4, **kw)
    layer = dense_engine.runner.model.layers[0].mlp.down_proj
    assert isinstance(layer, QuantizedLinear) and layer.dense_min_rows == 4
    assert engine_greedy(dense_engine, prompts) == packed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_roll_rotary_is_transformers_rotary_bit_for_bit(dtype):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    head_dim, positions = 64, torch.tensor([0, 5, 17, 300])
    rotary = RotaryEmbedding(RopeConfig(), head_dim, 512)
    cos, signed_sin = rotary.cos_sin(positions, dtype)
    half = head_dim // 2
    sin = torch.cat((-signed_sin[..., :half], signed_sin[..., half:]), dim=-1)  # the plain sin table
    q, k = torch.randn(4, 9, head_dim).to(dtype), torch.randn(4, 3, head_dim).to(dtype)
    # transformers' layout: [batch, heads, seq, D] with cos/sin [batch, seq, D]
    want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[:, 0][None],
                                          sin[:, 0][None])
    assert torch.equal(apply_rotary_one(q, cos, signed_sin), want_q[0].transpose(0, 1))
    assert torch.equal(apply_rotary_one(k, cos, signed_sin), want_k[0].transpose(0, 1))
