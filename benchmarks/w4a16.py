"""W4A16 benchmark: the Triton INT4 kernels against torch's fp16/bf16 matmul on the dequantized weight.

    python -m benchmarks.w4a16 [--m 1,16,64] [--model 8b|70b] [--group-size 128] [--dtype float16]
                               [--peak-gbps G] [--sweep] [--json F]

CUDA only. Shapes: Llama-3-8B's projections (hidden 4096, 32/8 heads of 128, intermediate 14336) as the engine runs
them, fused (qkv 4096->6144, o 4096->4096, gate_up 4096->28672, down 14336->4096), and unfused (q, k, v, o, gate,
up, down); --model 70b: Llama-3-70B's fused ones (qkv 8192->10240, o 8192->8192, gate_up 8192->57344, down
28672->8192). Each is timed at every M of --m (tokens per matmul; default 1, a batch-1 decode step) with
RTN-quantized random weights.

The issue-40 measurement (the GEMV / tl.dot / dense crossovers and the tl.dot table, ~6 min on an H100):
    python -m benchmarks.w4a16 --model 70b --m 1,4,5,16,32,64,128,256,512,2048 --sweep --json w4a16.json

Reported per shape and M: the wrapper's pick (the GEMV kernel for M <= GEMV_PICK_MAX_M, tl.dot up to DENSE_ABOVE_M,
the dense path above: the weight dequantized into a reused buffer, then cuBLAS) and its time; for M <= GEMV_MAX_M
also the tl.dot kernel's own pick (the path small M took before the GEMV); above GEMV_MAX_M both the tl.dot pick
and the dense path, whichever the wrapper did not take, so the crossover shows; achieved bandwidth
= bytes of weight the matmul must read (INT4: the packed codes plus the fp32 scales and mins, `Int4Weight.nbytes`;
dense: N*K*2) / time, and its fraction of the peak: by default the bandwidth of a device-to-device copy measured
at the start of the run (read + write bytes / time), or --peak-gbps (H100 SXM's HBM3 is 3350, H100 PCIe 2000,
H200 4800); and the speedup over the dense matmul. Timings are taken in CUDA graphs (no Python or launch overhead
in the number) cycling through enough weight copies that every read comes from HBM, not L2.

--sweep times, for each fused shape, a bounded grid: GEMV configs at M <= GEMV_MAX_M, tl.dot configs above
(compiles are shared across shapes: ~70 kernels in all for --m 1,16,64, a few minutes on an H100), checks every
candidate's result against the fp32 reference, and prints the best next to the pick; the winners are listed at the
end as constructor calls for the tables (pick_gemv_config / pick_dot_config). --json writes every row, the
winners' fields and each shape's five fastest configs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

FUSED = {"qkv_proj": (6144, 4096), "o_proj": (4096, 4096), "gate_up_proj": (28672, 4096), "down_proj": (4096, 14336)}
FUSED_70B = {"qkv_proj": (10240, 8192), "o_proj": (8192, 8192), "gate_up_proj": (57344, 8192),
             "down_proj": (8192, 28672)}
UNFUSED = {"q_proj": (4096, 4096), "k_proj": (1024, 4096), "v_proj": (1024, 4096), "o_proj": (4096, 4096),
           "gate_proj": (14336, 4096), "up_proj": (14336, 4096), "down_proj": (4096, 14336)}
# Bytes of weight copies cycled through per timing: several times any L2 (H100 50 MB, H200 60 MB).
ROTATE_BYTES = 512 << 20
COPY_BYTES = 1 << 30
MAX_REL_ERR = 2e-2  # a sweep candidate further than this from the fp32 reference is reported as wrong, not timed
DEVICE = "cuda"


def time_us(fn, iters: int, graphs: bool) -> float:
    """Microseconds per call of fn (a closure over one weight copy per call index)."""
    fn(0)
    torch.cuda.synchronize()
    if graphs:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(3):
                fn(i)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(iters):
                fn(i)
        graph.replay()
        torch.cuda.synchronize()
        run = graph.replay
    else:
        def run():
            for i in range(iters):
                fn(i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / iters)
    return best


def copy_gbps() -> float:
    """Device-to-device copy bandwidth, (read + written bytes) / time, best of 5 rounds of 4 copies of 1 GiB."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(4):
            dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return 2 * 4 * COPY_BYTES / best / 1e9


