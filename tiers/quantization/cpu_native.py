"""The native CPU kernels of cpu_w4a8.c: built once per machine with the system's C compiler, loaded with ctypes.

Torch's own CPU INT4/INT8 kernels take bf16 activations and, on the machines measured, ran 2-4x behind llama.cpp
(docs/benchmarks.md). This kernel does what llama.cpp does: activations quantized per row to int8 blocks of 32,
integer dot products against the weight's blocks (AVX-512 VNNI, AVX2 or plain C, whatever the compiler targets
with -march=native), one float scale per block.

The library is compiled at first use into a cache folder ($AIO_KERNEL_CACHE, else $XDG_CACHE_HOME/aio/kernels,
else ~/.cache/aio/kernels), named by a hash of the source, the flags, the compiler and the CPU, so a copied cache
never runs on a machine it was not built for. No compiler, a failed build or AIO_CPU_KERNELS=0: `native_library()`
returns None and the layers keep torch's kernels.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_w4a8.c")
BLOCK = 32  # input features per weight / activation block
DEFAULT_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11")


class NativeKernelError(RuntimeError):
    """The native kernel could not be built or loaded, or a call failed."""


@dataclass(frozen=True)
class NativeLibrary:
    lib: ctypes.CDLL
    isa: str  # "avx512vnni", "avx2" or "scalar": the path the compiler built
    path: Path


_lock = threading.Lock()
_cache: dict[tuple[str, ...], NativeLibrary | None] = {}


def cache_dir() -> Path:
    if os.environ.get("AIO_KERNEL_CACHE"):
        return Path(os.environ["AIO_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "aio" / "kernels"


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return os.uname().machine


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build_library(flags: tuple[str, ...] = DEFAULT_FLAGS) -> NativeLibrary:
    """Compiles (or finds in the cache) and loads the library built with `flags`. Raises NativeKernelError."""
    cc = _compiler()
    if cc is None:
        raise NativeKernelError("no C compiler (cc, gcc or clang) on PATH")
    source = SOURCE.read_bytes()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), str(version).encode(),
                                     _cpu_signature().encode()])).hexdigest()[:20]
    folder = cache_dir()
    target = folder / f"cpu_w4a8-{key}.so"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        try:
            done = subprocess.run([cc, *flags, str(SOURCE), "-o", tmp, "-lm"], capture_output=True, text=True)
            if done.returncode:
                raise NativeKernelError(f"{cc} failed on {SOURCE.name}: {done.stderr.strip()[:2000]}")
            os.replace(tmp, target)  # atomic: concurrent builders each write their own temp file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as e:
        raise NativeKernelError(f"cannot load {target}: {e}") from e
    lib.aio_isa.restype = ctypes.c_char_p
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.aio_gemm_w4.argtypes = lib.aio_gemm_w8.argtypes = [ptr, i64, i64, i64, ptr, i64, ptr, i64, ctypes.c_int]
    lib.aio_gemm_w4.restype = lib.aio_gemm_w8.restype = ctypes.c_int
    return NativeLibrary(lib, lib.aio_isa().decode(), target)


def native_library(flags: tuple[str, ...] = DEFAULT_FLAGS) -> NativeLibrary | None:
    """The library for this machine, built once per process; None (with one warning) when it cannot be had."""
    if os.environ.get("AIO_CPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    with _lock:
        if flags not in _cache:
            try:
                _cache[flags] = build_library(flags)
            except (NativeKernelError, OSError) as e:
                log.warning("native CPU INT4/INT8 kernel unavailable (%s); quantized layers use torch's kernels", e)
                _cache[flags] = None
        return _cache[flags]


def row_bytes(k: int, w8: bool) -> int:
    """Bytes of one weight row record (cpu_w4a8.c): INT4 K/2 code bytes + fp16 scales + fp16 mins, INT8 K bytes +
    fp16 scales."""
    return k + 2 * (k // BLOCK) if w8 else k // 2 + 4 * (k // BLOCK)


def gemm(native: NativeLibrary, x: torch.Tensor, rows: torch.Tensor, k: int, w8: bool) -> torch.Tensor:
    """float32 [M, K] @ W^T -> float32 [M, N], W as N row records (pack_w4 / pack_w8)."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        x = x.float().contiguous()
    assert x.dim() == 2 and x.shape[1] == k and rows.shape[1] == row_bytes(k, w8), (tuple(x.shape), k)
    n = rows.shape[0]
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    call = native.lib.aio_gemm_w8 if w8 else native.lib.aio_gemm_w4
    if call(x.data_ptr(), x.shape[0], k, x.stride(0), rows.data_ptr(), n, out.data_ptr(), n,
            torch.get_num_threads()):
        raise NativeKernelError("out of memory in the native kernel")
    return out


