"""The fused Triton ops (tiers/models/triton_ops.py) against the torch ops they replace in tiers/models/llama.py, and
the model's fused path against its unfused one. CPU cases run the kernels in Triton's interpreter in fp32 and fp16
(its bf16 conversions do not round as the GPU's do); CUDA cases run fp32, bf16 and fp16, where every op but
RMSNorm's mean must give the torch ops' very bits.

Tolerances, where not exact:
- RMSNorm: the fp32 mean of squares sums the row in another order than torch's reduction (numpy's pairwise sum in
  the interpreter, Triton's tree on a GPU). Both sums are within about log2(N) * 2^-24 of the exact one, so the two
  differ by ~2 (log2(N) + 1) * 2^-24 <= 1.5e-6 relative for N = 4096; rsqrt halves that and the rsqrt and the two
  products add a few roundings of 2^-24 each: rtol 2e-6 in fp32. In bf16/fp16 that last-bit difference can move a
  normed element across a rounding boundary: at most 2 ulps of the dtype (one for the normed value, one more after
  the weight), and rarely: an element within k fp32 ulps of a boundary, about k * 2^-13 of them in fp16 and
  k * 2^-16 in bf16 (at most 1% checked).
- SiLU on CPU: torch's vectorised exp and numpy's (the interpreter's) each err by up to an ulp, which the add, the
  division and the product carry: within 4 ulps (rtol 4 * 2^-23) in fp32, and as RMSNorm's in fp16. On CUDA both
  call expf and divide correctly rounded: equal.
- Rotary and the residual add: one IEEE rounding per op on both sides: equal everywhere.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, TRITON_DEVICES
from test_engine_equality import engine_greedy, make_prompts
from tiers import Engine
from tiers.attention.backend import BatchLayout
from tiers.engine.input_batch import BatchPlan, model_input
from tiers.models import llama
from tiers.models.rotary import apply_rotary_one

pytest.importorskip("triton")
from tiers.models import triton_ops  # noqa: E402

DEVICE_DTYPES = [pytest.param(device, dtype, id=f"{device}-{str(dtype).removeprefix('torch.')}",
                              marks=[pytest.mark.triton_interpreter] if device == "cpu" else [])
                 for device in DEVICES
                 for dtype in ([torch.float32, torch.float16] if device == "cpu"
                               else [torch.float32, torch.bfloat16, torch.float16])]
ULP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}  # relative spacing at the bottom of a binade
EPS = 1e-5


def _random(*shape: int, device: str, dtype: torch.dtype, scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(device, dtype)


def _torch_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """tiers.models.llama.RMSNorm's torch path, op for op."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
    return weight * x32.to(x.dtype)


