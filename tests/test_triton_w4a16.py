"""The Triton W4A16 kernels (tl.dot and the small-M GEMV) equal x @ Int4Weight.dequantize()^T (interpreter, fp32,
on CPU; fp16/bf16 on CUDA), reject what they cannot run, the wrapper picks the GEMV for small M on CUDA, and
QuantizedLinear picks the Triton path for int4 layers on CUDA only. The CPU cases are marked triton_interpreter: on a
GPU machine they run in a process of their own (tests/test_triton_interpreter.py)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from conftest import TRITON_DEVICES
from tests.int4_helpers import random_int4
from tiers.quantization import Int4Weight, QuantizationError, QuantizedLinear, quantize_int4
from tiers.quantization import methods as methods_module
from tiers.quantization.int8 import quantize_int8

triton = pytest.importorskip("triton")
from tiers.quantization import triton_w4a16  # noqa: E402
from tiers.quantization.triton_w4a16 import (W4A16Config, pick_config, pick_dot_config, uses_gemv,  # noqa: E402
                                             w4a16_matmul)
from tiers.quantization.triton_w4a16_gemv import (GEMV_MAX_M, GEMV_PICK_MAX_M, GemvConfig, gemv_split_k,  # noqa: E402
                                                  gemv_steps, pick_gemv_config)

# The fp32 tests run on every device: in the interpreter on CPU, as real kernels on CUDA.
device_param = pytest.mark.parametrize("device", TRITON_DEVICES)


def reference(x: torch.Tensor, weight: Int4Weight) -> torch.Tensor:
    return (x.cpu().double() @ weight.dequantize().double().t()).float()


def assert_close(y: torch.Tensor, ref: torch.Tensor, rel: float) -> None:
    torch.testing.assert_close(y.cpu().float(), ref, rtol=rel, atol=rel * ref.abs().max().item())


# (M, N, K, group, config): None is the wrapper's own pick. N is never a multiple of the N block except where noted.
CASES = {
    "decode_g32": (1, 40, 256, 32, None),
    "m3_g128": (3, 50, 256, 128, None),
    "m3_g64_n_multiple": (3, 64, 128, 64, None),
    "group_larger_than_block_k": (2, 24, 256, 256, W4A16Config(16, 16, 64)),
    "split_k_uneven": (3, 40, 256, 32, W4A16Config(16, 16, 32, split_k=3)),  # 8 steps: slices of 3, 3, 2
    "split_k_more_than_steps": (1, 20, 64, 32, W4A16Config(16, 32, 32, split_k=8)),
    "two_m_tiles": (17, 20, 64, 32, W4A16Config(16, 32, 64)),
}


# Decode batches and small prefill chunks (5..256 rows) on the tl.dot GEMM: its own tile shapes, and the H100
# table's picks at these shapes (block_n 128 over N = 200: a partial N tile; several M tiles for M = 64 at block_m 16)
GEMM_CASES = {
    "m5_g64": (5, 40, 256, 64, W4A16Config(16, 32, 64)),
    "m17_two_m_tiles_split2": (17, 40, 256, 32, W4A16Config(16, 16, 32, split_k=2)),
    "m17_one_tile_of_32": (17, 24, 256, 128, W4A16Config(32, 16, 128)),
    "m64_g128_four_m_tiles": (64, 40, 512, 128, W4A16Config(16, 32, 64, split_k=3)),
    "m64_one_tile": (64, 24, 256, 128, W4A16Config(64, 16, 64)),
    # uneven slices, slices of one step
    "m5_split_uneven": (5, 40, 256, 32, W4A16Config(16, 32, 32, split_k=3)),
    "m17_one_step_slices": (17, 24, 128, 32, W4A16Config(32, 16, 32, split_k=4)),
}


# (case, activation seed): the GEMM cases keep their own activations
REFERENCE_CASES = ([(case, CASES[case], 1) for case in CASES]
                   + [(case, GEMM_CASES[case], 11) for case in GEMM_CASES])


@device_param
@pytest.mark.parametrize("case,spec,x_seed", REFERENCE_CASES, ids=[case for case, _, _ in REFERENCE_CASES])
def test_matches_dequantized_reference(case, spec, x_seed, device):
    m, n, k, group, config = spec
    weight = random_int4(n, k, group, seed=len(case))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(x_seed))
    y = w4a16_matmul(x.to(device), weight.to(device), config)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert_close(y, reference(x, weight), 1e-5)


@device_param
@pytest.mark.parametrize("m", [5, 17, 64])
def test_gemm_with_the_h100_table_configs(m, device, monkeypatch):
    """The configs pick_dot_config gives a 132-SM GPU, run here (in the interpreter on CPU) at a small shape."""
    monkeypatch.setattr(triton_w4a16, "_interpreting", lambda: False)
    monkeypatch.setattr(triton_w4a16, "_num_sms", lambda device: 132)
    config = pick_dot_config(m, 200, 512, 128, torch.device("cuda"))
    monkeypatch.undo()
    bucket = next(c for max_m, c, _ in triton_w4a16.DOT_TABLE if m <= max_m)
    assert (config.block_m, config.block_n, config.block_k) == (bucket.block_m, bucket.block_n, bucket.block_k)
    assert config.block_m == max(16, triton.next_power_of_2(m))
    weight = random_int4(200, 512, 128, seed=m)
    x = torch.randn(m, 512, generator=torch.Generator().manual_seed(m))
    assert_close(w4a16_matmul(x.to(device), weight.to(device), config), reference(x, weight), 1e-5)


@device_param
def test_dequantize_kernel_equals_the_reference_dequantizer(device):
    """The dense path's Triton dequantizer (the interpreter on CPU): every group size it takes, N not a multiple
    of its block, fp32 (and bf16 / fp16 on CUDA)."""
    from tiers.quantization.triton_w4a16 import launch_dequantize

    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if device == "cuda" else [])
    for group, k in ((32, 96), (64, 512), (128, 256), (96, 192)):
        weight = random_int4(45, k, group, seed=group)
        for dtype in dtypes:
            out = torch.full((45, k), float("nan"), dtype=dtype, device=device)
            launch_dequantize(weight.to(device), out)
            # exact in the interpreter; a fused multiply-add on the GPU may round the last bit differently
            torch.testing.assert_close(out.cpu(), weight.dequantize(dtype), rtol=1e-6 if dtype == torch.float32
                                       else 1e-2, atol=1e-6)


@device_param
def test_rtn_weight_3d_and_strided_input(device):
    """A real RTN weight; x 3-D and a strided view (row stride > K, as a slice of a fused projection's output)."""
    weight = quantize_int4(torch.randn(36, 128, generator=torch.Generator().manual_seed(2)), 32).to(device)
    wide = torch.randn(2, 2, 200, generator=torch.Generator().manual_seed(3)).to(device)  # a CPU generator
    x = wide[..., 10:138]
    y = w4a16_matmul(x, weight)
    assert y.shape == (2, 2, 36)
    assert_close(y, reference(x.reshape(-1, 128), weight.to("cpu")).view(2, 2, 36), 1e-5)
    xt = torch.randn(128, 3, device=device).t()  # column-major: a K stride of 3
    assert_close(w4a16_matmul(xt, weight), reference(xt, weight.to("cpu")), 1e-5)


@device_param
def test_no_rows(device):
    weight = random_int4(16, 64, 32).to(device)
    assert w4a16_matmul(torch.randn(0, 64, device=device), weight).shape == (0, 16)
    assert w4a16_matmul(torch.randn(2, 0, 64, device=device), weight).shape == (2, 0, 16)


@device_param
def test_rejects_what_it_cannot_run(device, monkeypatch):
    weight = random_int4(16, 64, 32)
    with pytest.raises(ValueError, match="features"):
        w4a16_matmul(torch.randn(2, 96), weight)
    with pytest.raises(ValueError, match="2-D"):
        w4a16_matmul(torch.randn(64), weight)
    with pytest.raises(ValueError, match="2-D"):
        w4a16_matmul(torch.randn(1, 1, 2, 64), weight)
    with pytest.raises(ValueError, match="group_size"):
        w4a16_matmul(torch.randn(2, 64), random_int4(16, 64, 16))
    with pytest.raises(ValueError, match="dtype"):
        w4a16_matmul(torch.randn(2, 64, dtype=torch.float64), weight)
    if device == "cpu":
        with pytest.raises(ValueError, match="float32 only"):
            w4a16_matmul(torch.randn(2, 64, dtype=torch.bfloat16), weight)
    with pytest.raises(ValueError, match="one device"):
        w4a16_matmul(torch.randn(2, 64, device="meta"), weight)
    with pytest.raises(ValueError, match="Int4Weight"):
        w4a16_matmul(torch.randn(2, 64), quantize_int8(torch.randn(16, 64)))
    x, weight = torch.randn(2, 64, device=device), weight.to(device)
    with pytest.raises(ValueError, match="power of two"):
        w4a16_matmul(x, weight, W4A16Config(16, 24, 32))
    with pytest.raises(ValueError, match="too small"):
        w4a16_matmul(x, weight, W4A16Config(16, 8, 32))
    with pytest.raises(ValueError, match="split_k"):
        w4a16_matmul(x, weight, W4A16Config(16, 16, 32, split_k=0))
    monkeypatch.setattr(triton_w4a16, "_interpreting", lambda: False)  # as in a process with Triton compiled
    with pytest.raises(ValueError, match="on CPU the Triton kernel runs only in the interpreter"):
        w4a16_matmul(torch.randn(2, 64), weight.to("cpu"))


def test_cuda_dot_configs_split_k_only_when_tiles_are_few(monkeypatch):
    """The tl.dot kernel's CUDA table (checked here without a GPU) on Llama-3-8B / 70B shapes, a 132-SM H100: all
    the rows of a decode batch in one tile, split-K only while the tiles leave SMs idle (every slice >= 4 steps)."""
    monkeypatch.setattr(triton_w4a16, "_interpreting", lambda: False)
    monkeypatch.setattr(triton_w4a16, "_num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    o_proj = pick_dot_config(16, 4096, 4096, 128, cuda)
    assert (o_proj.block_m, o_proj.block_n, o_proj.split_k) == (16, 64, 8)  # 64 N tiles x 8 slices of 4 steps
    assert pick_dot_config(5, 4096, 4096, 128, cuda) == o_proj  # 5..16 rows: one bucket
    assert pick_dot_config(16, 28672, 4096, 128, cuda).split_k == 1  # gate_up: 448 tiles, 2 per SM wanted
    assert pick_dot_config(16, 10240, 8192, 128, cuda).split_k == 2  # 70B qkv: 160 tiles
    assert pick_dot_config(17, 57344, 8192, 128, cuda).split_k == 1  # 70B gate_up: 896 tiles
    down = pick_dot_config(64, 4096, 14336, 128, cuda)
    assert down == pick_config(64, 4096, 14336, 128, cuda)  # past GEMV_PICK_MAX_M the wrapper runs tl.dot
    assert (down.block_m, down.split_k) == (64, 8) and 14336 // 64 // down.split_k >= 4
    assert pick_dot_config(16, 4096, 256, 32, cuda).split_k == 2  # short K: every slice keeps >= 4 steps
    assert pick_dot_config(128, 8192, 8192, 128, cuda).block_m == 128
    prefill = pick_config(512, 4096, 4096, 128, cuda)
    assert (prefill.block_m, prefill.block_n, prefill.split_k) == (128, 128, 1)


def test_rows_pick_the_path(monkeypatch):
    """GEMV up to GEMV_PICK_MAX_M rows, tl.dot up to DENSE_ABOVE_M, the dense path above, on CUDA only."""
    from tiers.quantization.triton_w4a16 import DENSE_ABOVE_M, uses_dense

    assert GEMV_PICK_MAX_M == 2 and DENSE_ABOVE_M == 256
    assert not uses_dense(DENSE_ABOVE_M, on_cuda=True) and uses_dense(DENSE_ABOVE_M + 1, on_cuda=True)
    assert not uses_dense(4096, on_cuda=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert not uses_dense(4096, on_cuda=True)  # a graph being captured keeps the tl.dot kernel


# --- the small-M GEMV kernel --------------------------------------------------------------------------------------

def gemv_tolerance(x: torch.Tensor, weight: Int4Weight) -> torch.Tensor:
    """A first-order bound on the GEMV's fp32 rounding, per output [M, N]: every term it sums is at most
    |x| * (48 s + |z|) (16 s * f with f < 2, plus x * (z - 16 s)), and no chain of additions is longer than 8 (the
    nibbles of a word) + log2(K) (the segment and step trees) + K / 32 (steps of >= 32 columns) + 2."""
    n, k = weight.shape
    per_column = (48 * weight.scales + weight.mins.abs()).repeat_interleave(weight.group_size, dim=1)  # [N, K]
    magnitude = x.reshape(-1, k).cpu().double().abs() @ per_column.double().t()
    depth = 8 + math.log2(k) + k / 32 + 2
    return depth * torch.finfo(torch.float32).eps * magnitude


def assert_gemv_close(y: torch.Tensor, x: torch.Tensor, weight: Int4Weight) -> None:
    ref = reference(x.reshape(-1, weight.shape[1]), weight)
    error = (y.reshape(ref.shape).cpu().double() - ref.double()).abs()
    bound = gemv_tolerance(x, weight)
    worst = error.argmax()
    assert bool((error <= bound).all()), f"error {error.flatten()[worst]:.3g} > bound {bound.flatten()[worst]:.3g}"


# (M, N, K, group, GemvConfig). N is never a multiple of block_n.
GEMV_CASES = {
    "m1_g32_four_segments": (1, 40, 256, 32, GemvConfig(16, 128)),
    "m2_g64_split2": (2, 20, 512, 64, GemvConfig(8, 256, split_k=2)),
    "m3_g128_step_inside_group": (3, 50, 256, 128, GemvConfig(16, 64)),
    "m5_g32_split_uneven": (5, 24, 384, 32, GemvConfig(16, 128, split_k=2)),  # 3 steps: slices of 2 and 1
    "m8_g128_block_k_halved": (8, 36, 384, 128, GemvConfig(32, 256, split_k=4)),  # K % 256: steps of 128, 3 slices
    "m1_split_more_than_steps": (1, 12, 128, 64, GemvConfig(4, 64, split_k=8)),
    "m4_g96_not_a_power_of_two": (4, 10, 192, 96, GemvConfig(8, 64)),  # segments of 32 columns
}


@device_param
@pytest.mark.parametrize("x_in_tile", [False, True])
@pytest.mark.parametrize("case", list(GEMV_CASES))
def test_gemv_matches_dequantized_reference(case, x_in_tile, device):
    m, n, k, group, config = GEMV_CASES[case]
    config = dataclasses.replace(config, x_in_tile=x_in_tile)
    weight = random_int4(n, k, group, seed=len(case))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(7))
    y = w4a16_matmul(x.to(device), weight.to(device), config)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert_gemv_close(y, x, weight)


@device_param
@pytest.mark.parametrize("x_in_tile", [False, True])
def test_gemv_3d_and_strided_input(x_in_tile, device):
    """x [B, S, K] (M = 6), a slice with a row stride > K, and a column-major x (K stride 3)."""
    weight = quantize_int4(torch.randn(36, 128, generator=torch.Generator().manual_seed(2)), 32)
    config = GemvConfig(16, 128, split_k=2, x_in_tile=x_in_tile)
    x = torch.randn(2, 3, 128, generator=torch.Generator().manual_seed(3))
    y = w4a16_matmul(x.to(device), weight.to(device), config)
    assert y.shape == (2, 3, 36)
    assert_gemv_close(y, x, weight)
    wide = torch.randn(2, 1, 200, generator=torch.Generator().manual_seed(4))
    assert_gemv_close(w4a16_matmul(wide.to(device)[..., 10:138], weight.to(device), config), wide[..., 10:138], weight)
    xt = torch.randn(128, 3, generator=torch.Generator().manual_seed(5)).t()
    assert_gemv_close(w4a16_matmul(xt.to(device), weight.to(device), config), xt, weight)


def test_gemv_steps_and_slices():
    assert gemv_steps(4096, 128, GemvConfig(block_k=1024)) == (128, 1024, 4)
    assert gemv_steps(14336, 32, GemvConfig(block_k=1024)) == (32, 1024, 14)
    assert gemv_steps(384, 128, GemvConfig(block_k=256)) == (128, 128, 3)  # 256 does not divide K
    assert gemv_steps(192, 96, GemvConfig(block_k=64)) == (32, 64, 3)
    assert gemv_split_k(4096, 128, GemvConfig(block_k=1024, split_k=8)) == 4  # no more slices than steps
    assert gemv_split_k(384, 32, GemvConfig(block_k=128, split_k=2)) == 2
    assert gemv_split_k(640, 128, GemvConfig(block_k=128, split_k=4)) == 3  # 5 steps: 2, 2, 1, not 2, 2, 1, 0


def test_wrapper_picks_the_gemv_for_small_m_on_cuda(monkeypatch):
    """The choice, without a GPU: a pure rule, and pick_config as if Triton were compiled for a 132-SM H100."""
    assert uses_gemv(1, on_cuda=True) and uses_gemv(GEMV_PICK_MAX_M, on_cuda=True)
    assert not uses_gemv(GEMV_PICK_MAX_M + 1, on_cuda=True) and not uses_gemv(1, on_cuda=False)
    assert GEMV_PICK_MAX_M <= GEMV_MAX_M
    assert isinstance(pick_config(1, 4096, 4096, 128, torch.device("cpu")), W4A16Config)  # interpreter: tl.dot
    monkeypatch.setattr(triton_w4a16, "_interpreting", lambda: False)
    monkeypatch.setattr(triton_w4a16, "_num_sms", lambda device: 132)
    cuda = torch.device("cuda")
    for m in range(1, GEMV_PICK_MAX_M + 1):
        assert pick_config(m, 4096, 4096, 128, cuda) == pick_gemv_config(m, 4096, 4096, 128, 132)
    assert isinstance(pick_config(GEMV_PICK_MAX_M + 1, 4096, 4096, 128, cuda), W4A16Config)
    assert isinstance(pick_config(1, 4096, 4096, 128, torch.device("cpu")), W4A16Config)


def test_gemv_table_on_llama_shapes():
    """Split-K where the N tiles alone leave SMs idle (132 SMs) or a slice would walk more than 16 steps, never more
    slices than half the steps."""
    assert pick_gemv_config(1, 4096, 4096, 128, 132) == GemvConfig(16, 1024, 1)  # o_proj: 256 tiles
    assert pick_gemv_config(1, 4096, 14336, 128, 132).split_k == 1  # 8B down_proj: 256 tiles of 14 steps
    assert pick_gemv_config(1, 8192, 28672, 128, 132).split_k == 2  # 70B down_proj: 512 tiles of 28 steps
    assert pick_gemv_config(1, 8192, 8192, 128, 132).split_k == 1  # 70B o_proj: 512 tiles of 8 steps
    assert pick_gemv_config(1, 28672, 4096, 128, 132).split_k == 1  # gate_up
    assert pick_gemv_config(1, 1024, 4096, 128, 132).split_k == 2  # k/v_proj: 64 tiles, 4 steps
    assert pick_gemv_config(1, 1024, 14336, 128, 132).split_k == 4  # 64 tiles x 4 >= 132
    assert pick_gemv_config(8, 4096, 4096, 128, 132).block_n == 32


@pytest.mark.triton_interpreter
def test_gemv_dispatch_runs_the_gemv_kernel(monkeypatch):
    """Where pick_config says GEMV, w4a16_matmul launches it (here: the interpreter standing in for CUDA)."""
    launched = []
    original = triton_w4a16.launch_gemv

    def spy(*args):
        launched.append(args[-2])
        original(*args)

    monkeypatch.setattr(triton_w4a16, "launch_gemv", spy)
    monkeypatch.setattr(triton_w4a16, "uses_gemv", lambda m, on_cuda: m <= GEMV_PICK_MAX_M)
    weight = random_int4(24, 128, 32)
    x = torch.randn(2, 128)
    assert_gemv_close(w4a16_matmul(x, weight), x, weight)
    assert len(launched) == 1 and isinstance(launched[0], GemvConfig)
    w4a16_matmul(torch.randn(GEMV_PICK_MAX_M + 1, 128), weight)
    assert len(launched) == 1


@device_param
def test_gemv_rejects_bad_configs(device):
    weight = random_int4(16, 64, 32).to(device)
    x = torch.randn(2, 64, device=device)
    for config, message in ((GemvConfig(block_n=24), "block_n must be a power of two"),
                            (GemvConfig(block_k=48), "block_k must be a power of two"),
                            (GemvConfig(block_k=16), "block_k must be >= 32"),
                            (GemvConfig(num_warps=3), "num_warps must be a power of two"),
                            (GemvConfig(split_k=0), "split_k must be >= 1"),
                            (GemvConfig(num_stages=0), "num_stages must be >= 1")):
        with pytest.raises(ValueError, match=message):
            w4a16_matmul(x, weight, config)
    with pytest.raises(ValueError, match=f"at most {GEMV_MAX_M} rows"):
        w4a16_matmul(torch.randn(GEMV_MAX_M + 1, 64, device=device), weight, GemvConfig())


# --- QuantizedLinear's choice ---------------------------------------------------------------------------------

def test_quantized_linear_picks_triton_for_int4_on_cuda_only():
    pick = QuantizedLinear._pick_kernel
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert pick(random_int4(32, 128, 32), cuda) == "triton_w4a16"
    assert pick(random_int4(32, 128, 128), cuda) == "triton_w4a16"
    assert pick(random_int4(32, 128, 16), cuda) == "dequant"  # a group the kernel does not take
    assert pick(quantize_int8(torch.randn(32, 128)), cuda) == "dequant"
    assert pick(random_int4(32, 128, 32), cpu, "torch") == "cpu_int4pack"
    assert QuantizedLinear(random_int4(32, 128, 32)).kernel in ("cpu_int4pack", "cpu_w4a8")  # built on CPU


def test_quantized_linear_without_triton_falls_back(monkeypatch):
    monkeypatch.setattr(methods_module, "triton_w4a16_ok", lambda weight: False)
    assert QuantizedLinear._pick_kernel(random_int4(32, 128, 32), torch.device("cuda")) == "dequant"


@device_param
def test_quantized_linear_forward_through_the_kernel(device):
    """Forced (on CPU the interpreter runs it): bias, 3-D input, and the weight it reports."""
    weight = random_int4(40, 128, 64, seed=5)
    bias = torch.randn(40)
    layer = QuantizedLinear(weight, bias, device=device, kernel="triton_w4a16")
    assert layer.kernel == "triton_w4a16"
    x = torch.randn(2, 3, 128)
    ref = reference(x.reshape(-1, 128), weight).view(2, 3, 40) + bias
    x = x.to(device)
    assert_close(layer(x), ref, 1e-5)
    assert torch.equal(layer.dequantized_weight().cpu(), weight.dequantize())
    with pytest.raises(QuantizationError, match="triton_w4a16"):
        QuantizedLinear(random_int4(40, 128, 16), kernel="triton_w4a16")
    with pytest.raises(QuantizationError, match="triton_w4a16"):
        QuantizedLinear(quantize_int8(torch.randn(40, 128)), kernel="triton_w4a16")


# --- CUDA ---------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 5, 17, 33, 64, 200, 256, 257, 1024])  # GEMV, tl.dot, dense (> DENSE_ABOVE_M)
@pytest.mark.parametrize("n, k, group", [(1000, 1024, 128), (300, 512, 32), (4096, 4096, 128)])
def test_cuda_matches_reference(dtype, m, n, k, group):
    weight = random_int4(n, k, group, seed=m).to("cuda")
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to("cuda", dtype)
    y = w4a16_matmul(x, weight)
    assert y.dtype == dtype and y.shape == (m, n)
    # The reference from the very (rounded) activations the kernel sees; the kernel's own error is the output cast.
    assert_close(y, reference(x.float(), weight.to("cpu")), 1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("config", [None, GemvConfig(32, 512, 2, num_warps=8),
                                    GemvConfig(16, 1024, num_warps=4, x_in_tile=True)])
def test_cuda_gemv_matches_reference(dtype, m, config):
    if config is None:
        config = pick_gemv_config(m, 1000, 1024, 128, torch.cuda.get_device_properties(0).multi_processor_count)
    weight = random_int4(1000, 1024, 128, seed=m).to("cuda")
    x = torch.randn(m, 1024, generator=torch.Generator().manual_seed(m)).to("cuda", dtype)
    y = w4a16_matmul(x, weight, config)
    assert y.dtype == dtype and y.shape == (m, 1000)
    assert_close(y, reference(x.float(), weight.to("cpu")), 1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.gpu
def test_cuda_quantized_linear_uses_the_kernel():
    weight = quantize_int4(torch.randn(256, 512), 128)
    layer = QuantizedLinear(weight, torch.randn(256), device="cuda")
    assert layer.kernel == "triton_w4a16"
    x = torch.randn(3, 512, device="cuda", dtype=torch.bfloat16)
    ref = reference(x.float(), weight) + layer.bias.cpu().float()
    assert_close(layer(x), ref, 1e-2)