def gemv_grid(n: int, k: int, group_size: int, num_sms: int):
    """GemvConfigs worth timing: 4 to 16 int32 words of each step per thread (a 16-byte load at least, and no
    spills in Triton 3.9's sm_90 code), split-K only where the N tiles give fewer than 4 programs per SM; each with
    the activations loaded as a vector and in the tile's shape (x_in_tile)."""
    from tiers.quantization.triton_w4a16_gemv import GemvConfig, gemv_steps

    for block_n in (8, 16, 32, 64):
        for block_k in (256, 512, 1024):
            for num_warps in (2, 4, 8):
                if not 4 <= block_n * block_k // 8 // (32 * num_warps) <= 16:
                    continue
                steps = gemv_steps(k, group_size, GemvConfig(block_n, block_k))[2]
                tiles = -(-n // block_n)
                for split_k in (1, 2, 4, 8):
                    if split_k == 1 or (tiles * split_k // 2 < 4 * num_sms and split_k <= steps // 2):
                        for x_in_tile in (False, True):
                            yield GemvConfig(block_n, block_k, split_k, num_warps, x_in_tile=x_in_tile)


def dot_grid(m: int, n: int, k: int, group_size: int, num_sms: int):
    """W4A16Configs worth timing at M rows: block_m the next power of two >= M (16..128: all the rows in one tile up
    to 128), 64 to 256 weight rows per tile, K steps of 64 or 128 inside a group, split-K only where the output
    tiles give fewer than 2 programs per SM. 3 stages: on an H100, 4 were at most 2.2% faster than 3 in any pairing
    of the first sweep (docs/gpu.md)."""
    from tiers.quantization.triton_w4a16 import W4A16Config

    block_m = min(128, max(16, 1 << (m - 1).bit_length()))
    block_ks = sorted({min(block_k, group_size & -group_size) for block_k in (64, 128)})  # K steps inside a group
    for block_n in (64, 128, 256):
        for block_k in block_ks:
            num_warps = 8 if block_m * block_n >= 8192 or block_n * block_k >= 16384 else 4  # no spills on sm_90
            tiles = -(-m // block_m) * -(-n // block_n)
            for split_k in (1, 2, 4, 8, 16):
                if split_k == 1 or (tiles * split_k // 2 < 2 * num_sms and k // block_k // split_k >= 4):
                    yield W4A16Config(block_m, block_n, block_k, split_k, num_warps, 3)


class ShapeBench:
    """One projection's weights (INT4 and dense, each in enough copies to defeat L2) and the timing of a config."""

    def __init__(self, n: int, k: int, group_size: int, dtype: torch.dtype, iters: int, graphs: bool):
        from tiers.quantization.int4 import quantize_int4

        self.n, self.k, self.dtype, self.iters, self.graphs = n, k, dtype, iters, graphs
        self.generator = torch.Generator(device=DEVICE).manual_seed(0)
        self.q = quantize_int4(torch.randn(n, k, device=DEVICE, generator=self.generator) * 0.02, group_size)
        self.dense = self.q.dequantize(dtype)
        self.dense_bytes = self.dense.numel() * self.dense.element_size()
        self.int4_copies = [self.q] + [type(self.q)(self.q.packed.clone(), self.q.scales.clone(),
                                                    self.q.mins.clone(), group_size)
                                       for _ in range(max(1, ROTATE_BYTES // self.q.nbytes) - 1)]
        self.dense_copies = [self.dense] + [self.dense.clone()
                                            for _ in range(max(1, ROTATE_BYTES // self.dense_bytes) - 1)]

    def inputs(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(m, self.k, device=DEVICE, generator=self.generator).to(self.dtype)
        return x, F.linear(x.float(), self.q.dequantize())

    def int4_us(self, x: torch.Tensor, config) -> float:
        from tiers.quantization.triton_w4a16 import w4a16_matmul

        copies = self.int4_copies
        return time_us(lambda i: w4a16_matmul(x, copies[i % len(copies)], config), self.iters, self.graphs)

    def dense_us(self, x: torch.Tensor) -> float:
        copies = self.dense_copies
        return time_us(lambda i: F.linear(x, copies[i % len(copies)]), self.iters, self.graphs)

    def rel_err(self, x: torch.Tensor, ref: torch.Tensor, config) -> float:
        from tiers.quantization.triton_w4a16 import w4a16_matmul

        return ((w4a16_matmul(x, self.q, config).float() - ref).abs().max() / ref.abs().max()).item()


def describe(config) -> str:
    if isinstance(config, str):
        return f"{config} (dequantize into the buffer + cuBLAS)"
    return f"{type(config).__name__}({', '.join(f'{k}={v}' for k, v in asdict(config).items())})"


def sweep(bench: ShapeBench, x: torch.Tensor, ref: torch.Tensor, configs) -> tuple[list, list]:
    """[(us, config)] fastest first, and the configs that failed or gave a wrong result."""
    timed, failed = [], []
    for config in configs:
        try:
            err = bench.rel_err(x, ref, config)
            if not err < MAX_REL_ERR:
                failed.append(f"{describe(config)}: relative error {err:.2e}")
                continue
            timed.append((bench.int4_us(x, config), config))
        except Exception as exc:  # out of shared memory / registers for this config
            failed.append(f"{describe(config)}: {type(exc).__name__}: {str(exc)[:200]}")
    return sorted(timed, key=lambda t: t[0]), failed


def bench_shape(name: str, n: int, k: int, ms: list[int], args, peak: float, do_sweep: bool) -> list[dict]:
    from tiers.quantization.triton_w4a16 import DENSE, pick_config, pick_dot_config, uses_dense
    from tiers.quantization.triton_w4a16_gemv import GEMV_MAX_M

    started = time.perf_counter()
    bench = ShapeBench(n, k, args.group_size, getattr(torch, args.dtype), args.iters, not args.no_graphs)
    device, group = torch.device(DEVICE), args.group_size
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    rows = []
    for m in ms:
        x, ref = bench.inputs(m)
        dot_pick = pick_config(m, n, k, group, device)
        pick = DENSE if uses_dense(m, device.type == "cuda") else dot_pick
        row = dict(name=name, n=n, k=k, m=m, int4_bytes=bench.q.nbytes, dense_bytes=bench.dense_bytes,
                   config=describe(pick), max_rel_err=bench.rel_err(x, ref, pick),
                   int4_us=bench.int4_us(x, pick), dense_us=bench.dense_us(x))
        if m <= GEMV_MAX_M:
            row["dot_config"] = describe(pick_dot_config(m, n, k, group, device))
            row["dot_us"] = bench.int4_us(x, pick_dot_config(m, n, k, group, device))
        elif pick == DENSE:
            row["dot_config"], row["dot_us"] = describe(dot_pick), bench.int4_us(x, dot_pick)
        else:
            row["dequant_mm_us"] = bench.int4_us(x, DENSE)
        if do_sweep:
            grid = gemv_grid(n, k, group, num_sms) if m <= GEMV_MAX_M else dot_grid(m, n, k, group, num_sms)
            timed, failed = sweep(bench, x, ref, grid)
            row["sweep_failed"] = failed
            row["sweep_top"] = [dict(us=us, config=describe(c), kind=type(c).__name__, fields=asdict(c))
                                for us, c in timed[:5]]
            if timed:
                row["sweep_best_us"], row["sweep_best_config"] = timed[0][0], describe(timed[0][1])
        for prefix, nbytes in (("int4", bench.q.nbytes), ("dense", bench.dense_bytes), ("dot", bench.q.nbytes),
                               ("sweep_best", bench.q.nbytes), ("dequant_mm", bench.q.nbytes)):
            if f"{prefix}_us" in row:
                row[f"{prefix}_gbps"] = nbytes / row[f"{prefix}_us"] / 1e3
                row[f"{prefix}_peak_frac"] = row[f"{prefix}_gbps"] / peak
                row[f"{prefix}_speedup"] = row["dense_us"] / row[f"{prefix}_us"]
        rows.append(row)
    print(f"  {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return rows


HEADER = (f"{'shape':<14}{'N':>7}{'K':>7}{'int4 us':>9}{'GB/s':>7}{'%peak':>7}{'fp us':>9}{'GB/s':>7}{'%peak':>7}"
          f"{'speedup':>9}{'rel err':>9}")


def print_row(row: dict) -> None:
    print(f"{row['name']:<14}{row['n']:>7}{row['k']:>7}{row['int4_us']:>9.1f}{row['int4_gbps']:>7.0f}"
          f"{100 * row['int4_peak_frac']:>6.1f}%{row['dense_us']:>9.1f}{row['dense_gbps']:>7.0f}"
          f"{100 * row['dense_peak_frac']:>6.1f}%{row['int4_speedup']:>8.2f}x{row['max_rel_err']:>9.1e}")
    print(f"{'':<14}pick   {row['config']}")
    if "dot_us" in row:
        print(f"{'':<14}tl.dot {row['dot_config']}: {row['dot_us']:.1f} us, {100 * row['dot_peak_frac']:.1f}%, "
              f"{row['dot_speedup']:.2f}x")
    if "dequant_mm_us" in row:
        print(f"{'':<14}dense path (dequantize + cuBLAS): {row['dequant_mm_us']:.1f} us, "
              f"{row['dequant_mm_speedup']:.2f}x")
    flops = 2 * row["m"] * row["n"] * row["k"]
    print(f"{'':<14}{flops / row['int4_us'] / 1e6:.0f} TFLOP/s (pick), "
          f"{flops / row['dense_us'] / 1e6:.0f} (dense fp16/bf16 weight)")
    if "sweep_best_us" in row:
        print(f"{'':<14}best   {row['sweep_best_config']}: {row['sweep_best_us']:.1f} us, "
              f"{row['sweep_best_gbps']:.0f} GB/s, {100 * row['sweep_best_peak_frac']:.1f}%, "
              f"{row['sweep_best_speedup']:.2f}x")
    for failure in row.get("sweep_failed", []):
        print(f"{'':<14}FAILED {failure}")


def print_total(rows: list[dict], peak: float) -> None:
    int4_us, dense_us = sum(r["int4_us"] for r in rows), sum(r["dense_us"] for r in rows)
    int4_gbps = sum(r["int4_bytes"] for r in rows) / int4_us / 1e3
    dense_gbps = sum(r["dense_bytes"] for r in rows) / dense_us / 1e3
    print(f"{'layer total':<28}{int4_us:>9.1f}{int4_gbps:>7.0f}{100 * int4_gbps / peak:>6.1f}%{dense_us:>9.1f}"
          f"{dense_gbps:>7.0f}{100 * dense_gbps / peak:>6.1f}%{dense_us / int4_us:>8.2f}x")


def parse_ms(text: str) -> list[int]:
    try:
        ms = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--m takes a comma-separated list of row counts, got {text!r}") from None
    if not ms or min(ms) < 1:
        raise argparse.ArgumentTypeError(f"--m takes positive row counts, got {text!r}")
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peak-gbps", type=float, default=None,
                        help="peak bandwidth in GB/s for the %%peak columns (default: a device-to-device copy's, "
                             "measured in the run)")
    parser.add_argument("--m", type=parse_ms, default=[1], help="tokens per matmul, a list: 1,16,64 (default 1)")
    parser.add_argument("--model", choices=("8b", "70b"), default="8b",
                        help="the projection shapes: Llama-3-8B's (fused and unfused) or Llama-3-70B's (fused)")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    parser.add_argument("--iters", type=int, default=100, help="matmuls per timed graph")
    parser.add_argument("--no-graphs", action="store_true", help="time eager launches (Python overhead included)")
    parser.add_argument("--sweep", action="store_true", help="also time a grid of configs per fused shape and M")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/w4a16.py needs a CUDA GPU (the Triton W4A16 kernels run on CPU only in the "
                 "interpreter, which says nothing about speed); nothing was measured.")
    if importlib.util.find_spec("triton") is None:
        sys.exit("benchmarks/w4a16.py needs triton installed; nothing was measured.")
    started = time.perf_counter()
    copy = copy_gbps()
    peak = args.peak_gbps or copy
    print(f"{torch.cuda.get_device_name()}  M={','.join(map(str, args.m))}  group={args.group_size}  {args.dtype}  "
          f"copy {copy:.0f} GB/s  %peak of {peak:.0f} GB/s ({'--peak-gbps' if args.peak_gbps else 'the copy'})  "
          f"({'CUDA graphs' if not args.no_graphs else 'eager'})")
    rows = []
    sets = ((("Llama-3-70B, fused (as the engine runs them)", FUSED_70B),) if args.model == "70b" else
            (("Llama-3-8B, fused (as the engine runs them)", FUSED), ("Llama-3-8B, unfused", UNFUSED)))
    for title, shapes in sets:
        shape_rows = {name: bench_shape(name, n, k, args.m, args, peak, args.sweep and shapes is not UNFUSED)
                      for name, (n, k) in shapes.items()}
        for i, m in enumerate(args.m):
            print(f"\n{title}, M={m}\n{HEADER}")
            for name in shapes:
                row = dict(shape_rows[name][i], set="unfused" if shapes is UNFUSED else "fused")
                rows.append(row)
                print_row(row)
            print_total([r[i] for r in shape_rows.values()], peak)
    winners = [r for r in rows if "sweep_best_config" in r]
    if winners:
        print("\nSweep winners (M, shape: config, us, %peak, speedup over dense):")
        for r in winners:
            print(f"  M={r['m']:<3} {r['name']:<13} {r['sweep_best_config']}  {r['sweep_best_us']:.1f} us  "
                  f"{100 * r['sweep_best_peak_frac']:.1f}%  {r['sweep_best_speedup']:.2f}x")
    crossover = {}
    for r in rows:
        dense_us = r.get("dequant_mm_us", r["int4_us"] if r["config"].startswith("dense") else None)
        dot_us = r.get("dot_us") if r["config"].startswith("dense") else r["int4_us"]
        if r["m"] > 8 and dense_us is not None and dot_us is not None and dense_us < dot_us:
            crossover[r["name"]] = min(crossover.get(r["name"], r["m"]), r["m"])
    if crossover:
        print("\nSmallest M where the dense path beat tl.dot (DENSE_ABOVE_M is the threshold): "
              + ", ".join(f"{name} {m}" for name, m in crossover.items()))
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), copy_gbps=copy, peak_gbps=peak, args=vars(args),
                           winners=[dict(m=r["m"], name=r["name"], **r["sweep_top"][0]) for r in winners],
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
