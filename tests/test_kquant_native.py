"""GGUF block types run as stored on the native CPU kernel (tiers/native/kquant.c): K-quants (Q4_K, Q5_K, Q6_K)
and Q5_0 / Q5_1 / Q8_0 (Q4_0 / Q4_1 too). Layouts against the gguf package's dequantizer (bit for bit), matmuls
against an exact emulation of the kernel's arithmetic and against the dequantized float matmul, on every
instruction-set path this machine can build, batch invariance, mixed-type fused weights, the layer."""
from __future__ import annotations

import shutil
import subprocess
import threading

import numpy as np
import pytest
import torch

from tests.kquant_helpers import emulate, make_blocks
from tiers.native import DEFAULT_FLAGS, build_library, native_library
from tiers.quantization.int4 import QuantizationError
from tiers.quantization.kquant import (BLOCK_TYPES, REPACKED, STORED_TYPES, KQuantWeight, gather_rows, gemm, quantize,
                                       repack)
from tiers.quantization.kquant_dense import dequantize_into

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(native_library() is None, reason="the native kernel does not build here")]

BASE = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=c11")
AVX2 = ("-mavx2", "-mfma", "-mf16c")
# One build per instruction-set path this machine can run: native, AVX-512 VNNI, AVX2, plain C.
VARIANTS = {"native": DEFAULT_FLAGS, "avx512vnni": (*BASE, *AVX2, "-mavx512f", "-mavx512bw", "-mavx512vl",
                                                    "-mavx512vnni"),
            "avx2": (*BASE, *AVX2), "scalar": BASE}
REQUIRES = {"avx512vnni": "avx512_vnni", "avx2": "avx2"}
# the file's block types, and Q4_K / Q6_K also in the kernel's repacked layout (built by repack from the stored)
TYPES = [*STORED_TYPES, *REPACKED.values()]
STORED_OF = {packed: kind for kind, packed in REPACKED.items()}


def _cpu_has(flag: str) -> bool:
    with open("/proc/cpuinfo") as f:
        return any(flag in line.split() for line in f if line.startswith("flags"))


@pytest.fixture(scope="module", params=list(VARIANTS))
def library(request):
    if request.param in REQUIRES and not _cpu_has(REQUIRES[request.param]):
        pytest.skip(f"this CPU has no {REQUIRES[request.param]}")
    lib = build_library(VARIANTS[request.param])
    if request.param != "native":
        assert lib.isa == request.param
    return lib


def _weight(kind: str, n: int, k: int, seed: int) -> tuple[KQuantWeight, np.ndarray]:
    """kind's weight and the stored blocks it came from (a repacked kind: its stored type's, then repacked)."""
    stored = STORED_OF.get(kind, kind)
    blocks = make_blocks(stored, n, k, np.random.default_rng(seed))
    weight = KQuantWeight.from_blocks(stored, blocks, n, k)
    return (repack(native_library(), weight) if kind in STORED_OF else weight), blocks


def _gguf_dequantize(kind: str, blocks: np.ndarray, n: int, k: int) -> torch.Tensor:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    kind = STORED_OF.get(kind, kind)
    return torch.from_numpy(dequantize(blocks, GGMLQuantizationType[kind]).copy()).reshape(n, k)


def act_block(kind: str) -> int:
    """The kernel's activation block: 256 for the K-quants (ggml's Q8_K), 32 for the 32-blocks (Q8_0)."""
    return 256 if "_K" in kind else 32


def test_quantize_makes_ggufs_blocks_and_refuses_what_gguf_cannot():
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import quantize as gguf_quantize

    x = torch.randn(3, 256)
    weight = quantize(x, "Q5_0")
    assert weight.types == ("Q5_0",) and weight.shape == (3, 256)
    assert np.array_equal(weight.parts[0][1].numpy(), gguf_quantize(x.numpy(), GGMLQuantizationType.Q5_0))
    with pytest.raises(QuantizationError, match="K-quant"):
        quantize(x, "Q4_K")
    with pytest.raises(QuantizationError, match="multiples of 32"):
        quantize(torch.randn(3, 100), "Q5_0")


