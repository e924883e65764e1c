"""The memory bound of a batch-1 CPU decode step, measured in the same run as the decode (issue 37).

    python -m benchmarks.decode_bound --model FILE [--threads 2] [--rows 1,5] [--kernel-bytes 1024]
        [--contexts 256,1024,4096]

- the machine: CPU model and the ISA flags that decide which kernel path runs (AVX2, AVX-512 F / VNNI / BF16,
  AVX-VNNI, AMX), and the path the native library was built for;
- the read bound: the fastest of three readers over 1 GiB on the decode's thread count, best of a few passes each
  (what one pass over the weights can cost at most): the native library's read loop with its software prefetch,
  the same loop without it, and torch's `sum`. Which is fastest depends on the CPU (the Xeon of docs/benchmarks.md:
  the prefetching loop read 30-32 GB/s, torch's sum 25-28, the loop without prefetch not measured; an AVX2 AMD
  EPYC: torch's sum and the loop without prefetch 26.5 and 26.3, the prefetching loop 22.9, below what the decode
  kernels themselves read);
- the bytes a decode step must read: every weight of the decoder layers, the final norm and the output matrix,
  one row of an untied input embedding (`step_weight_bytes` for our loaded model, `gguf_step_bytes` for the file
  as llama.cpp runs it); a system's effective bandwidth = those bytes x its tokens/s, its share = that / the bound;
- per kernel: each projection kind of the model (qkv, o, gate_up, down, the output matrix) by its block types and
  shape, timed alone on its real weights at batch 1 (and at more rows with --rows: a verification step's cost),
  each call on weights not in any cache (the layers' own weights, cycled, and copies of them up to --kernel-bytes
  in all, so that every call streams its bytes from memory as a decode step does) with its GB/s and share of the
  bound, so the slow kernel is named, not guessed; GGUF-block kernels called back to back in C, as a step's one-call
  stack calls them (benchmarks/kernel_calls.py: through Python each call paid ~60 us more on an Intel Xeon), the
  others through their Python call; beside it (`cache`) the same kernel's GB/s on 4 MiB of its rows
  that stay in cache, called over and over: a streamed GB/s near it says the kernel's arithmetic, not memory,
  bounds that row count (on the AVX2 EPYC of docs/benchmarks.md: five rows; one row reads 1.2-1.9x slower
  streamed than in cache);
- with --contexts: a decode token's attention over all layers at those context lengths, with the KV bytes it reads
  and their share of the bound (benchmarks/decode_attention.py).
`benchmarks.quantization` calls these beside its decode runs. Prints a table and one JSON line.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # its thread pool would compete with the decode's

import torch  # noqa: E402

from benchmarks.decode_attention import attention_step, print_attention  # noqa: E402

ISA_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")
READ_BYTES = 1 << 30
KERNEL_BYTES = 1 << 30  # at least the weights each kernel's timing cycles through (caches are up to ~0.5 GB)
CACHED_BYTES = 4 << 20  # a slice that stays in the last-level cache, large enough that a call's fixed costs are small


def cpu_info() -> dict[str, Any]:
    """CPU model, vendor, logical CPUs, the ISA flags of ISA_FLAGS it has, and the native library's build path."""
    model = vendor = ""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    from tiers.native import native_library

    native = native_library()
    return {"model": model or os.uname().machine, "vendor": vendor, "cpus": os.cpu_count(),
            "isa": [f for f in ISA_FLAGS if f in flags], "native_isa": native.isa if native else None,
            "k_blocked_from": native.lib.aio_kq_blocked_from() if native else None}


def describe_cpu(info: dict[str, Any]) -> str:
    return (f"{info['model']} ({info['vendor']}, {info['cpus']} CPUs); ISA: {' '.join(info['isa']) or 'none of '}"
            f"; native kernels built for {info['native_isa']}, multi-row tiles K-blocked from rows x K = "
            f"{info['k_blocked_from']} (3/4 of the L1 data cache)")


READERS = {"native": "the native read loop", "native_no_prefetch": "the native read loop without prefetch",
           "torch_sum": "torch sum"}


