"""The native CPU INT4/INT8 kernel (tiers/native/w4a8.c): every instruction-set path it can build here
against an exact emulation of its arithmetic, its packing, batch invariance, and the fallback without a
compiler."""
from __future__ import annotations

import threading

import pytest
import torch

from tiers.quantization import QuantizedLinear, quantize_int4, quantize_int8
from tiers.native import DEFAULT_FLAGS, NativeKernelError, build_library, native_library
from tiers.quantization.cpu_native import BLOCK, gemm, pack_w4, pack_w8, unpack_w4, unpack_w8

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(native_library() is None, reason="the native kernel does not build here")]

BASE = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=c11")
# One build per instruction-set path the compiler can target on this machine: native, AVX2, plain C.
VARIANTS = {"native": DEFAULT_FLAGS, "avx2": (*BASE, "-mavx2", "-mfma", "-mf16c"), "scalar": BASE}
SHAPES = [(1, 96, 576), (5, 37, 64), (4, 8, 96), (9, 20, 800), (3, 16, 32)]  # (M, N, K): odd block counts too


def _cpu_has(flag: str) -> bool:
    with open("/proc/cpuinfo") as f:
        return any(flag in line.split() for line in f if line.startswith("flags"))


@pytest.fixture(scope="module", params=list(VARIANTS))
def library(request):
    if request.param == "avx2" and not _cpu_has("avx2"):
        pytest.skip("this CPU has no AVX2")
    return build_library(VARIANTS[request.param])


