"""Fused Triton kernels for a decoder layer's small ops on CUDA, one launch each (as vLLM's fused_add_rms_norm,
rotary_embedding and silu_and_mul): RMSNorm (with the residual add), SiLU-and-mul and rotary in place.

Each kernel rounds where the torch ops it replaces round (tiers/models/llama.py's unfused path), so a bf16/fp16
model computes the same values: every elementwise step is done in fp32 and rounded to the tensor's dtype exactly
where a torch op would write its result, fp32 mul/add are never contracted into FMAs (enable_fp_fusion=False), and
SiLU uses libdevice's expf and a correctly rounded division as torch's CUDA kernel does. The one step that cannot
be reproduced is RMSNorm's mean of squares: torch's CUDA reduction sums the row in its own order, Triton's tl.sum
in another, so the fp32 mean may differ in its last bits and a normed element may then round one bf16/fp16 ulp
apart (rarely: the residual sum itself is always exact). The launch grids come from shapes only and nothing syncs
with the host, so the kernels can be captured in CUDA graphs.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from tiers.triton_device import interpreted, unavailable

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_ROW = 65536  # RMSNorm keeps a whole row in one block
SILU_BLOCK = 1024


@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, n, stride_x, stride_r, stride_o,
                     stride_ro, eps, inv_n, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        summed = (x + r).to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * stride_ro + cols, summed, mask=mask)
        x = summed.to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) * inv_n
    normed = (x * tl.math.rsqrt(mean_square + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (weight * normed).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_and_mul_kernel(in_ptr, out_ptr, n, stride_in, stride_out, LIBDEVICE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    gate = tl.load(in_ptr + row * stride_in + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(in_ptr + row * stride_in + n + cols, mask=mask, other=0.0).to(tl.float32)
    if LIBDEVICE:  # expf as torch's silu calls it; tl.exp would be the faster, less accurate ex2.approx
        exp = libdevice.exp(-gate)
    else:  # the interpreter has no libdevice
        exp = tl.exp(-gate)
    dtype = out_ptr.dtype.element_ty
    silu = tl.math.div_rn(gate, 1.0 + exp).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (silu * up).to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, stride_xt, stride_xh, stride_ct, stride_st, half,
                   HALF_BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, HALF_BLOCK)
    mask = d < half
    # Each thread owns element d of both halves and is the only one to write them: in place without a race.
    lo_ptr = x_ptr + token * stride_xt + head * stride_xh + d
    lo = tl.load(lo_ptr, mask=mask, other=0.0).to(tl.float32)
    hi = tl.load(lo_ptr + half, mask=mask, other=0.0).to(tl.float32)
    cos_row = cos_ptr + token * stride_ct + d
    sin_row = sin_ptr + token * stride_st + d
    cos_lo = tl.load(cos_row, mask=mask, other=0.0).to(tl.float32)
    cos_hi = tl.load(cos_row + half, mask=mask, other=0.0).to(tl.float32)
    sin_lo = tl.load(sin_row, mask=mask, other=0.0).to(tl.float32)
    sin_hi = tl.load(sin_row + half, mask=mask, other=0.0).to(tl.float32)
    dtype = x_ptr.dtype.element_ty
    # x * cos + x.roll(D/2) * signed_sin, each product rounded to the dtype, then the sum
    new_lo = (lo * cos_lo).to(dtype).to(tl.float32) + (hi * sin_lo).to(dtype).to(tl.float32)
    new_hi = (hi * cos_hi).to(dtype).to(tl.float32) + (lo * sin_hi).to(dtype).to(tl.float32)
    tl.store(lo_ptr, new_lo.to(dtype), mask=mask)
    tl.store(lo_ptr + half, new_hi.to(dtype), mask=mask)


@functools.cache
def _launch_options() -> dict[str, bool]:
    """No FMA contraction (torch rounds each mul), and libdevice without flush-to-zero (torch's CUDA build keeps
    denormals) where this Triton has the option."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions

        fields = CUDAOptions.__dataclass_fields__
    except (ImportError, AttributeError):
        fields = {"enable_fp_fusion": None}
    return {name: False for name in ("enable_fp_fusion", "enable_reflect_ftz") if name in fields}


