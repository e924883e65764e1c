"""Python entry points of ops.c (RMSNorm, SiLU-and-mul, paged attention, argmax, argmax with its probability) on
float32 CPU tensors. Callers check dtype and layout; these only pass pointers."""
from __future__ import annotations

import torch

from tiers.native.build import NativeKernelError, NativeLibrary

MAX_HEAD_DIM = 1024  # aio_rotary's stack buffer (ops.c), used by the one-call layer too


def rmsnorm(native: NativeLibrary, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x float32 [M, K] (rows contiguous), weight float32 [K] -> weight * (x * rsqrt(mean(x^2) + eps))."""
    m, k = x.shape
    out = torch.empty(m, k, dtype=torch.float32)
    native.lib.aio_rmsnorm(x.data_ptr(), x.stride(0), weight.data_ptr(), out.data_ptr(), m, k, eps,
                           torch.get_num_threads())
    return out


def silu_mul(native: NativeLibrary, gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up float32 [M, 2I] (contiguous) -> silu(gate) * up, [M, I]."""
    m, two_i = gate_up.shape
    out = torch.empty(m, two_i // 2, dtype=torch.float32)
    native.lib.aio_silu_mul(gate_up.data_ptr(), out.data_ptr(), m, two_i // 2, torch.get_num_threads())
    return out


def argmax(native: NativeLibrary, x: torch.Tensor) -> torch.Tensor:
    """x float32 [M, V] (rows contiguous, rows may be strided) -> int64 [M], torch.argmax(x, -1): the first of equal
    maxima, a NaN counting as the largest."""
    m, v = x.shape
    token = torch.empty(m, dtype=torch.int64)
    native.lib.aio_argmax(x.data_ptr(), m, v, x.stride(0), token.data_ptr())
    return token


def argmax_prob(native: NativeLibrary, logits: torch.Tensor, token_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits float32 [M, V] (contiguous) -> each row's argmax (as `argmax`) and its softmax probability: int64 [M],
    float32 [M]. token_ids (int64 [V], contiguous): the logits are those tokens' (a reduced head's kept rows, -inf
    for every other token); the argmax is then the token id, the least of equal maxima."""
    m, v = logits.shape
    assert token_ids is None or (token_ids.shape == (v,) and token_ids.dtype == torch.int64
                                 and token_ids.is_contiguous())
    token, prob = torch.empty(m, dtype=torch.int64), torch.empty(m, dtype=torch.float32)
    native.lib.aio_argmax_prob(logits.data_ptr(), m, v, token_ids.data_ptr() if token_ids is not None else None,
                               token.data_ptr(), prob.data_ptr())
    return token, prob


def paged_attention(native: NativeLibrary, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor, token_seq: torch.Tensor,
                    visible: torch.Tensor, block_tables: torch.Tensor, scale: float) -> torch.Tensor:
    """Any step, one query token at a time. q [T, H, D], k / v [T, Hkv, D] (each row's heads back to back, rows
    may be strided); caches [blocks, block_size, Hkv, D] float32, written at slot_mapping; token_seq [T] (the
    token's row of block_tables [S, max_blocks]) and visible [T] (how many of its sequence's tokens it sees), all
    int64. Returns [T, H, D]."""
    t, h, d = q.shape
    hkv, block_size = k_cache.shape[2], k_cache.shape[1]
    out = torch.empty(t, h, d, dtype=torch.float32)
    if native.lib.aio_paged_attention(
            q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), k_cache.data_ptr(),
            v_cache.data_ptr(), slot_mapping.data_ptr(), t, token_seq.data_ptr(), visible.data_ptr(),
            block_tables.data_ptr(), block_tables.shape[1], h, hkv, d, block_size, scale, out.data_ptr(),
            torch.get_num_threads()):
        raise NativeKernelError("out of memory in the native paged attention")
    return out


def rotary_(native: NativeLibrary, x: torch.Tensor, heads: int, head_dim: int, cos: torch.Tensor,
            signed_sin: torch.Tensor) -> None:
    """In place: the first `heads` heads of each row of x (float32 [T, >= heads * D], rows may be strided) rotated
    as tiers.models.rotary.apply_rotary_one does, bit for bit; cos / signed_sin float32 [T, D] contiguous."""
    assert head_dim <= MAX_HEAD_DIM and x.stride(1) == 1
    native.lib.aio_rotary(x.data_ptr(), x.stride(0), x.shape[0], heads, head_dim, cos.data_ptr(),
                          signed_sin.data_ptr())