def _assert_last_bits_close(got: torch.Tensor, want: torch.Tensor, fp32_rtol: float = 2e-6) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=fp32_rtol, atol=0)
        return
    torch.testing.assert_close(got, want, rtol=2 * ULP[got.dtype], atol=0)
    assert (got != want).float().mean().item() <= 0.01


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("hidden", [100, 4096])
def test_rms_norm_matches_torch(device, dtype, tokens, hidden):
    x = _random(tokens, hidden, device=device, dtype=dtype, scale=3.0)
    weight = _random(hidden, device=device, dtype=dtype, seed=1)
    _assert_last_bits_close(triton_ops.rms_norm(x, weight, EPS), _torch_rms_norm(x, weight))


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("hidden", [100, 4096])
def test_fused_add_rms_norm_matches_torch(device, dtype, tokens, hidden):
    x = _random(tokens, hidden, device=device, dtype=dtype)
    residual = _random(tokens, hidden, device=device, dtype=dtype, scale=4.0, seed=1)
    weight = _random(hidden, device=device, dtype=dtype, seed=2)
    x_before, residual_before = x.clone(), residual.clone()
    normed, summed = triton_ops.fused_add_rms_norm(x, residual, weight, EPS)
    assert torch.equal(summed, residual + x)
    _assert_last_bits_close(normed, _torch_rms_norm(residual + x, weight))
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_rms_norm_with_a_float32_weight_promotes_as_torch(device):
    """A half-precision model with float32 norm weights (a GGUF's): torch's weight * normed (rounded to fp16 first)
    is float32; so is the kernel's. Any leading dimensions."""
    x = _random(3, 2, 64, device=device, dtype=torch.float16)
    weight = _random(64, device=device, dtype=torch.float32, seed=1)
    got, want = triton_ops.rms_norm(x, weight, EPS), _torch_rms_norm(x, weight)
    assert got.dtype == torch.float32
    # the normed value is rounded to fp16 before the weight: that rounding's last-bit flips show at fp16's scale
    torch.testing.assert_close(got, want, rtol=2 * ULP[torch.float16], atol=0)
    assert (got != want).float().mean().item() <= 0.01


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("intermediate", [300, 2500])
def test_silu_and_mul_matches_torch(device, dtype, tokens, intermediate):
    gate_up = _random(tokens, 2 * intermediate, device=device, dtype=dtype, scale=4.0)
    gate, up = gate_up.split(intermediate, dim=-1)
    got, want = triton_ops.silu_and_mul(gate_up), F.silu(gate) * up
    if device == "cpu":
        _assert_last_bits_close(got, want, fp32_rtol=4 * 2.0 ** -23)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("head_dim", [64, 128, 96])
def test_rotary_in_place_is_apply_rotary_one(device, dtype, tokens, head_dim):
    """GQA (8 query heads, 2 KV heads): q and k rotated in place inside a fused qkv row; v untouched."""
    heads, kv_heads = 8, 2
    qkv = _random(tokens, (heads + 2 * kv_heads) * head_dim, device=device, dtype=dtype)
    cos = _random(tokens, 1, head_dim, device=device, dtype=dtype, seed=1)
    signed_sin = _random(tokens, 1, head_dim, device=device, dtype=dtype, seed=2)
    rotated = (heads + kv_heads) * head_dim
    want = apply_rotary_one(qkv[:, :rotated].reshape(tokens, heads + kv_heads, head_dim), cos, signed_sin)
    v = qkv[:, rotated:].clone()
    qk = qkv[:, :rotated].view(tokens, heads + kv_heads, head_dim)
    assert triton_ops.rotary_(qk, cos, signed_sin) is qk
    assert torch.equal(qk, want)
    assert torch.equal(qkv[:, rotated:], v)


@pytest.mark.parametrize("call, message", [
    (lambda: triton_ops.rms_norm(torch.ones(2, 8), torch.ones(4), EPS), r"weight must have shape \(8,\)"),
    (lambda: triton_ops.rms_norm(torch.ones(2, 8, dtype=torch.int32), torch.ones(8), EPS), "x must be float16"),
    (lambda: triton_ops.rms_norm(torch.ones(2, 8, dtype=torch.float64), torch.ones(8), EPS), "x must be float16"),
    (lambda: triton_ops.rms_norm(torch.ones(()), torch.ones(1), EPS), "weight must have shape"),
    (lambda: triton_ops.fused_add_rms_norm(torch.ones(2, 8), torch.ones(3, 8), torch.ones(8), EPS),
     "residual must match"),
    (lambda: triton_ops.fused_add_rms_norm(torch.ones(2, 8), torch.ones(2, 8, dtype=torch.float16), torch.ones(8),
                                           EPS), "residual must match"),
    (lambda: triton_ops.silu_and_mul(torch.ones(2, 7)), r"gate_up must be \[..., 2 \* intermediate\]"),
    (lambda: triton_ops.rotary_(torch.ones(2, 3, 7), torch.ones(2, 1, 7), torch.ones(2, 1, 7)), "even"),
    (lambda: triton_ops.rotary_(torch.ones(2, 3, 8), torch.ones(3, 1, 8), torch.ones(2, 1, 8)),
     r"cos must be \[tokens, 1, head_dim\]"),
    (lambda: triton_ops.rotary_(torch.ones(2, 3, 8), torch.ones(2, 1, 8), torch.ones(2, 1, 8, dtype=torch.float16)),
     "signed_sin must have x's dtype"),
    (lambda: triton_ops.rotary_(torch.ones(2, 8), torch.ones(2, 8), torch.ones(2, 8)), r"\[tokens, heads, head_dim\]"),
])
def test_bad_inputs_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_use_triton_ops_takes_cuda_tensors_unless_switched(monkeypatch):
    cpu = torch.ones(2)
    assert not llama.use_triton_ops(cpu)  # CPU keeps the torch and native paths
    monkeypatch.setattr(llama, "TRITON_OPS", True)
    assert llama.use_triton_ops(cpu) and not llama.use_triton_ops(cpu.to(torch.float64))
    if torch.cuda.is_available():
        assert llama.use_triton_ops(cpu.cuda())
        monkeypatch.setattr(llama, "TRITON_OPS", False)
        assert not llama.use_triton_ops(cpu.cuda())


