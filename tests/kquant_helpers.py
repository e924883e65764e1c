"""Valid GGUF blocks with sane scales, built here (the gguf package quantizes no K-quant): random codes and
sub-block scales packed as ggml lays them out, fp16 super-block scales of the size real weights have."""
from __future__ import annotations

import numpy as np
import torch

from tiers.quantization.kquant import BLOCK_TYPES, row_bytes


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(*values.shape, 2)


def _pack_scales_k4(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """[..., 8] 6-bit scales and mins -> ggml's 12 bytes (get_scale_min_k4's inverse)."""
    q = np.zeros((*sc.shape[:-1], 12), dtype=np.uint8)
    q[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    q[..., 4:8] = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    q[..., 8:12] = (sc[..., 4:] & 0x0F) | ((m[..., 4:] & 0x0F) << 4)
    return q


def make_blocks(kind: str, n: int, k: int, rng: np.random.Generator, scale: float = 0.02) -> np.ndarray:
    """uint8 [n, row_bytes(kind, k)]: rows of valid `kind` blocks whose values are about `scale` in size."""
    _, elems, _ = BLOCK_TYPES[kind]
    g = (n, k // elems)
    rand = lambda *shape: rng.integers(0, 256, size=(*g, *shape), dtype=np.uint8)  # noqa: E731
    if kind in ("Q4_K", "Q5_K"):
        bits = 4 if kind == "Q4_K" else 5
        d = _fp16(rng.uniform(0.5, 1.5, g) * scale / (63 * 2 ** (bits - 1)) * 2)
        dmin = _fp16(rng.uniform(0.5, 1.5, g) * scale / 63)
        sc, m = rng.integers(0, 64, (*g, 8), dtype=np.uint8), rng.integers(0, 64, (*g, 8), dtype=np.uint8)
        parts = [d, dmin, _pack_scales_k4(sc, m)] + ([rand(32)] if kind == "Q5_K" else []) + [rand(128)]
    elif kind == "Q6_K":
        scales = rng.integers(-64, 64, (*g, 16)).astype(np.int8).view(np.uint8)
        d = _fp16(rng.uniform(0.5, 1.5, g) * scale / (64 * 32))
        parts = [rand(128), rand(64), scales, d]
    else:  # the 32-blocks: gguf quantizes them
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import quantize

        values = rng.standard_normal((n, k)).astype(np.float32) * scale
        return quantize(values, GGMLQuantizationType[kind]).reshape(n, row_bytes(kind, k))
    return np.concatenate(parts, axis=-1).reshape(n, row_bytes(kind, k))


# A Q4_K_M-like mix (llama.cpp's choice for rows of 256: Q4_K, some Q6_K, Q5_0 / Q8_0 where a K-quant does not fit)
MIX = {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K", "attn_output": "Q5_K", "ffn_gate": "Q4_K",
       "ffn_up": "Q5_0", "ffn_down": ("Q6_K", "Q8_0"), "output": "Q6_K", "token_embd": "Q8_0"}


def write_kquant_gguf(path, *, arch: str = "qwen2", hidden: int = 256, heads: int = 4, kv_heads: int = 2,
                      ffn: int = 512, layers: int = 2, types: dict | None = None, tied: bool = False,
                      seed: int = 0) -> None:
    """A random llama-family GGUF whose projections are `types` (MIX: per GGUF tensor name; a tuple alternates
    over layers), its blocks built by make_blocks; norms near 1, qwen2 biases small."""
    from gguf import GGMLQuantizationType as Q

    from tests.quant_helpers import gguf_writer

    types = {**MIX, **(types or {})}
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    w, vocab = gguf_writer(path, arch, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)

    def add(name: str, shape: tuple[int, ...], kind: str | tuple, layer: int = 0, scale: float = 0.05) -> None:
        kind = kind[layer % len(kind)] if isinstance(kind, tuple) else kind
        if kind == "F32":
            values = (1 + 0.1 * rng.standard_normal(shape) if name.endswith("norm.weight")
                      else scale * rng.standard_normal(shape)).astype(np.float32)
            w.add_tensor(name, values)
        else:
            w.add_tensor(name, make_blocks(kind, shape[0], shape[1], rng, scale), raw_dtype=Q[kind])

    add("token_embd.weight", (vocab, hidden), types["token_embd"], scale=1.0)
    for i in range(layers):
        p = f"blk.{i}"
        add(f"{p}.attn_norm.weight", (hidden,), "F32")
        add(f"{p}.ffn_norm.weight", (hidden,), "F32")
        add(f"{p}.attn_q.weight", (heads * head_dim, hidden), types["attn_q"], i)
        add(f"{p}.attn_k.weight", (kv_heads * head_dim, hidden), types["attn_k"], i)
        add(f"{p}.attn_v.weight", (kv_heads * head_dim, hidden), types["attn_v"], i)
        if arch == "qwen2":
            for part, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
                add(f"{p}.attn_{part}.bias", (rows * head_dim,), "F32", scale=0.02)
        add(f"{p}.attn_output.weight", (hidden, heads * head_dim), types["attn_output"], i)
        add(f"{p}.ffn_gate.weight", (ffn, hidden), types["ffn_gate"], i)
        add(f"{p}.ffn_up.weight", (ffn, hidden), types["ffn_up"], i)
        add(f"{p}.ffn_down.weight", (hidden, ffn), types["ffn_down"], i)
    add("output_norm.weight", (hidden,), "F32")
    if not tied:
        add("output.weight", (vocab, hidden), types["output"], scale=0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def emulate(x: torch.Tensor, weight: torch.Tensor, block: int = 32) -> torch.Tensor:
    """The kernel's arithmetic with exact sums: activations to int8 per `block` as the kernel does in float32
    (d = max|x| / 127, q = round half to even of x * (127 / max|x|)), then sum_b d_b * (q_b . w_b) in float64."""
    m, k = x.shape
    xb = x.float().view(m, k // block, block)
    amax = xb.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros(()))
    q = torch.round(xb * inv).clamp(-127, 127).double()
    d = (amax / 127).double()
    wb = weight.double().view(weight.shape[0], k // block, block)
    return torch.einsum("mbi,nbi,mb->mn", q, wb, d.squeeze(-1)).float()
