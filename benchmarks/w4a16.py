"""W4A16 decode benchmark: the Triton INT4 kernel against torch's fp16/bf16 matmul on the dequantized weight.

    python -m benchmarks.w4a16 [--peak-gbps 3350] [--m 1] [--group-size 128] [--dtype float16] [--sweep] [--json F]

CUDA only. Shapes: Llama-3-8B's projections (hidden 4096, 32/8 heads of 128, intermediate 14336) as the engine runs
them, fused (qkv 4096->6144, o 4096->4096, gate_up 4096->28672, down 14336->4096), and unfused (q, k, v, o, gate,
up, down). Each is timed at M tokens (default 1, a batch-1 decode step) with RTN-quantized random weights.

Reported per shape: time per matmul; achieved bandwidth = bytes of weight the matmul must read (INT4: the packed
codes plus the fp32 scales and mins, `Int4Weight.nbytes`; dense: N*K*2) / time, and its fraction of --peak-gbps
(default 3350 GB/s: H100 SXM's HBM3; H100 PCIe 2000, H200 4800, A100-80GB 2039); and the speedup over the dense
matmul. Timings are taken in CUDA graphs (no Python or launch overhead in the number) cycling through enough weight
copies that every read comes from HBM, not L2. --sweep also times a grid of block sizes / split-K per fused shape
and prints the best next to the wrapper's own pick.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys

import torch
import torch.nn.functional as F

FUSED = {"qkv_proj": (6144, 4096), "o_proj": (4096, 4096), "gate_up_proj": (28672, 4096), "down_proj": (4096, 14336)}
UNFUSED = {"q_proj": (4096, 4096), "k_proj": (1024, 4096), "v_proj": (1024, 4096), "o_proj": (4096, 4096),
           "gate_proj": (14336, 4096), "up_proj": (14336, 4096), "down_proj": (4096, 14336)}
# Bytes of weight copies cycled through per timing: several times any L2 (H100 50 MB, H200 60 MB).
ROTATE_BYTES = 512 << 20


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


def sweep_configs(group_size: int):
    from tiers.quantization.triton_w4a16 import W4A16Config

    for block_n, block_k, split_k, num_warps, num_stages in itertools.product(
            (32, 64, 128), (64, 128, 256), (1, 2, 4, 8, 16), (4,), (3, 4)):
        if group_size % block_k == 0:
            yield W4A16Config(16, block_n, block_k, split_k, num_warps, num_stages)


def bench_shape(name: str, n: int, k: int, args, dtype: torch.dtype, sweep: bool) -> dict:
    from tiers.quantization.int4 import quantize_int4
    from tiers.quantization.triton_w4a16 import pick_config, w4a16_matmul

    g = torch.Generator(device="cuda").manual_seed(0)
    base = torch.randn(n, k, device="cuda", generator=g) * 0.02
    q = quantize_int4(base, args.group_size)
    dense = q.dequantize(dtype)
    del base
    x = torch.randn(args.m, k, device="cuda", generator=g).to(dtype)

    y = w4a16_matmul(x, q)
    ref = F.linear(x.float(), q.dequantize())
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()

    int4_copies = [q] + [type(q)(q.packed.clone(), q.scales.clone(), q.mins.clone(), q.group_size)
                         for _ in range(max(1, ROTATE_BYTES // q.nbytes) - 1)]
    dense_bytes = dense.numel() * dense.element_size()
    dense_copies = [dense] + [dense.clone() for _ in range(max(1, ROTATE_BYTES // dense_bytes) - 1)]
    iters = args.iters
    graphs = not args.no_graphs

    def gbps(nbytes: int, us: float) -> float:
        return nbytes / us / 1e3

    int4_us = time_us(lambda i: w4a16_matmul(x, int4_copies[i % len(int4_copies)]), iters, graphs)
    dense_us = time_us(lambda i: F.linear(x, dense_copies[i % len(dense_copies)]), iters, graphs)
    row = dict(name=name, n=n, k=k, m=args.m, int4_bytes=q.nbytes, dense_bytes=dense_bytes,
               config=str(pick_config(args.m, n, k, q.group_size, x.device)),
               int4_us=int4_us, int4_gbps=gbps(q.nbytes, int4_us), dense_us=dense_us,
               dense_gbps=gbps(dense_bytes, dense_us), speedup=dense_us / int4_us, max_rel_err=err)
    row["int4_peak_frac"] = row["int4_gbps"] / args.peak_gbps
    row["dense_peak_frac"] = row["dense_gbps"] / args.peak_gbps
    if sweep:
        best = (float("inf"), None)
        for config in sweep_configs(q.group_size):
            try:
                us = time_us(lambda i: w4a16_matmul(x, int4_copies[i % len(int4_copies)], config), iters, graphs)
            except Exception as exc:  # out of shared memory / registers for this config
                print(f"  {name}: {config} failed: {type(exc).__name__}", file=sys.stderr)
                continue
            best = min(best, (us, config), key=lambda t: t[0])
        row["sweep_best_us"], row["sweep_best_config"] = best[0], str(best[1])
        row["sweep_best_gbps"] = gbps(q.nbytes, best[0])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peak-gbps", type=float, default=3350.0,
                        help="the device's peak HBM bandwidth in GB/s (default: H100 SXM, 3350)")
    parser.add_argument("--m", type=int, default=1, help="tokens per matmul (default 1: batch-1 decode)")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    parser.add_argument("--iters", type=int, default=100, help="matmuls per timed graph")
    parser.add_argument("--no-graphs", action="store_true", help="time eager launches (Python overhead included)")
    parser.add_argument("--sweep", action="store_true",
                        help="also time a grid of block sizes and split-K (fused shapes)")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/w4a16.py needs a CUDA GPU (the Triton W4A16 kernel runs on CPU only in the "
                 "interpreter, which says nothing about speed); nothing was measured.")
    if importlib.util.find_spec("triton") is None:
        sys.exit("benchmarks/w4a16.py needs triton installed; nothing was measured.")
    dtype = getattr(torch, args.dtype)
    print(f"{torch.cuda.get_device_name()}  M={args.m}  group={args.group_size}  {args.dtype}  "
          f"peak={args.peak_gbps:.0f} GB/s  ({'CUDA graphs' if not args.no_graphs else 'eager'})")
    header = (f"{'shape':<14}{'N':>7}{'K':>7}{'int4 us':>9}{'GB/s':>7}{'%peak':>7}{'fp us':>9}{'GB/s':>7}"
              f"{'%peak':>7}{'speedup':>9}{'rel err':>9}")
    rows = []
    for title, shapes in (("Llama-3-8B, fused (as the engine runs them)", FUSED),
                          ("Llama-3-8B, unfused", UNFUSED)):
        print(f"\n{title}\n{header}")
        total = {"int4_us": 0.0, "dense_us": 0.0, "int4_bytes": 0, "dense_bytes": 0}
        for name, (n, k) in shapes.items():
            row = bench_shape(name, n, k, args, dtype, args.sweep and shapes is FUSED)
            row["set"] = "fused" if shapes is FUSED else "unfused"
            rows.append(row)
            for key in total:
                total[key] += row[key]
            print(f"{name:<14}{n:>7}{k:>7}{row['int4_us']:>9.1f}{row['int4_gbps']:>7.0f}"
                  f"{100 * row['int4_peak_frac']:>6.1f}%{row['dense_us']:>9.1f}{row['dense_gbps']:>7.0f}"
                  f"{100 * row['dense_peak_frac']:>6.1f}%{row['speedup']:>8.2f}x{row['max_rel_err']:>9.1e}")
            if args.sweep and shapes is FUSED:
                print(f"{'':<14}picked {row['config']}\n{'':<14}best   {row['sweep_best_config']}: "
                      f"{row['sweep_best_us']:.1f} us, {row['sweep_best_gbps']:.0f} GB/s")
        int4_gbps = total["int4_bytes"] / total["int4_us"] / 1e3
        dense_gbps = total["dense_bytes"] / total["dense_us"] / 1e3
        print(f"{'layer total':<28}{total['int4_us']:>9.1f}{int4_gbps:>7.0f}"
              f"{100 * int4_gbps / args.peak_gbps:>6.1f}%{total['dense_us']:>9.1f}{dense_gbps:>7.0f}"
              f"{100 * dense_gbps / args.peak_gbps:>6.1f}%{total['dense_us'] / total['int4_us']:>8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), args=vars(args), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
