"""W4A16's dense path for many rows (tiers.quantization.w4a16_dense): the INT4 weight dequantized into a reused
buffer, then one dense matmul. It runs on CPU too (torch's dequantizer), so these run on every machine: exactly the
reference dequantizer's values, the buffer reused and grown, and the matmul against F.linear on the reference."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.int4_helpers import random_int4
from tiers.quantization import w4a16_dense
from tiers.quantization.w4a16_dense import dense_matmul, dequantize_into, release, reserve, scratch


@pytest.fixture(autouse=True)
def fresh_buffers():
    release()
    yield
    release()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("group, k", [(32, 96), (128, 512), (96, 192)])
def test_dequantize_into_is_the_reference_dequantizer(dtype, group, k, monkeypatch):
    monkeypatch.setattr(w4a16_dense, "CPU_CHUNK_ELEMENTS", 7 * k)  # 45 rows in chunks of 7: a partial last one
    weight = random_int4(45, k, group, seed=k)
    out = torch.full((45, k), float("nan"), dtype=dtype)
    assert dequantize_into(weight, out) is out
    assert torch.equal(out, weight.dequantize(dtype))
    with pytest.raises(ValueError, match="the weight is"):
        dequantize_into(weight, torch.empty(45, k + 2, dtype=dtype))


@pytest.mark.parametrize("m", [257, 300, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dense_matmul_equals_f_linear_on_the_dequantized_weight(m, dtype):
    weight = random_int4(72, 256, 64, seed=m)
    x = torch.randn(m, 256, generator=torch.Generator().manual_seed(m)).to(dtype)
    y = dense_matmul(x, weight)
    assert y.shape == (m, 72) and y.dtype == dtype
    assert torch.equal(y, F.linear(x, weight.dequantize(dtype)))  # the same values, the same GEMM


def test_the_buffer_is_reused_and_grows_to_the_largest_layer():
    a = scratch(torch.device("cpu"), torch.bfloat16, 16, 64)
    b = scratch(torch.device("cpu"), torch.bfloat16, 8, 64)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one buffer, reused
    big = scratch(torch.device("cpu"), torch.float32, 32, 64)  # 8 KB > 2 KB: grown
    assert big.shape == (32, 64) and big.untyped_storage().nbytes() >= 32 * 64 * 4
    again = scratch(torch.device("cpu"), torch.bfloat16, 16, 64)
    assert again.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()  # never shrunk
    reserve("cpu", 1 << 30)  # nothing on CPU
    assert scratch(torch.device("cpu"), torch.uint8, 1, 1).untyped_storage().nbytes() < 1 << 30


@pytest.mark.gpu
def test_cuda_layers_reserve_the_buffer_when_built_and_large_m_takes_the_dense_path(monkeypatch):
    from tiers.quantization import QuantizedLinear
    from tiers.quantization import triton_w4a16

    weight = random_int4(1024, 2048, 128)
    before = torch.cuda.memory_allocated()
    layer = QuantizedLinear(weight, device="cuda")
    assert layer.kernel == "triton_w4a16"
    assert torch.cuda.memory_allocated() - before >= 1024 * 2048 * 2  # the bf16 buffer, before any call
    calls = []
    monkeypatch.setattr(w4a16_dense, "dense_matmul", lambda x2, w, kernel=None: calls.append(x2.shape[0]) or F.linear(
        x2, w.dequantize(x2.dtype)))
    x = torch.randn(triton_w4a16.DENSE_ABOVE_M + 1, 2048, device="cuda", dtype=torch.bfloat16)
    y = layer(x)
    assert calls == [triton_w4a16.DENSE_ABOVE_M + 1]
    layer(x[:triton_w4a16.DENSE_ABOVE_M])
    assert len(calls) == 1  # 256 rows: the tl.dot kernel
    ref = x.float() @ weight.dequantize().cuda().t()
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
