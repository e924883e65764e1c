"""The W4A16 kernels compiled for a GPU without one: registers, spills and the load instructions of each config.

    python -m benchmarks.w4a16_sass [--arch 90] [--configs 16,64,128,4,3 64,64,64,4,3 ...]
                                    [--gemv 1,16,1024,4,0 1,16,1024,4,1 ...]

Compiles `tiers.quantization.triton_w4a16._w4a16_kernel` ahead of time for sm_<arch> (fp16 activations, groups of
128) with the integer arguments specialised as the JIT specialises them at run time (strides and sizes divisible by
16, the activations' K stride 1), then reads the cubin with the cuobjdump that Triton ships: registers a thread,
stack and local memory (spills), and how many of each load and MMA instruction the kernel has. What it says is about
the code, not the speed: a GPU's sweep (`benchmarks.w4a16 --sweep`) decides. The Triton installed here may not be
the GPU machine's (docs/gpu.md says which ran where).

--gemv does the same for the GEMV kernel (`triton_w4a16_gemv._w4a16_gemv_kernel`), a config being
"rows,block_n,block_k,num_warps,x_in_tile" (groups of 128, so 128-column segments), and counts its barriers and
shared-memory traffic too: the layout conversions Triton inserts.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

INSTRUCTIONS = ("LDG.E.128", "LDG.E.U8", "LDG.E.U16", "LDGSTS.E", "LDGSTS.E.BYPASS.128", "LDS.U8", "LDSM.16.M88.4",
                "STS.128", "STS", "STSM.16.M88", "BAR.SYNC", "HGMMA")
INT_ARGS = ("M", "N", "iters_per_split", "total_iters", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
            "stride_os", "stride_om", "stride_on")
DIVISIBLE = ("x_ptr", "w_ptr", "s_ptr", "z_ptr", "out_ptr", "N", "stride_xm", "stride_wn", "stride_sn", "stride_os",
             "stride_om")


DOT_FIELDS = "block_m,block_n,block_k,num_warps,num_stages"
GEMV_FIELDS = "rows,block_n,block_k,num_warps,x_in_tile"


def parse_config(text: str, fields: str = DOT_FIELDS) -> tuple[int, int, int, int, int]:
    """"block_m,block_n,block_k,num_warps,num_stages" (or the GEMV's `fields`) -> its fields."""
    parts = text.split(",")
    if len(parts) != 5 or not all(p.strip().isdigit() for p in parts):
        raise SystemExit(f"a config is {fields}, got {text!r}")
    bm, bn, bk, warps, stages = (int(p) for p in parts)
    return bm, bn, bk, warps, stages


def _compile(kernel, arch: int, pointers: dict[str, str], int_args: tuple[str, ...], divisible: tuple[str, ...],
             constants: dict[str, object], warps: int, stages: int) -> bytes:
    """The cubin of `kernel` as the JIT specialises it: int_args as i32 except those in constants, pointers and
    the `divisible` arguments 16-divisible."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {name: "i32" for name in int_args}
    signature.update(pointers)
    signature.update({name: "constexpr" for name in constants})
    order = list(kernel.arg_names)
    attrs = {(order.index(name),): [["tt.divisibility", 16]] for name in divisible if name not in constants}
    source = ASTSource(fn=kernel, signature={name: signature[name] for name in order}, constexprs=constants,
                       attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": warps, "num_stages": stages})
    return compiled.asm["cubin"]


def compile_config(arch: int, config: tuple[int, int, int, int, int]) -> bytes:
    from tiers.quantization import triton_w4a16

    bm, bn, bk, warps, stages = config
    pointers = dict(x_ptr="*fp16", w_ptr="*u8", s_ptr="*fp32", z_ptr="*fp32", out_ptr="*fp32")
    constants = dict(GROUP_SIZE=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IS_FP32=False, stride_xk=1)
    return _compile(triton_w4a16._w4a16_kernel, arch, pointers, INT_ARGS, DIVISIBLE, constants, warps, stages)


def compile_gemv(arch: int, config: tuple[int, int, int, int, int]) -> bytes:
    """config: rows (M, a power of two), block_n, block_k, num_warps, x_in_tile (0 or 1)."""
    from tiers.quantization import triton_w4a16_gemv

    rows, bn, bk, warps, x_tile = config
    if x_tile not in (0, 1):
        raise SystemExit(f"a GEMV config's x_in_tile is 0 or 1, got {x_tile}")
    pointers = dict(x_ptr="*fp16", w_ptr="*i32", s_ptr="*fp32", z_ptr="*fp32", out_ptr="*fp16")
    int_args = ("M", "N", "steps_per_split", "total_steps", "stride_xm", "stride_xk", "stride_wn", "stride_sn",
                "stride_os", "stride_om", "stride_on")
    divisible = ("x_ptr", "w_ptr", "s_ptr", "z_ptr", "out_ptr", "N", "stride_xm", "stride_wn", "stride_sn",
                 "stride_om")
    constants = dict(GROUP_SIZE=128, BLOCK_M=rows, BLOCK_N=bn, BLOCK_K=bk, SEG_K=min(bk, 128), X_TILE=bool(x_tile),
                     stride_xk=1)
    return _compile(triton_w4a16_gemv._w4a16_gemv_kernel, arch, pointers, int_args, divisible, constants, warps, 1)


def describe(cubin: bytes) -> str:
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", path], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([cuobjdump, "--dump-sass", path], capture_output=True, text=True, check=True).stdout
    resources = " ".join(re.findall(r"(?:REG|STACK|LOCAL):\d+", usage))
    opcodes = re.findall(r"\b([A-Z][A-Z0-9]*(?:\.[A-Z0-9]+)*)\b", sass)
    counts = [f"{sum(op.startswith(name) if name == 'HGMMA' else op == name for op in opcodes)} {name}"
              for name in INSTRUCTIONS]
    return f"{resources}; " + ", ".join(c for c in counts if not c.startswith("0 "))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.w4a16_sass", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--configs", nargs="*", default=["16,64,128,4,3", "32,64,128,4,3", "64,64,64,4,3"])
    parser.add_argument("--gemv", nargs="*", default=[], help=f"GEMV configs: {GEMV_FIELDS}")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the interpreter compiles nothing")
    for text in args.configs:
        print(f"{text:28s} {describe(compile_config(args.arch, parse_config(text)))}", flush=True)
    for text in args.gemv:
        print(f"gemv {text:23s} {describe(compile_gemv(args.arch, parse_config(text, GEMV_FIELDS)))}", flush=True)


if __name__ == "__main__":
    main()
