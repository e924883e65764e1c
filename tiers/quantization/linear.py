"""QuantizedLinear: a drop-in for nn.Linear holding 4-bit or 8-bit weights (or GGUF blocks as stored), and
quantize_model, which swaps a model's projection layers for it.

What runs is decided by the registry (tiers.quantization.methods): the weight's method (int4, int8, kquant) picks
a kernel once, when the layer is built on its device, and the layer hands its inputs to that kernel object. The
kernels and the order they are picked in are listed there.
With dense_min_rows, the two torch CPU kernels hand inputs of at least that many rows (prefill chunks, large decode
batches) to one float32 GEMM over the weight dequantized for the call: the packed kernels' cost grows with every
row, where MKL's GEMM amortises the weight (~2x faster per call at 512 rows; docs/benchmarks.md). cpu_kq does the
same in bfloat16 where the CPU has bf16 units (tiers.quantization.kquant_dense). An int4 layer
then keeps its nibbles in the portable layout too (+0.5 byte per weight): torch's packed layout is CPU-specific.
On CUDA the INT4 kernel does the same by itself above DENSE_ABOVE_M rows (tiers.quantization.triton_w4a16).
Callers pass and get back their own dtype (float32 or bf16): the kernels' bf16 cast happens inside.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tiers.native import native_library
from tiers.quantization import kquant, native_weights
from tiers.quantization.int4 import Int4Weight, QuantizationError
from tiers.quantization.int8 import Int8Weight, quantize_int8
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization.methods import (INT4_CPU_GROUP_SIZES, KERNEL_FAMILIES, KERNELS, METHODS,  # noqa: F401
                                        NATIVE_KERNELS, Kernel, method_of, native_kernel_ok)

# The projections of tiers.models.llama (and their unfused Hugging Face names). lm_head / embed_tokens stay as is.
PROJECTION_NAMES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj",
                    "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def native_quantized(model: nn.Module) -> bool:
    """Whether some layer of `model` runs the native kernels (the model's other ops may then run native too)."""
    return any(isinstance(m, QuantizedLinear) and m.kernel in NATIVE_KERNELS for m in model.modules())


class QuantizedLinear(nn.Module):
    def __init__(self, weight: Int4Weight | Int8Weight | KQuantWeight, bias: torch.Tensor | None = None,
                 device: torch.device | str | None = None, kernel: str | None = None,
                 dense_min_rows: int | None = None) -> None:
        """kernel: None picks the best one for the device; a family ("native", "torch") the best of it; a name
        forces that kernel ("dequant": the portable fallback).
        dense_min_rows: see the module docstring (the kernels that take it; None: always the kernel's own path).
        A KQuantWeight runs on "cpu_kq" only (CPU, native library): callers dequantize it elsewhere."""
        super().__init__()
        if dense_min_rows is not None and dense_min_rows < 1:
            raise QuantizationError(f"dense_min_rows must be >= 1, got {dense_min_rows}")
        method = method_of(weight)
        if device is None:
            device = ("cpu" if isinstance(weight, KQuantWeight) else
                      weight.packed.device if isinstance(weight, Int4Weight) else weight.qweight.device)
        device = torch.device(device)
        if kernel is None or kernel in KERNEL_FAMILIES:
            impl = method.pick(weight, device, kernel)
        elif kernel not in KERNELS:
            raise QuantizationError(f"unknown kernel {kernel!r}")
        else:
            impl = KERNELS[kernel]
            method.check(weight, device, impl)
        self.out_features, self.in_features = weight.shape
        self.mode, self.method, self.impl = method.name, method, impl
        self.group_size = weight.group_size if isinstance(weight, Int4Weight) else None
        self.kernel, self.device = impl.name, device
        # not for the native w4a8 / w8a* kernels: their int8 activations are the computation, and they scale as
        # well as a GEMM
        self.dense_min_rows = dense_min_rows if impl.dense_rows else None
        self.native = None  # the native library, for the kernels that run in it (set by their build)
        impl.build(self, weight, device)
        self.bias = nn.Parameter(bias.detach().to(device), requires_grad=False) if bias is not None else None

    @staticmethod
    def _pick_kernel(weight: Int4Weight | Int8Weight, device: torch.device, family: str | None = None) -> str:
        """The kernel a layer of this weight built on `device` runs (its name)."""
        return method_of(weight).pick(weight, device, family).name

    def kq_arrays(self) -> tuple:
        """A cpu_kq layer's parts as C arrays (pointers, row counts, GGUF type ids) and their count, for the native
        decoder layer (tiers/native/layer.py); built once, they point into this layer's buffers."""
        return kquant.call_arrays(self.kq)

    @property
    def resident_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers()) + (
            self.bias.numel() * self.bias.element_size() if self.bias is not None else 0)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The float [N, K] weight the layer computes with (for torch's packed kernels: read back through the
        kernel with an identity input, so bf16-rounded)."""
        return self.impl.dequantize(self, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        impl: Kernel = self.impl
        if self.bias is None and impl.hot(self, x):
            return impl.matmul(self, x)  # the decode hot path: rows straight into the kernel, no casts or copies
        if x.shape[-1] != self.in_features:
            raise QuantizationError(f"input has {x.shape[-1]} features, the layer expects {self.in_features}")
        if not same_device(x.device, self.device):
            raise QuantizationError(f"input on {x.device}, the quantized weight on {self.device}: build the "
                                    "quantized layers on the model's final device")
        y = impl.forward(self, x)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.group_size else ""
        if self.kernel == "cpu_kq":
            group = f", types={'/'.join(self.kq.types)}"
        return (f"in_features={self.in_features}, out_features={self.out_features}, mode={self.mode}{group}, "
                f"kernel={self.kernel}, bias={self.bias is not None}")


class QuantizedEmbedding(nn.Module):
    """An embedding read from a tied INT8 lm_head's buffers (shared, not copied), rows dequantized in `dtype`."""

    def __init__(self, head: QuantizedLinear, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features
        self.register_buffer("qweight", head.qweight)
        self.native = head.kernel in NATIVE_KERNELS
        if not self.native:
            self.register_buffer("scales", head.scales)
        self.dtype = dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.native:
            return native_weights.gather_rows_w8(self.qweight, self.embedding_dim, ids, self.dtype)
        return F.embedding(ids, self.qweight).to(self.dtype) * self.scales[ids].unsqueeze(-1).to(self.dtype)


class KQuantEmbedding(nn.Module):
    """An embedding kept as the GGUF file stores it (KQuantWeight): the rows asked for are dequantized per call
    (exactly, as gguf's dequantizer), so a 151,936 x 896 Q5_0 table stays 77 MB instead of 545 MB of float32."""

    def __init__(self, weight: KQuantWeight, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = weight.shape
        self.kq, self.dtype = weight, dtype
        for i, (_, rows) in enumerate(weight.parts):
            self.register_buffer(f"kq_part{i}", rows)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return kquant.gather_rows(self.kq, ids, self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, types={'/'.join(self.kq.types)}"


def _native_int8(linear: nn.Linear, kernel: str | None) -> bool:
    return (linear.weight.device.type == "cpu" and kernel in (None, "native") and linear.in_features % 32 == 0
            and native_library() is not None)


def quantize_lm_head(model: nn.Module, dtype: torch.dtype, kernel: str | None = None) -> str:
    """model.lm_head as INT8 (QuantizedLinear): per block of 32 inputs for the native kernel (lossless on a GGUF's
    Q8_0 output tensor), else per channel; a tied embed_tokens becomes a QuantizedEmbedding over the same buffers,
    so the float matrix is freed. Returns the lm_head's kernel."""
    head = model.lm_head
    tied = getattr(model.embed_tokens, "weight", None) is head.weight
    with torch.no_grad():
        weight = quantize_int8(head.weight, blockwise=_native_int8(head, kernel))
        quantized = QuantizedLinear(weight, head.bias, device=head.weight.device, kernel=kernel)
    model.lm_head = quantized
    if tied:  # the same buffers: no float copy of the matrix stays
        model.embed_tokens = QuantizedEmbedding(quantized, dtype)
    return quantized.kernel


def quantize_linear(linear: nn.Linear, mode: str, group_size: int = 128, kernel: str | None = None,
                    dense_min_rows: int | None = None) -> QuantizedLinear:
    if mode not in ("int4", "int8"):
        raise QuantizationError(f"unknown quantization mode {mode!r}: expected 'int4' or 'int8'")
    # int8: blocks of 32 where the native kernel runs it: its row records hold a scale per block either way, so
    # the finer scales cost no memory
    weight = METHODS[mode].quantize(linear.weight, group_size, blockwise=_native_int8(linear, kernel))
    return QuantizedLinear(weight, linear.bias, device=linear.weight.device, kernel=kernel,
                           dense_min_rows=dense_min_rows)


def set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def quantize_model(model: nn.Module, mode: str = "int4", group_size: int = 128,
                   names: tuple[str, ...] = PROJECTION_NAMES, kernel: str | None = None,
                   dense_min_rows: int | None = None) -> dict[str, str]:
    """Swaps every nn.Linear whose last name is in `names` (the attention and MLP projections, fused or not) for a
    QuantizedLinear built on the layer's device, in place. lm_head and the (possibly tied) embedding are left alone.
    Layers a mode cannot take (int4 with in_features not a multiple of group_size) stay as they are.
    Returns {layer name: kernel, or "skipped: why"}."""
    if mode not in ("int4", "int8"):
        raise QuantizationError(f"unknown quantization mode {mode!r}: expected 'int4' or 'int8'")
    report: dict[str, str] = {}
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n.rpartition(".")[2] in names]
    for name, linear in targets:
        if mode == "int4" and linear.in_features % group_size:
            report[name] = f"skipped: in_features {linear.in_features} % group_size {group_size} != 0"
            continue
        with torch.no_grad():
            quantized = quantize_linear(linear, mode, group_size, kernel, dense_min_rows)
        set_submodule(model, name, quantized)
        report[name] = quantized.kernel
    return report


def same_device(actual: torch.device, built_on: torch.device) -> bool:
    """Whether a tensor on `actual` is on the device a layer was built for: "cuda" means the current CUDA device,
    which tensors report with its index ("cuda:0"), so an index is compared only where both name one."""
    return actual.type == built_on.type and (actual.index is None or built_on.index is None
                                             or actual.index == built_on.index)