def read_bandwidth(threads: int, nbytes: int = READ_BYTES, repeats: int = 5) -> dict[str, Any]:
    """The read bound on `threads` threads: the best pass of the fastest reader, each reader taking `repeats` passes
    over nbytes (larger than the caches, so each pass reads every byte from memory; on huge pages, as the loaded
    weights are: 10% faster than 4 KB pages on the AMD EPYC of issue 37), interleaved: the native
    library's read loop (`aio_read_bytes`: two cache lines a step, with and without a prefetch into L2 as the decode
    kernels prefetch) and torch's sum. `source` names the reader; each one's best is reported beside it."""
    from tiers.native import huge_pages, native_library

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    native = native_library()
    try:
        x = huge_pages.empty((nbytes // 4,), torch.float32).fill_(1.0)  # the memory the weights live on
        passes: dict[str, Callable[[], Any]] = {"torch_sum": x.sum}
        if native is not None:
            address, n = x.data_ptr(), nbytes // 128 * 128
            passes["native"] = lambda: native.lib.aio_read_bytes(address, n, threads, 1)
            passes["native_no_prefetch"] = lambda: native.lib.aio_read_bytes(address, n, threads, 0)
        runs: dict[str, list[float]] = {name: [] for name in passes}
        for name, read in passes.items():
            read()
        for _ in range(repeats):
            for name, read in passes.items():  # interleaved, so that a slow spell hits both
                start = time.perf_counter()
                read()
                runs[name].append(nbytes / (time.perf_counter() - start) / 1e9)
        del x
    finally:
        torch.set_num_threads(before)
    source = max(runs, key=lambda name: max(runs[name]))
    best = {f"{name}_gb_s": max(runs[name]) if name in runs else None for name in READERS}
    return {"threads": threads, "bytes": nbytes, "read_gb_s": max(runs[source]), "source": source,
            "runs": runs[source], **best}


def step_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a batch-1 decode step reads from our loaded model: every parameter and buffer (tied ones
    once, rotary tables excluded), except that an input embedding not shared with the lm_head counts one row."""
    seen: set[int] = set()
    total = 0
    embed = getattr(model, "embed_tokens", None)
    embed_ids = {id(t) for t in list(embed.parameters()) + list(embed.buffers())} if embed is not None else set()
    items = [(n, t) for n, t in list(model.named_parameters()) + list(model.named_buffers())
             if not n.startswith("rotary.")]
    items.sort(key=lambda item: id(item[1]) in embed_ids)  # the lm_head before the embedding: a tied one is whole
    for _, t in items:
        if id(t) in seen:
            continue
        seen.add(id(t))
        nbytes = t.numel() * t.element_size()
        total += nbytes // t.shape[0] if id(t) in embed_ids and t.dim() >= 2 else nbytes
    return total


def gguf_step_bytes(path: Path) -> int:
    """Bytes a batch-1 decode step reads of the GGUF file as stored (what llama.cpp reads): every tensor, but one
    row of token_embd when the file has its own output.weight."""
    from gguf import GGUFReader

    tensors = {t.name: t for t in GGUFReader(str(path)).tensors}
    total = 0
    for name, t in tensors.items():
        if name == "token_embd.weight" and "output.weight" in tensors:
            total += int(t.n_bytes) // int(t.shape[-1])  # gguf's shape lists the row length first
        else:
            total += int(t.n_bytes)
    return total


def bound_row(weight_bytes: int, tokens_per_s: float, read_gb_s: float) -> dict[str, float]:
    gb_s = weight_bytes * tokens_per_s / 1e9
    return {"step_weight_bytes": weight_bytes, "weight_gb_s": gb_s, "share_of_read_bw": gb_s / read_gb_s}


def _kind(name: str) -> str:
    return re.sub(r"^layers\.\d+\.(self_attn|mlp)\.", "", name)


def _arena():
    """Where a timing's copies go: packed on huge pages as the loader packs a model's streamed weights
    (tiers/quantization/placement.py), so that their reads cost what the model's own do. One copy each through
    huge_pages.copy left a weight under 2 MB (the small models' q / k / v / o) on 4 KB pages."""
    from tiers.native import huge_pages

    return huge_pages.SlabArena()


def _copy(t: torch.Tensor, arena) -> torch.Tensor:
    return arena.copy(t)


def _matmul(module: torch.nn.Module, arena) -> Callable[[torch.Tensor], torch.Tensor]:
    """A fresh copy of a (not GGUF-block) quantized projection's weights (no byte shared with the model's) and its
    batch-1 kernel call, as the engine's decode makes it (bias added apart, outside the timing)."""
    clone = copy.copy(module)  # the layer's other state shared; its tensors copied
    clone._buffers = {k: _copy(v, arena) if v is not None else None for k, v in module._buffers.items()}
    clone._parameters = {k: torch.nn.Parameter(_copy(v.detach(), arena), requires_grad=False)
                         if v is not None else None for k, v in module._parameters.items()}
    return lambda x: clone.impl.matmul(clone, x)


def _timer(modules: list[torch.nn.Module]) -> Callable[[torch.Tensor], float]:
    """x -> seconds a call over one pass of fresh copies of the modules' weights, each called once in order: GGUF-block
    kernels back to back in C (benchmarks.kernel_calls: a step's stack calls them with no Python between), the others
    through their Python call."""
    arena = _arena()
    if all(m.kernel == "cpu_kq" for m in modules):
        from benchmarks.kernel_calls import kq_calls
        from tiers.quantization.kquant import KQuantWeight

        weights = [KQuantWeight([(kind, _copy(rows, arena)) for kind, rows in m.kq.parts], m.kq.in_features)
                   for m in modules]
        run = kq_calls(modules[0].native, weights)
        return lambda x: run(x) / len(weights)
    calls = [_matmul(m, arena) for m in modules]

    def python_pass(x: torch.Tensor) -> float:
        start = time.perf_counter()
        for call in calls:
            call(x)
        return (time.perf_counter() - start) / len(calls)

    return python_pass


def _cached(module: torch.nn.Module, max_bytes: int = CACHED_BYTES, seconds: float = 0.05
            ) -> tuple[Callable[..., float], int] | None:
    """x -> seconds a call of the batch-1 kernel on the first rows of a GGUF-block projection (every part cut in
    proportion to max_bytes in whole chunks of 16 rows, at least one chunk or the whole part), called over and over
    in C for ~`seconds` (its weights stay in cache, so its time is what the kernel computes, memory out of the way),
    and those bytes. None for the other kernels."""
    if module.kernel != "cpu_kq":
        return None
    from benchmarks.kernel_calls import kq_calls
    from tiers.quantization.kquant import KQuantWeight

    parts, total = module.kq.parts, module.kq.nbytes
    keep = [max(16, rows.shape[0] * max_bytes // total // 16 * 16) for _, rows in parts]
    arena = _arena()
    weight = KQuantWeight([(kind, _copy(rows[:n], arena)) for (kind, rows), n in zip(parts, keep)],
                          module.kq.in_features)

    def per_call(x: torch.Tensor, out: torch.Tensor | None = None) -> float:
        """out: as kernel_calls' pass, the slice's product after"""
        one = kq_calls(module.native, [weight])
        one(x)
        n = max(3, int(seconds / max(one(x), 1e-6)))
        run = kq_calls(module.native, [weight] * n)
        return min(run(x, out) for _ in range(3)) / n

    return per_call, weight.nbytes


def _resident(module: torch.nn.Module) -> int:
    return sum(b.numel() * b.element_size() for b in module.buffers()) + sum(
        p.numel() * p.element_size() for n, p in module.named_parameters() if n != "bias")


def projection_groups(model: torch.nn.Module) -> dict[tuple, list[tuple[str, torch.nn.Module]]]:
    """The model's quantized projections grouped by (kind, block types, shape, kernel), in model order."""
    from tiers.quantization import QuantizedLinear

    groups: dict[tuple, list[tuple[str, torch.nn.Module]]] = defaultdict(list)
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            types = "+".join(module.kq.types) if module.kernel == "cpu_kq" else module.mode
            groups[(_kind(name), types, (module.out_features, module.in_features), module.kernel)].append(
                (name, module))
    return groups


def kernel_breakdown(model: torch.nn.Module, threads: int, read_gb_s: float | None, rows: tuple[int, ...] = (1,),
                     kernel_bytes: int = KERNEL_BYTES, repeats: int = 3) -> list[dict[str, Any]]:
    """Per projection group: its kernel timed alone at each row count of `rows`, on its own copies of the group's
    weights (cycled through at least kernel_bytes, so no call finds its weights in a cache). bytes: one call's
    weight bytes (the layer's buffers: blocks, scales); gb_s: bytes / seconds per call; ms_per_token: the
    group's calls in one decode step (one per layer) at that time; share: gb_s / read_gb_s. GGUF-block kernels
    also: cached_gb_s, the same kernel's weight bytes per second on a slice of its rows that stays in cache (what
    it computes with memory out of the way: gb_s near it means the kernel, not memory, bounds that row count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    out = []
    try:
        for (kind, types, (n, k), kernel), members in projection_groups(model).items():
            per_call = _resident(members[0][1])
            copies = max(1, math.ceil(kernel_bytes / (per_call * len(members))))
            modules = [module for _ in range(copies) for _, module in members]
            timer = _timer(modules)
            cached = _cached(members[0][1])
            row = {"kind": kind, "types": types, "shape": [n, k], "kernel": kernel, "layers": len(members),
                   "bytes": per_call, "copies": len(modules)}
            for m in rows:
                x = torch.randn(m, k)
                timer(x)  # warm-up: page faults of the copies, the kernel's first call
                best = min(timer(x) for _ in range(repeats))
                key = "" if m == 1 else f"_m{m}"
                row[f"us{key}"] = best * 1e6
                row[f"gb_s{key}"] = per_call / best / 1e9
                row[f"ms_per_token{key}"] = best * len(members) * 1e3
                if read_gb_s:
                    row[f"share{key}"] = per_call / best / 1e9 / read_gb_s
                if m != 1 and "us" in row:
                    row[f"cost_m{m}_vs_m1"] = best * 1e6 / row["us"]
                if cached is not None:
                    row[f"cached_gb_s{key}"] = cached[1] / cached[0](x) / 1e9
            del timer
            out.append(row)
    finally:
        torch.set_num_threads(before)
    return out


def merge_bandwidth(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Several read_bandwidth results of one thread count (before and after a benchmark's runs) as one: the fastest
    one's bound and reader, each reader's best over all of them, and every result's bound in order."""
    best = max(passes, key=lambda b: b["read_gb_s"])
    return {"read_gb_s": best["read_gb_s"], "source": best["source"],
            "before_after": [b["read_gb_s"] for b in passes],
            **{f"{name}_gb_s": max((b[f"{name}_gb_s"] for b in passes if b[f"{name}_gb_s"] is not None), default=None)
               for name in READERS}}


def describe_readers(bw: dict[str, Any], sep: str = ", ", skip: str | None = None) -> str:
    """Each reader's best GB/s in `bw` (a read_bandwidth or merge_bandwidth result), but `skip`'s."""
    return sep.join(f"{how} {bw[f'{name}_gb_s']:.1f}" for name, how in READERS.items()
                    if name != skip and bw.get(f"{name}_gb_s") is not None)


def describe_bound(bw: dict[str, Any]) -> str:
    return (f"{bw['read_gb_s']:.1f} GB/s ({READERS[bw['source']]} over {bw['bytes'] / (1 << 30):.0f} GiB, best of "
            f"{len(bw['runs'])}; {describe_readers(bw, '; ', skip=bw['source'])})")


def print_cpu_and_bound(info: dict[str, Any], bandwidth: dict[int, dict[str, Any]]) -> None:
    print(f"CPU: {describe_cpu(info)}")
    for t, bw in bandwidth.items():
        print(f"read bound, {t} thread(s): {describe_bound(bw)}")


def print_breakdown(rows: list[dict[str, Any]], ms: tuple[int, ...] = (1,)) -> None:
    head = f"{'projection':<14} {'types':<16} {'N x K':>13} {'layers':>6} {'MB/call':>8} {'us/call':>8} " \
           f"{'GB/s':>6} {'cache':>6} {'share':>6} {'ms/token':>9}"
    extra = "".join(f" {f'us m={m}':>9} {f'x m=1':>6} {'cache':>6}" for m in ms if m != 1)
    print(head + extra)
    for r in sorted(rows, key=lambda r: -r["ms_per_token"]):
        line = (f"{r['kind']:<14} {r['types']:<16} {r['shape'][0]:>6} x {r['shape'][1]:<5} {r['layers']:>6} "
                f"{r['bytes'] / 1e6:>8.2f} {r['us']:>8.1f} {r['gb_s']:>6.1f} "
                f"{r.get('cached_gb_s', float('nan')):>6.1f} "
                f"{r.get('share', float('nan')):>6.0%} {r['ms_per_token']:>9.2f}")
        for m in ms:
            if m != 1:
                line += (f" {r[f'us_m{m}']:>9.1f} {r[f'cost_m{m}_vs_m1']:>5.2f}x"
                         f" {r.get(f'cached_gb_s_m{m}', float('nan')):>6.1f}")
        print(line)
    total_ms = sum(r["ms_per_token"] for r in rows)
    total_bytes = sum(r["bytes"] * r["layers"] for r in rows)
    line = f"all projections: {total_ms:.2f} ms per token for {total_bytes / 1e6:.0f} MB ({total_bytes / total_ms / 1e6:.1f} GB/s)"
    for m in ms:
        if m != 1:
            t = sum(r[f"ms_per_token_m{m}"] for r in rows)
            line += f"; {m} rows: {t:.2f} ms ({t / total_ms:.2f}x one row)"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quantization", default="auto")
    ap.add_argument("--lm8", action="store_true", help="quantize_lm_head=True (the family demo's setting)")
    ap.add_argument("--rows", default="1", help="comma-separated row counts per kernel call (1 first), e.g. 1,5")
    ap.add_argument("--kernel-bytes", type=int, default=KERNEL_BYTES >> 20, help="MiB each kernel cycles through")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--contexts", default="", help="comma-separated context lengths at which to time a decode "
                    "token's attention too (benchmarks.decode_attention), e.g. 256,1024,4096")
    args = ap.parse_args()
    rows = tuple(int(r) for r in args.rows.split(","))
    contexts = tuple(int(c) for c in args.contexts.split(",") if c)
    from tiers import Engine

    info = cpu_info()
    engine = Engine.from_pretrained(str(args.model), quantization=args.quantization, quantize_lm_head=args.lm8,
                                    kv_cache_bytes=16 << 20, max_model_len=256)
    model = engine.runner.model
    bandwidth = {args.threads: read_bandwidth(args.threads)}
    read = bandwidth[args.threads]["read_gb_s"]
    breakdown = kernel_breakdown(model, args.threads, read, rows, args.kernel_bytes << 20, args.repeats)
    ours, theirs = step_weight_bytes(model), gguf_step_bytes(args.model)
    print_cpu_and_bound(info, bandwidth)
    print(f"{args.model.name}: a decode step reads {ours / 1e6:.1f} MB of our loaded weights "
          f"({theirs / 1e6:.1f} MB of the file as stored); at the read bound: {read * 1e9 / ours:.1f} tok/s")
    print_breakdown(breakdown, rows)
    attention = [attention_step(engine.model_config, engine.config.block_size, c, args.threads, read)
                 for c in contexts]
    if attention:
        print_attention(attention)
    print("JSON " + json.dumps({"cpu": info, "bandwidth": bandwidth, "step_weight_bytes": ours,
                                "gguf_step_bytes": theirs, "kernels": breakdown, "attention": attention}))
    engine.close()


if __name__ == "__main__":
    main()