def _check_device(kernel: object, *tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    problem = unavailable(tensors[0].device, kernel)
    if problem:
        raise ValueError(problem)


def _check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as [rows, last dim] with a contiguous last dimension (a view where torch can make one)."""
    rows = t.reshape(-1, t.shape[-1])
    return rows if rows.shape[-1] <= 1 or rows.stride(-1) == 1 else rows.contiguous()


def _check_norm_inputs(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor) -> None:
    _check_float("x", x)
    _check_float("weight", weight)
    hidden = x.shape[-1] if x.dim() else 0
    if weight.shape != (hidden,):
        raise ValueError(f"weight must have shape ({hidden},) to match x {tuple(x.shape)}, got {tuple(weight.shape)}")
    if not 0 < hidden <= MAX_ROW:
        raise ValueError(f"the normalised dimension must be between 1 and {MAX_ROW}, got {hidden}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}, got "
                         f"{tuple(residual.shape)} {residual.dtype}")
    _check_device(_rms_norm_kernel, *([x, weight] if residual is None else [x, residual, weight]))


def _rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    _check_norm_inputs(x, residual, weight)
    rows = _rows(x)
    n = rows.shape[1]
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    res_rows = _rows(residual) if residual is not None else rows
    res_out = torch.empty(rows.shape, dtype=x.dtype, device=x.device) if residual is not None else out
    if rows.shape[0]:
        # torch's CUDA mean multiplies the sum by float(outputs) / numel, computed in float
        inv_n = float(np.float32(rows.shape[0]) / np.float32(rows.numel()))
        block = triton.next_power_of_2(n)
        _rms_norm_kernel[(rows.shape[0],)](
            rows, res_rows, weight.contiguous(), out, res_out, n, rows.stride(0), res_rows.stride(0), out.stride(0),
            res_out.stride(0), eps, inv_n, HAS_RESIDUAL=residual is not None, BLOCK=block,
            num_warps=min(max(block // 512, 1), 16), **_launch_options())
    return out.view(x.shape), (res_out.view(x.shape) if residual is not None else None)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2, -1) + eps)).to(x.dtype), the normalisation done in fp32: x [..., hidden]."""
    return _rms_norm(x, None, weight, eps)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one launch; neither input is written."""
    if residual is None:
        raise ValueError("fused_add_rms_norm needs a residual tensor (rms_norm has none)")
    normed, summed = _rms_norm(x, residual, weight, eps)
    return normed, summed


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """F.silu(gate) * up for gate_up [..., 2I] whose first half is the gate: [..., I]."""
    _check_float("gate_up", gate_up)
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"gate_up must be [..., 2 * intermediate], got {tuple(gate_up.shape)}")
    _check_device(_silu_and_mul_kernel, gate_up)
    rows = _rows(gate_up)
    n = rows.shape[1] // 2
    out = torch.empty((rows.shape[0], n), dtype=gate_up.dtype, device=gate_up.device)
    if out.numel():
        grid = (rows.shape[0], triton.cdiv(n, SILU_BLOCK))
        _silu_and_mul_kernel[grid](rows, out, n, rows.stride(0), out.stride(0),
                                   LIBDEVICE=not interpreted(_silu_and_mul_kernel), BLOCK=SILU_BLOCK,
                                   **_launch_options())
    return out.view(*gate_up.shape[:-1], n)


def _check_rotary_inputs(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> None:
    _check_float("x", x)
    if x.dim() != 3 or x.shape[-1] % 2 or x.stride(-1) != 1:
        raise ValueError(f"x must be [tokens, heads, head_dim] with an even, contiguous head_dim, got "
                         f"{tuple(x.shape)} with strides {x.stride()}")
    tokens, head_dim = x.shape[0], x.shape[2]
    for name, t in (("cos", cos), ("signed_sin", signed_sin)):
        if t.shape not in ((tokens, 1, head_dim), (tokens, head_dim)) or t.stride(-1) != 1:
            raise ValueError(f"{name} must be [tokens, 1, head_dim] = ({tokens}, 1, {head_dim}) with a contiguous "
                             f"last dimension, got {tuple(t.shape)}")
        if t.dtype != x.dtype:
            raise ValueError(f"{name} must have x's dtype {x.dtype} (the rotation is written in place), got {t.dtype}")
    _check_device(_rotary_kernel, x, cos, signed_sin)


def rotary_(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """In place: x = x * cos + x.roll(D/2, -1) * signed_sin (tiers.models.rotary.apply_rotary_one's values) for x
    [T, heads, D] (any token and head strides, e.g. the q|k columns of a fused qkv projection) and cos/signed_sin
    [T, 1, D] or [T, D]. Returns x."""
    _check_rotary_inputs(x, cos, signed_sin)
    tokens, heads, head_dim = x.shape
    if x.numel():
        half = head_dim // 2
        _rotary_kernel[(tokens, heads)](x, cos, signed_sin, x.stride(0), x.stride(1), cos.stride(0),
                                        signed_sin.stride(0), half, HALF_BLOCK=triton.next_power_of_2(half),
                                        num_warps=1, **_launch_options())
    return x