@lru_cache(maxsize=64)
def interleave_order(k: int) -> torch.Tensor:
    """Index [K]: the natural input feature at each position of the kernel's order (cpu_w4a8.c: blocks in pairs,
    4-byte granules alternating between the pair's two blocks; an odd last block in natural order)."""
    if k % BLOCK:
        raise ValueError(f"in_features {k} is not a multiple of {BLOCK}")
    pos = torch.arange(2 * BLOCK)
    within = ((pos >> 2) & 1) * BLOCK + 4 * (pos >> 3) + (pos & 3)
    pairs = k // (2 * BLOCK)
    order = (torch.arange(pairs).unsqueeze(1) * 2 * BLOCK + within).flatten()
    return torch.cat((order, torch.arange(pairs * 2 * BLOCK, k)))


@lru_cache(maxsize=64)
def natural_order(k: int) -> torch.Tensor:
    """The inverse of interleave_order: the position of each natural input feature."""
    return torch.argsort(interleave_order(k))


def _halves(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float16).contiguous().view(torch.uint8)


def pack_w4(codes: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
    """INT4 codes uint8 [N, K] (0..15, natural order), scales and mins [N, K // 32] -> row records uint8
    [N, row_bytes(K)]. Codes: in each pair of blocks, byte r holds interleaved element r (low nibble) and r + 32
    (high); an odd last block, byte j holds elements j and j + 16. Scales and mins are stored as fp16."""
    n, k = codes.shape
    c = codes.to(torch.uint8)[:, interleave_order(k)]
    split = (k // (2 * BLOCK)) * 2 * BLOCK
    pairs = c[:, :split].reshape(n, -1, 2, BLOCK)
    tail = c[:, split:].reshape(n, -1, 2, BLOCK // 2)
    return torch.cat(((pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, -1),
                      (tail[:, :, 0] | (tail[:, :, 1] << 4)).reshape(n, -1),
                      _halves(scales), _halves(mins)), dim=1).contiguous()


def unpack_w4(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of pack_w4: codes uint8 [N, K] in natural order, scales and mins float32 [N, K // 32]."""
    n, nb, half = rows.shape[0], k // BLOCK, k // 2
    split = (k // (2 * BLOCK)) * BLOCK  # bytes of the paired blocks
    pairs = rows[:, :split].reshape(n, -1, BLOCK)
    tail = rows[:, split:half].reshape(n, -1, BLOCK // 2)
    interleaved = torch.cat((torch.stack((pairs & 0x0F, pairs >> 4), dim=2).reshape(n, -1),
                             torch.stack((tail & 0x0F, tail >> 4), dim=2).reshape(n, -1)), dim=1)
    halves = rows[:, half:].contiguous().view(torch.float16).float()
    return interleaved[:, natural_order(k)], halves[:, :nb], halves[:, nb:]


def pack_w8(qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] in natural order and scales [N, K // 32] -> row records uint8 [N, row_bytes(K, w8=True)]:
    the same interleaving, one byte per weight, then fp16 scales."""
    return torch.cat((qweight[:, interleave_order(qweight.shape[1])].view(torch.uint8), _halves(scales)),
                     dim=1).contiguous()


def unpack_w8(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of pack_w8: int8 [N, K] in natural order and float32 scales [N, K // 32]."""
    q = rows[:, :k].contiguous().view(torch.int8)[:, natural_order(k)]
    return q, rows[:, k:].contiguous().view(torch.float16).float()
