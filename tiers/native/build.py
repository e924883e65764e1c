"""AIO's native CPU library: the C files of this folder (w4a8.c: INT4/INT8 matmuls; ops.c: RMSNorm, SiLU-and-mul,
paged decode attention), built once per machine with the system's C compiler and loaded with ctypes.

The library is compiled at first use into a cache folder ($AIO_KERNEL_CACHE, else $XDG_CACHE_HOME/aio/kernels,
else ~/.cache/aio/kernels), named by a hash of the sources, the flags, the compiler and the CPU, so a copied cache
never runs on a machine it was not built for. No compiler, a failed build or AIO_CPU_KERNELS=0: `native_library()`
returns None and the callers keep torch's kernels.
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
from pathlib import Path

from tiers.native.signatures import declare_ops

log = logging.getLogger(__name__)

SOURCES = tuple(sorted(Path(__file__).parent.glob("*.c")))
HEADERS = tuple(sorted(Path(__file__).parent.glob("*.h")))  # in the cache key: a header's change rebuilds
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
    source = b"\0".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), str(version).encode(),
                                     _cpu_signature().encode()])).hexdigest()[:20]
    folder = cache_dir()
    target = folder / f"aio-native-{key}.so"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        try:
            done = subprocess.run([cc, *flags, *map(str, SOURCES), "-o", tmp, "-lm"], capture_output=True, text=True)
            if done.returncode:
                raise NativeKernelError(f"{cc} failed on {', '.join(p.name for p in SOURCES)}: "
                                        f"{done.stderr.strip()[:2000]}")
            os.replace(tmp, target)  # atomic: concurrent builders each write their own temp file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as e:
        raise NativeKernelError(f"cannot load {target}: {e}") from e
    declare_ops(lib)
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
