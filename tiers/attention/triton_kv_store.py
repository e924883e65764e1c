"""Triton kernel that writes a step's new K/V rows into the paged cache (slot -1: skip)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tiers.triton_device import unavailable


@triton.jit
def _store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                     stride_kt, stride_kh, stride_vt, stride_vh,
                     stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                     NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                     HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    h = tl.arange(0, HEADS_PAD)
    d = tl.arange(0, HEAD_DIM_PAD)
    mask = (h[:, None] < NUM_KV_HEADS) & (d[None, :] < HEAD_DIM)
    k = tl.load(key_ptr + token * stride_kt + h[:, None] * stride_kh + d[None, :], mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h[:, None] * stride_vh + d[None, :], mask=mask)
    k_dst = k_cache_ptr + block * stride_kcb + offset * stride_kcs + h[:, None] * stride_kch + d[None, :]
    v_dst = v_cache_ptr + block * stride_vcb + offset * stride_vcs + h[:, None] * stride_vch + d[None, :]
    tl.store(k_dst, k, mask=mask)
    tl.store(v_dst, v, mask=mask)


def store_kv_cache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """key/value [T, Hkv, D] -> caches [num_blocks, block_size, Hkv, D] at slot_mapping [T] (int64)."""
    if key.shape != value.shape or key.dim() != 3:
        raise ValueError(f"key and value must both be [tokens, kv_heads, head_dim], got {tuple(key.shape)} "
                         f"and {tuple(value.shape)}")
    if k_cache.shape != v_cache.shape or k_cache.shape[2:] != key.shape[1:]:
        raise ValueError(f"caches {tuple(k_cache.shape)} do not match key rows {tuple(key.shape[1:])}")
    if slot_mapping.shape != (key.shape[0],):
        raise ValueError(f"slot_mapping must have one slot per token ({key.shape[0]}), got {tuple(slot_mapping.shape)}")
    if not (key.dtype == value.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError(f"key, value and caches need one dtype, got {key.dtype}, {value.dtype}, {k_cache.dtype}, "
                         f"{v_cache.dtype}")
    if slot_mapping.dtype not in (torch.int32, torch.int64) or not slot_mapping.is_contiguous():
        raise ValueError(f"slot_mapping must be a contiguous int64 (or int32) tensor, got {slot_mapping.dtype}")
    if key.stride(-1) != 1 or value.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("the head dimension must be contiguous")
    devices = {t.device for t in (key, value, k_cache, v_cache, slot_mapping)}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    problem = unavailable(key.device, _store_kv_kernel)
    if problem:
        raise ValueError(problem)
    if key.shape[0] == 0:
        return
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    _store_kv_kernel[(key.shape[0],)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads), HEAD_DIM=head_dim,
        HEAD_DIM_PAD=triton.next_power_of_2(head_dim), BLOCK_SIZE=k_cache.shape[1])