def emulate(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None) -> torch.Tensor:
    """The kernel's arithmetic in float64 with exact integer dots: activations to int8 per block of 32 (d =
    max|x| / 127, round half to even), per block d * scale * sum(code * q) + d * min * sum(q)."""
    m, k = x.shape
    xb = x.double().view(m, k // BLOCK, BLOCK)
    d = xb.abs().amax(-1) / 127
    q = torch.where(d.unsqueeze(-1) > 0, torch.round(xb * (127 / xb.abs().amax(-1, keepdim=True))), 0.0)
    wb = weight.double().view(weight.shape[0], k // BLOCK, BLOCK)
    isum = torch.einsum("mbi,nbi->mnb", q, wb)
    out = (isum * d.unsqueeze(1) * scales.double().unsqueeze(0)).sum(-1)
    if mins is not None:
        out = out + ((q.sum(-1) * d).unsqueeze(1) * mins.double().unsqueeze(0)).sum(-1)
    return out.float()


def _halves(t: torch.Tensor) -> torch.Tensor:
    return t.half().float()  # the kernel stores scales and mins as fp16


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_int4_equals_its_exact_emulation(library, m, n, k):
    torch.manual_seed(m * n + k)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    scales = _halves(torch.rand(n, k // BLOCK) * 0.02 + 1e-3)
    mins = _halves(-8 * scales + torch.randn(n, k // BLOCK) * 1e-3)
    x = torch.randn(m, k)
    x[0, :BLOCK] = 0  # an all-zero block: d = 0
    got = gemm(library, x, pack_w4(codes, scales, mins), k, w8=False)
    want = emulate(x, codes, scales, mins)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_int8_equals_its_exact_emulation(library, m, n, k):
    torch.manual_seed(m * n + k + 1)
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8)  # -128 too: GGUF files may hold it
    scales = _halves(torch.rand(n, k // BLOCK) * 0.01 + 1e-4)
    x = torch.randn(m, k) * 3
    got = gemm(library, x, pack_w8(q, scales), k, w8=True)
    want = emulate(x, q, scales, None)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_int8_with_float_activations_equals_the_float_matmul(library, m, n, k):
    """The lm_head's kernel: INT8 weights, float32 activations (no activation rounding at all)."""
    torch.manual_seed(m * n + k + 2)
    q = torch.randint(-128, 128, (n, k), dtype=torch.int8)
    scales = _halves(torch.rand(n, k // BLOCK) * 0.01 + 1e-4)
    x = torch.randn(m, k)
    got = gemm(library, x, pack_w8(q, scales), k, w8=True, float_activations=True)
    weight = (q.double().view(n, k // BLOCK, BLOCK) * scales.double().unsqueeze(-1)).view(n, k)
    want = (x.double() @ weight.t()).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_packing_round_trips():
    torch.manual_seed(0)
    for k in (32, 64, 96, 800):
        codes = torch.randint(0, 16, (7, k), dtype=torch.uint8)
        scales, mins = _halves(torch.rand(7, k // BLOCK)), _halves(torch.randn(7, k // BLOCK))
        c, s, mn = unpack_w4(pack_w4(codes, scales, mins), k)
        assert torch.equal(c, codes) and torch.equal(s, scales) and torch.equal(mn, mins)
        q = torch.randint(-128, 128, (7, k), dtype=torch.int8)
        q2, s2 = unpack_w8(pack_w8(q, scales), k)
        assert torch.equal(q2, q) and torch.equal(s2, scales)


@pytest.mark.parametrize("threads", [1, 2])
def test_each_row_is_independent_of_its_batch(threads):
    """Bit for bit: a row's output is the same alone, in any slice of a batch, on any number of threads."""
    torch.set_num_threads(threads)
    torch.manual_seed(3)
    library = native_library()
    for k in (96, 576):
        n = 300
        codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
        scales = torch.rand(n, k // BLOCK)
        rows4 = pack_w4(codes, scales, torch.rand(n, k // BLOCK))
        rows8 = pack_w8(torch.randint(-127, 128, (n, k), dtype=torch.int8), scales)
        x = torch.randn(13, k)
        for rows, w8 in ((rows4, False), (rows8, True)):
            full = gemm(library, x, rows, k, w8)
            assert all(torch.equal(full[i:i + 1], gemm(library, x[i:i + 1], rows, k, w8)) for i in range(13))
            assert torch.equal(full[3:9], gemm(library, x[3:9], rows, k, w8))


def test_a_calls_activations_give_the_same_bits_in_a_kept_block_a_grown_one_or_their_own():
    """The activations' arrays of a call up to 1 MB stay with the calling thread (grown when a call needs more), a
    larger call's are its own (kept_block.h): any size in any order, on any thread, gives each row's bits."""
    torch.manual_seed(4)
    library = native_library()
    k, n = 1024, 64
    rows = pack_w4(torch.randint(0, 16, (n, k), dtype=torch.uint8), torch.rand(n, k // BLOCK),
                   torch.rand(n, k // BLOCK))
    x = torch.randn(1100, k)  # all of them: ~1.2 MB of arrays, a block of the call's own
    alone = [gemm(library, x[i:i + 1], rows, k, False) for i in (0, 99, 1099)]
    some = gemm(library, x[:100], rows, k, False)  # ~0.1 MB: the thread's block grows
    every = gemm(library, x, rows, k, False)
    assert torch.equal(some[0:1], alone[0]) and torch.equal(some[99:100], alone[1])
    assert torch.equal(every[:100], some) and torch.equal(every[1099:1100], alone[2])
    assert torch.equal(gemm(library, x[1099:1100], rows, k, False), alone[2])
    elsewhere: dict[str, torch.Tensor] = {}
    thread = threading.Thread(target=lambda: elsewhere.setdefault("rows", gemm(library, x[:100], rows, k, False)))
    thread.start()
    thread.join()
    assert torch.equal(elsewhere["rows"], some)


def test_layers_pick_the_native_kernel_and_read_back_their_weights():
    torch.manual_seed(4)
    w = torch.randn(48, 256) * 0.05
    int4 = QuantizedLinear(quantize_int4(w, 128))
    int8 = QuantizedLinear(quantize_int8(w))
    assert (int4.kernel, int8.kernel) == ("cpu_w4a8", "cpu_w8a32")
    # group 128 repeats its scale over 4 blocks; the fp16 scale and min each round by at most 2^-11 of themselves
    atol = 2 ** -10 * w.abs().max().item()
    torch.testing.assert_close(int4.dequantized_weight(), quantize_int4(w, 128).dequantize(), rtol=0, atol=atol)
    torch.testing.assert_close(int8.dequantized_weight(), quantize_int8(w).dequantize(), rtol=0, atol=atol)
    x = torch.randn(3, 256, dtype=torch.bfloat16)  # any float input: computed in float32, returned in its dtype
    assert int4(x).dtype == torch.bfloat16
    assert QuantizedLinear(quantize_int4(w, 128), kernel="torch").kernel == "cpu_int4pack"
    assert QuantizedLinear(quantize_int4(w[:, :64], 16)).kernel != "cpu_w4a8"  # a group of 16: not native


def test_blockwise_int8_is_lossless_on_q8_0_weights():
    gguf = pytest.importorskip("gguf")
    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    blocks = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    reference = torch.from_numpy(gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).copy())
    for kernel in ("cpu_w8a8", "cpu_w8a32"):
        layer = QuantizedLinear(quantize_int8(reference, blockwise=True), kernel=kernel)
        assert layer.kernel == kernel and torch.equal(layer.dequantized_weight(), reference)


def test_without_a_compiler_the_build_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("AIO_KERNEL_CACHE", str(tmp_path))
    with pytest.raises((NativeKernelError, OSError)):
        build_library(("-O2", "-shared", "-fPIC", "-DUNCACHED_VARIANT"))


def test_the_cache_key_covers_every_file_the_compiler_reads():
    """A build is cached by a hash of its sources: every local header a source includes is hashed too, so editing
    one rebuilds the library instead of loading a stale one."""
    import re

    from tiers.native.build import HEADERS, SOURCES

    included = {name for path in SOURCES for name in re.findall(r'#include "([^"]+)"', path.read_text())}
    assert included and included <= {path.name for path in HEADERS}


def test_without_the_native_library_quantized_models_run_torchs_kernels(tmp_path, llama_path):
    """AIO_CPU_KERNELS=0 (as with no compiler): a fresh process loads an INT4 model on torch's kernels, in bf16,
    with the torch attention backend, and generates."""
    import os
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from tiers import Engine, SamplingParams\n"
        "from tiers.quantization import QuantizedLinear\n"
        f"e = Engine.from_pretrained({str(llama_path)!r}, quantization='int4', quantization_group_size=32,"
        " max_model_len=64)\n"
        "kernels = {m.kernel for m in e.runner.model.modules() if isinstance(m, QuantizedLinear)}\n"
        "out = e.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=0.0))[0]\n"
        "print(sorted(kernels), e.runner.dtype, e.runner.attention_backend.name, len(out.token_ids))\n")
    env = {**os.environ, "AIO_CPU_KERNELS": "0"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "['cpu_int4pack'] torch.bfloat16 torch 4"
