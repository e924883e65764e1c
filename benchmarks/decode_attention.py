"""A batch-1 decode step's attention on the CPU, against the read bound (issue 37): `decode_bound --contexts`.

The native paged attention (the one-call layer's) for one new token per layer, on the model's heads and a KV
cache of `context` earlier tokens, its blocks scattered as a pool hands them out. Each layer reads its own cache,
so a step streams every layer's K and V rows from memory as a decode does: reported per step (all layers) with the
KV bytes it reads, their GB/s and share of the bound. A step's weights are read once whatever the context; its KV
grows with it, so at a long context attention is what a decode waits on.
"""
from __future__ import annotations

import time
from typing import Any

import torch


def attention_step(config: Any, block_size: int, context: int, threads: int, read_gb_s: float | None,
                   repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """Times one decode token's attention over all layers of `config` (a ModelConfig) at `context` cached tokens,
    in KV blocks of `block_size` tokens (the engine's)."""
    from tiers.engine.kv_cache import KVCache
    from tiers.native import native_library
    from tiers.native.ops import paged_attention

    native = native_library()
    if native is None:
        raise RuntimeError("the native library does not build here: no native attention to time")
    g = torch.Generator().manual_seed(seed)
    heads, kv_heads, dim, layers = config.num_heads, config.num_kv_heads, config.head_dim, config.num_layers
    blocks = context // block_size + 1
    pool = 2 * blocks  # the sequence's blocks in a scattered order, as a shared pool hands them out
    kv = KVCache(config, pool, block_size, torch.float32, torch.device("cpu"))  # allocated as the engine's
    kv.k_cache.normal_(generator=g)
    kv.v_cache.normal_(generator=g)
    caches = kv.layers
    table = torch.randperm(pool, generator=g)[:blocks][None].contiguous()
    q = torch.randn(1, heads, dim, generator=g)
    k, v = torch.randn(1, kv_heads, dim, generator=g), torch.randn(1, kv_heads, dim, generator=g)
    slot = torch.tensor([int(table[0, context // block_size]) * block_size + context % block_size])
    seq, visible = torch.zeros(1, dtype=torch.int64), torch.tensor([context + 1])
    scale = dim ** -0.5
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best = float("inf")
        for _ in range(repeats + 1):  # the first pass faults the caches' pages in
            start = time.perf_counter()
            for kc, vc in caches:
                paged_attention(native, q, k, v, kc, vc, slot, seq, visible, table, scale)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    kv_bytes = layers * 2 * (context + 1) * kv_heads * dim * 4
    row: dict[str, Any] = {"context": context, "ms_per_token": best * 1e3, "kv_bytes": kv_bytes,
                           "gb_s": kv_bytes / best / 1e9}
    if read_gb_s:
        row["share"] = row["gb_s"] / read_gb_s
    return row


def print_attention(rows: list[dict[str, Any]]) -> None:
    print("attention of one decode token, all layers (native paged attention, float32 KV):")
    print(f"{'context':>8} {'ms/token':>9} {'KV MB':>7} {'GB/s':>6} {'share':>6}")
    for r in rows:
        share = f"{r['share']:.0%}" if "share" in r else "-"
        print(f"{r['context']:>8} {r['ms_per_token']:>9.2f} {r['kv_bytes'] / 1e6:>7.1f} {r['gb_s']:>6.1f} {share:>6}")