def _prefill_logits(engine: Engine) -> torch.Tensor:
    """One sequence's five-token prefill through the model (block 1: slots 16..20)."""
    runner = engine.runner
    layout = BatchLayout([[1]], [5], [0, 5], list(range(16, 21)), runner.block_size)
    plan = BatchPlan([11, 7, 300, 42, 5], list(range(5)), layout, [0], [4])
    inputs = model_input(plan, runner.attention_backend, runner.kv_cache.layers, runner.device, runner.dtype)
    with torch.inference_mode():
        return runner.model.compute_logits(runner.model(inputs.input_ids, inputs.positions, inputs.attn_metadata))


def _engine(path) -> Engine:
    return Engine.from_pretrained(path, device="cpu", dtype="float32", max_model_len=64, attention_backend="torch")


@pytest.mark.triton_interpreter
def test_the_model_takes_the_fused_path_and_matches_the_unfused_one(llama_path, monkeypatch):
    """A random two-layer model in fp32: the fused path's logits equal the torch path's to fp32 rounding (the
    RMSNorm sums and SiLU's exp differ in the last bits), with each layer's norms, rotary and SiLU-and-mul as the
    fused kernels, and greedy decoding (fresh engines: no KV cached by the other path) gives the same tokens."""
    prompts = make_prompts(512)[:3]
    unfused, unfused_tokens = _prefill_logits(_engine(llama_path)), engine_greedy(_engine(llama_path), prompts, 4)
    calls = {name: 0 for name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_")}
    for name in calls:
        def counted(*args, _name=name, _op=getattr(triton_ops, name)):
            calls[_name] += 1
            return _op(*args)
        monkeypatch.setattr(triton_ops, name, counted)
    monkeypatch.setattr(llama, "TRITON_OPS", True)
    engine = _engine(llama_path)
    fused = _prefill_logits(engine)
    layers = engine.model_config.num_layers
    # the first layer's input norm has no residual yet; every later norm adds one, the final norm included
    assert calls == {"rms_norm": 1, "fused_add_rms_norm": 2 * layers, "silu_and_mul": layers, "rotary_": layers}
    torch.testing.assert_close(fused, unfused, rtol=1e-5, atol=1e-5)
    assert engine_greedy(_engine(llama_path), prompts, 4) == unfused_tokens


@pytest.mark.gpu
def test_bf16_engine_gives_the_unfused_tokens_on_cuda(llama_path, monkeypatch):
    """The design goal on a GPU: the fused kernels (the default on CUDA) decode the tokens of the torch ops."""
    prompts = make_prompts(512)[:3]
    options = dict(device="cuda", dtype="bfloat16", max_model_len=64)
    fused = engine_greedy(Engine.from_pretrained(llama_path, **options), prompts, 8)
    monkeypatch.setattr(llama, "TRITON_OPS", False)
    assert engine_greedy(Engine.from_pretrained(llama_path, **options), prompts, 8) == fused