@pytest.mark.parametrize("kind", TYPES)
def test_dequantized_rows_equal_gguf_bit_for_bit(kind):
    for n, k, seed in ((5, 256, 0), (33, 768, 1), *(((5, 896, 2),) if BLOCK_TYPES[kind][1] < 256 else ())):
        weight, blocks = _weight(kind, n, k, seed)
        want = _gguf_dequantize(kind, blocks, n, k)
        assert torch.equal(weight.dequantize(), want)
        if kind in STORED_OF:  # a layout of the native kernel's own: gguf cannot read it
            with pytest.raises(QuantizationError, match="repacked"):
                weight._dequantize_gguf(torch.float32)
            assert not np.array_equal(weight.parts[0][1].numpy(), blocks)  # the codes did move
        else:
            assert torch.equal(weight._dequantize_gguf(torch.float32), want)
        assert torch.equal(gather_rows(weight, torch.tensor([[3, 0], [n - 1, 3]]), torch.float32),
                           want[[3, 0, n - 1, 3]].view(2, 2, k))
        for outside in (n, -1):  # an id outside the table is an error, never another row or garbage
            with pytest.raises(IndexError, match="outside"):
                gather_rows(weight, torch.tensor([0, outside]), torch.float32)


@pytest.mark.parametrize("kind", TYPES)
def test_the_dense_paths_weight_is_the_stored_blocks_on_every_isa(library, kind):
    """The dense path's dequantization (threaded, vectorized) gives gguf's float32 values, and in bfloat16 exactly
    torch's round-to-nearest-even of them."""
    weight, blocks = _weight(kind, 37, 512, 4)
    want = _gguf_dequantize(kind, blocks, 37, 512)
    mixed = KQuantWeight.cat([weight, _weight("Q8_0", 3, 512, 5)[0]])  # two parts, one buffer
    assert torch.equal(dequantize_into(library, weight, torch.float32), want)
    assert torch.equal(dequantize_into(library, weight, torch.bfloat16), want.to(torch.bfloat16))
    assert torch.equal(dequantize_into(library, mixed, torch.float32),
                       torch.cat([want, _gguf_dequantize("Q8_0", _weight("Q8_0", 3, 512, 5)[1], 3, 512)]))


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("m,n,k", [(1, 40, 256), (5, 19, 512), (9, 16, 768)])
def test_matmul_equals_its_exact_emulation_on_every_isa(library, kind, m, n, k):
    weight, blocks = _weight(kind, n, k, m * n + k)
    torch.manual_seed(m + n)
    x = torch.randn(m, k)
    block = act_block(kind)
    x[0, :block] = 0  # an all-zero activation block: d = 0
    got = gemm(library, x, weight)
    want = emulate(x, _gguf_dequantize(kind, blocks, n, k), block)
    # float rounding only: each block's scale * d_act product and the float sums, ~1e-7 relative each
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    # and within the activations' rounding of the float matmul: int8 steps of max|x| / 127 per block
    ref = (x.double() @ _gguf_dequantize(kind, blocks, n, k).double().t())
    step = x.abs().view(m, k // block, block).amax(-1) / 127  # |error per element| <= step / 2
    bound = 0.5 * (step.double().repeat_interleave(block, 1) @ _gguf_dequantize(kind, blocks, n, k).double().abs().t())
    assert ((got.double() - ref).abs() <= bound + 1e-6).all()


# the bytes of a stored block that hold codes (the rest: scales, mins): every code at its largest when all are 0xFF
CODE_BYTES = {"Q4_K": slice(16, 144), "Q6_K": slice(0, 192), "Q5_0": slice(2, 22)}


@pytest.mark.parametrize("kind", REPACKED.values())
def test_the_largest_codes_times_the_largest_activations_stay_exact_on_every_isa(library, kind):
    """Every code at its largest (15, 63, 31) against activations that all quantize to +127 or -127: the integer sums'
    worst case. AVX2 adds pmaddubsw's int16 pair sums in int16 before widening; one pair too many would wrap."""
    stored = STORED_OF[kind]
    n, k = 9, 1024
    blocks = make_blocks(stored, n, k, np.random.default_rng(3))
    per_block = BLOCK_TYPES[stored][2]
    view = blocks.reshape(n, k // BLOCK_TYPES[stored][1], per_block)
    view[:, :, CODE_BYTES[stored]] = 0xFF
    weight = repack(native_library(), KQuantWeight.from_blocks(stored, blocks, n, k))
    dense = _gguf_dequantize(kind, blocks, n, k)
    x = torch.ones(8, k)
    x[1::2] = -1.0
    x[4:, k // 2:] *= -1.0  # signs that change within a row
    got = gemm(library, x, weight)
    want = emulate(x, dense, act_block(kind))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("kind", TYPES)
# (1, 25): a decode step, weight rows in pairs and one left; (2, 25), (5, 25): verifications, whose Q4_K_R rows go two
# at a time on AVX-512 VNNI
@pytest.mark.parametrize("m,n", [(6, 24), (1, 25), (2, 25), (5, 25)])
def test_every_isa_gives_the_same_bits(kind, m, n):
    """Exact integer sums and the same float operations in the same order on every path: identical results. Rows of
    768: Q4_K_R's pair of groups and its odd last group; of 384: Q5_0_R's group of 8 blocks and its last group of 4."""
    for k in (512, 768) if BLOCK_TYPES[kind][1] == 256 else (384, 512, 768):
        weight, _ = _weight(kind, n, k, 7)
        x = torch.randn(m, k)
        results = {}
        for name, flags in VARIANTS.items():
            if name in REQUIRES and not _cpu_has(REQUIRES[name]):
                continue
            results[name] = gemm(build_library(flags), x, weight)
        assert len(results) >= 2
        first = next(iter(results.values()))
        assert all(torch.equal(first, r) for r in results.values()), (k, list(results))


@pytest.mark.parametrize("threads", [1, 2])
def test_k_blocked_tiles_give_the_same_bits(threads):
    """A tile of several rows over a row wider than the L1 holds runs K in blocks of 8 groups (AVX-512 VNNI): the
    same operations in the same order as unblocked. A build that blocks every tile of 2 rows or more gives the bits
    of the default build, which blocks none of these (rows of 2,304: a block of 8 groups and one left over)."""
    if not _cpu_has("avx512_vnni"):
        pytest.skip("the blocked tiles are the AVX-512 VNNI path's")
    torch.set_num_threads(threads)
    default, blocked = build_library(VARIANTS["avx512vnni"]), build_library((*VARIANTS["avx512vnni"],
                                                                            "-DKR_BLOCKED_FROM=0"))
    assert blocked.lib.aio_kq_blocked_from() == 0 and default.lib.aio_kq_blocked_from() > 8 * 2304
    for kind in REPACKED.values():
        weight, _ = _weight(kind, 40, 2304, 12)
        for m in (2, 5, 8, 13):
            x = torch.randn(m, 2304)
            assert torch.equal(gemm(default, x, weight), gemm(blocked, x, weight)), (kind, m)


def test_a_thread_out_of_work_takes_the_rest_of_anothers_and_the_bits_stay():
    """Each thread starts on its contiguous share of the chunks, and one that finishes early takes the back half of
    the largest share left: with more threads than this machine's cores (so that they run unevenly and take from
    each other), every output row is computed once, as one thread computes it."""
    library = native_library()
    for kind, k in (("Q4_K_R", 512), ("Q6_K_R", 768), ("Q5_0_R", 896)):
        weight, _ = _weight(kind, 4000, k, 13)
        x = torch.randn(5, k)
        torch.set_num_threads(1)
        want = gemm(library, x, weight)
        for threads in (2, 3, 4, 7):
            torch.set_num_threads(threads)
            for _ in range(10):
                assert torch.equal(gemm(library, x, weight), want), (kind, threads)
    torch.set_num_threads(1)


def test_threads_split_a_fused_weight_by_its_parts_bytes():
    """Parts of different bytes per row (Q4_K, Q6_K, Q8_0), large enough to be split between threads: each thread's
    run starts where its share of the bytes does, inside any part, and every output row is computed once, with the
    bits of each part alone on one thread."""
    library = native_library()
    parts = [_weight(kind, n, 512, seed)[0] for kind, n, seed in (("Q4_K", 300, 1), ("Q6_K", 200, 2), ("Q8_0", 100, 3))]
    fused = KQuantWeight.cat(parts)
    x = torch.randn(5, 512)
    torch.set_num_threads(1)
    want = torch.cat([gemm(library, x, w) for w in parts], dim=1)
    try:
        for threads in (2, 3, 4, 7):
            torch.set_num_threads(threads)
            gemm(library, -x, fused)  # a row no thread computes would keep this call's values
            assert torch.equal(gemm(library, x, fused), want), threads
    finally:
        torch.set_num_threads(1)


def test_tiles_are_blocked_from_three_quarters_of_the_l1():
    """The blocking threshold (R x K) comes from this machine's L1 data cache, not from one CPU model's. The C
    library asks glibc's sysconf; `getconf` is glibc's own reader of the same value (Python's os.sysconf lacks the
    name on some builds)."""
    getconf = shutil.which("getconf")
    if getconf is None:
        pytest.skip("no getconf to read the L1 data cache's size with")
    done = subprocess.run([getconf, "LEVEL1_DCACHE_SIZE"], capture_output=True, text=True)
    l1 = int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0
    want = l1 // 4 * 3 if 8192 <= l1 <= 4 << 20 else 36864
    assert native_library().lib.aio_kq_blocked_from() == want


@pytest.mark.parametrize("threads", [1, 2])
def test_each_row_is_independent_of_its_batch(threads):
    torch.set_num_threads(threads)
    library = native_library()
    for kind, k in (("Q4_K", 512), ("Q6_K", 512), ("Q4_K_R", 512), ("Q4_K_R", 768), ("Q6_K_R", 512), ("Q5_0", 512),
                    ("Q5_0_R", 512), ("Q5_0_R", 896), ("Q8_0", 512), ("Q5_1", 512)):
        weight, _ = _weight(kind, 300, k, 11)
        x = torch.randn(13, k)
        full = gemm(library, x, weight)
        assert all(torch.equal(full[i:i + 1], gemm(library, x[i:i + 1], weight)) for i in range(13))
        assert torch.equal(full[3:9], gemm(library, x[3:9], weight))


@pytest.mark.parametrize("threads", [1, 2])
def test_two_weight_rows_at_a_time_give_each_rows_own_bits(threads):
    """2 to 5 activation rows take a Q4_K_R's, Q6_K_R's or Q5_0_R's weight rows two at a time (AVX-512 VNNI): each
    output has the bits of its row alone. An odd number of weight rows (one left), rows of 2, 3 and 5 groups (Q4_K_R:
    an odd last group; Q5_0_R: a last group of 4 blocks at 1,280); 5 rows of 7,680 pass the blocking threshold of a
    tile of single rows, not of a paired one."""
    torch.set_num_threads(threads)
    library = native_library()
    for kind in ("Q4_K_R", "Q6_K_R", "Q5_0_R"):
        for k in (512, 768, 1280, 7680):
            weight, _ = _weight(kind, 37, k, 5)
            for m in (2, 3, 4, 5, 6):
                x = torch.randn(m, k)
                alone = torch.cat([gemm(library, x[i:i + 1], weight) for i in range(m)])
                assert torch.equal(gemm(library, x, weight), alone), (kind, k, m)


def test_a_calls_activations_give_the_same_bits_in_a_kept_block_a_grown_one_or_their_own():
    """A call's activation arrays up to 1 MB stay with the calling thread for its next call (grown when a call needs
    more), a larger call's are its own: a batch of each size in any order, on any thread, gives each row's bits."""
    library = native_library()
    weight, _ = _weight("Q4_K_R", 64, 1024, 5)
    x = torch.randn(600, 1024)  # all 600 rows: ~2 MB of arrays, a block of the call's own
    alone = [gemm(library, x[i:i + 1], weight) for i in (0, 99, 599)]
    some = gemm(library, x[:100], weight)  # ~0.3 MB: the thread's block grows
    every = gemm(library, x, weight)
    assert torch.equal(some[0:1], alone[0]) and torch.equal(some[99:100], alone[1])
    assert torch.equal(every[:100], some) and torch.equal(every[599:600], alone[2])
    assert torch.equal(gemm(library, x[599:600], weight), alone[2])
    elsewhere: dict[str, torch.Tensor] = {}
    thread = threading.Thread(target=lambda: elsewhere.setdefault("rows", gemm(library, x[:100], weight)))
    thread.start()
    thread.join()
    assert torch.equal(elsewhere["rows"], some)


def test_a_fused_weight_keeps_each_parts_type():
    """A Q4_K_M qkv: Q5_0 q and k next to a Q8_0 v, and a Q4_K / Q6_K mix: one output, one call per part."""
    library = native_library()
    q, _ = _weight("Q5_0", 16, 256, 1)
    k, _ = _weight("Q5_0", 8, 256, 2)
    v, _ = _weight("Q8_0", 8, 256, 3)
    fused = KQuantWeight.cat([q, k, v])
    assert fused.types == ("Q5_0", "Q8_0") and fused.shape == (32, 256)
    x = torch.randn(3, 256)
    assert torch.equal(gemm(library, x, fused), torch.cat([gemm(library, x, w) for w in (q, k, v)], dim=1))
    assert torch.equal(fused.dequantize(), torch.cat([w.dequantize() for w in (q, k, v)]))
    mixed = KQuantWeight.cat([_weight("Q4_K", 5, 512, 4)[0], _weight("Q6_K", 7, 512, 5)[0]])
    torch.testing.assert_close(gemm(library, x.repeat(1, 2), mixed),
                               emulate(x.repeat(1, 2), mixed.dequantize(), 256), rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_refused():
    from tiers.quantization.int4 import QuantizationError

    with pytest.raises(QuantizationError):
        KQuantWeight([("Q4_K", torch.zeros(2, 144, dtype=torch.uint8))], 512)
    with pytest.raises(QuantizationError):
        KQuantWeight.from_blocks("Q4_K", np.zeros((2, 72), np.uint8), 2, 128)


def test_repack_keeps_the_values_and_takes_only_its_types():
    """Q4_K / Q6_K parts become Q4_K_R / Q6_K_R (same bytes per row, same dequantized values, same matmul within the
    float rounding), other parts shared as they are; the input untouched (its tensors may be shared: one checkpoint,
    two engines), a repacked weight passed through; in_place rewrites an owned weight instead."""
    library = native_library()
    q4, q4_blocks = _weight("Q4_K", 6, 512, 1)
    q6, _ = _weight("Q6_K", 4, 512, 2)
    q8, _ = _weight("Q8_0", 3, 512, 3)
    fused = KQuantWeight.cat([q4, q6, q8])
    before, x = fused.dequantize(), torch.randn(5, 512)
    stored_result = gemm(library, x, fused)
    packed = repack(library, fused)
    assert packed.types == ("Q4_K_R", "Q6_K_R", "Q8_0") and fused.types == ("Q4_K", "Q6_K", "Q8_0")
    assert np.array_equal(fused.parts[0][1].numpy(), q4_blocks) and packed.parts[2][1] is fused.parts[2][1]
    assert packed.nbytes == fused.nbytes
    assert torch.equal(packed.dequantize(), before) and torch.equal(fused.dequantize(), before)
    torch.testing.assert_close(gemm(library, x, packed), stored_result, rtol=1e-5, atol=1e-5)
    assert repack(library, packed) is packed
    odd, _ = _weight("Q5_0", 3, 96, 4)  # Q5_0_R groups 4 blocks: rows of 96 stay Q5_0
    assert repack(library, odd) is odd and odd.types == ("Q5_0",)
    owned = KQuantWeight.cat([q4, q6])
    tensors = [rows for _, rows in owned.parts]
    assert repack(library, owned, in_place=True) is owned and owned.types == ("Q4_K_R", "Q6_K_R")
    assert all(rows is t for (_, rows), t in zip(owned.parts, tensors)) and torch.equal(owned.dequantize(), before[:10])


def test_layers_sharing_a_stored_weight_each_get_the_right_values():
    """Two layers built from one weight (two engines from one checkpoint): each repacks its own copy."""
    from tiers.quantization.linear import QuantizedLinear

    weight, blocks = _weight("Q6_K", 16, 512, 5)
    a, b = QuantizedLinear(weight), QuantizedLinear(weight)
    assert weight.types == ("Q6_K",) and np.array_equal(weight.parts[0][1].numpy(), blocks)
    x = torch.randn(2, 512)
    assert torch.equal(a(x), b(x))
    torch.testing.assert_close(a(x), emulate(x, _gguf_dequantize("Q6_K", blocks, 16, 512), 256), rtol=1e-5, atol=1e-5)


def test_a_layer_runs_the_repacked_layout():
    from tiers.quantization.linear import QuantizedLinear

    weight, blocks = _weight("Q4_K", 32, 512, 9)
    layer = QuantizedLinear(weight)
    assert layer.kernel == "cpu_kq" and layer.kq.types == ("Q4_K_R",)
    # its buffers are the blocks it computes from, not the stored ones it was given
    assert [b.data_ptr() for b in layer.buffers()] == [rows.data_ptr() for _, rows in layer.kq.parts]
    assert weight.parts[0][1].data_ptr() != layer.kq.parts[0][1].data_ptr()
    x = torch.randn(3, 512)
    torch.testing.assert_close(layer(x), emulate(x, _gguf_dequantize("Q4_K", blocks, 32, 512), 256),
                               rtol=1e-5, atol=1e-5)
