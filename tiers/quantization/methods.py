"""The quantization methods and their kernels, one object each (gguf-py's one class per quant type; vLLM's
QuantizationConfig / LinearMethod), instead of string if-chains in QuantizedLinear.

Two levels:
- a QuantMethod per weight format (METHODS: "int4" Int4Weight, "int8" Int8Weight, "kquant" KQuantWeight): how a
  float weight is packed into it (quantize), and which kernel runs it on a device (pick: its kernels in order of
  preference, the first that accepts the weight there);
- a Kernel per way of running a layer (KERNELS, by name): the weights and devices it takes (accepts), the buffers
  it keeps on the layer (build), its matmul by row count (forward / matmul: e.g. the CUDA INT4 kernel hands a few
  rows to a GEMV, more to a tiled GEMM, and many to cuBLAS over the weight dequantized for the call), and how it
  reads its weight back (dequantize).

The kernels, by device:
- int4 / int8 on CPU, when the native library builds (tiers.native) and in_features % 32 == 0: "cpu_w4a8"
  (activations quantized to int8 blocks of 32 as llama.cpp does) / "cpu_w8a32" (float32 activations; "cpu_w8a8",
  int8 activations, on request); any float dtype in;
- otherwise int4 on CPU: torch's `_weight_int4pack_mm_for_cpu` ("cpu_int4pack": bf16 activations; needs
  out_features % 16 == 0 and a group size of 32/64/128/256);
- int8 on CPU: torch's `_weight_int8pack_mm` ("cpu_int8pack": bf16 activations: float32 ones take a path ~10x
  slower);
- GGUF blocks as stored on CPU: "cpu_kq" (tiers/native/kquant.c);
- int4 on CUDA with triton importable: "triton_w4a16" (tiers.quantization.triton_w4a16: a GEMV for M <= 2 rows, a
  tiled tl.dot GEMM dequantizing in registers up to DENSE_ABOVE_M rows, cuBLAS over the weight dequantized into a
  reused buffer above; group sizes that are multiples of 32);
- anything else (int8 on CUDA, odd shapes, a torch without the op): "dequant", the weight dequantized per call
  and F.linear.
A caller may name a family instead of a kernel: "native" (the cpu_w* kernel of its mode) or "torch" (torch's
packed CPU kernels); a family the layer cannot take falls back to the best remaining kernel.
Forcing a kernel by name (tests, benchmarks) is checked only where a wrong one could not run at all (the native
and Triton kernels).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from tiers.native import native_library
from tiers.quantization import kquant, kquant_dense, native_weights
from tiers.quantization.cpu_native import gemm
from tiers.quantization.int4 import Int4Weight, QuantizationError, quantize_int4, unpack_nibbles
from tiers.quantization.int8 import Int8Weight, quantize_int8
from tiers.quantization.kquant import KQuantWeight

if TYPE_CHECKING:
    from tiers.quantization.linear import QuantizedLinear

INT4_CPU_GROUP_SIZES = (32, 64, 128, 256)
KERNEL_FAMILIES = ("native", "torch")
Weight = Int4Weight | Int8Weight | KQuantWeight


def native_kernel_ok(weight: Int4Weight | Int8Weight) -> bool:
    return native_weights.native_ok(weight) and native_library() is not None


def triton_w4a16_ok(weight: Int4Weight) -> bool:
    try:  # imports triton: only asked for CUDA layers
        from tiers.quantization.triton_w4a16 import w4a16_supported
    except ImportError:
        return False
    return w4a16_supported(weight)


# ------------------------------------------------------------------------------------------------------- kernels

class Kernel:
    """One way to run a quantized layer. Subclasses set the class attributes and override what differs."""
    name = ""
    device_type: str | None = None  # "cpu" / "cuda"; None: any device
    family: str | None = None  # "native" / "torch": what a caller may name instead of this kernel
    native = False  # runs in tiers.native (the model's other ops may then run native too)
    row_dtype: torch.dtype | None = None  # the rows' dtype for matmul (None: the input's own)
    dense_rows = False  # takes QuantizedLinear's dense_min_rows (one float GEMM for many rows)

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        return self.device_type is None or device.type == self.device_type

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        """Registers the buffers this kernel computes from on the layer."""
        raise NotImplementedError

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        """x2 [M, K] in row_dtype (contiguous along K) -> [M, N], no bias."""
        raise NotImplementedError

    def hot(self, layer: QuantizedLinear, x: torch.Tensor) -> bool:
        """Whether x can go straight to matmul (the decode hot path: no checks, casts or copies)."""
        return False

    def forward(self, layer: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
        """x [..., K] in any float dtype -> [..., N] in x's dtype, no bias."""
        x2 = x.reshape(-1, layer.in_features).to(self.row_dtype or x.dtype).contiguous()
        return self.matmul(layer, x2).view(*x.shape[:-1], layer.out_features).to(x.dtype)

    def dequantize(self, layer: QuantizedLinear, dtype: torch.dtype) -> torch.Tensor:
        """The float [N, K] weight the layer computes with. Default: read back through the kernel with an identity
        input (so in the kernel's rounding)."""
        eye = torch.eye(layer.in_features, dtype=self.row_dtype or torch.float32, device=layer.device)
        return self.matmul(layer, eye).t().to(dtype).contiguous()


def _int4_buffers(layer: QuantizedLinear, weight: Int4Weight, device: torch.device) -> None:
    weight = weight.to(device)
    layer.register_buffer("qweight", weight.packed)
    layer.register_buffer("scales", weight.scales.float())
    layer.register_buffer("mins", weight.mins.float())


def _int4_of(layer: QuantizedLinear) -> Int4Weight:
    return Int4Weight(layer.qweight, layer.scales, layer.mins, layer.group_size)


class DequantKernel(Kernel):
    """Any device: the weight dequantized for each call, then F.linear (int8: the per-channel scale after it)."""
    name = "dequant"

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        if isinstance(weight, Int4Weight):
            _int4_buffers(layer, weight, device)
        else:
            layer.register_buffer("qweight", weight.qweight.to(device))
            layer.register_buffer("scales", weight.scales.to(device, torch.float32))

    def forward(self, layer: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
        if layer.mode == "int8":  # the per-channel scale commutes with the matmul: no float weight is built
            return F.linear(x, layer.qweight.to(x.dtype)) * layer.scales.to(x.dtype)
        return F.linear(x, self.dequantize(layer, x.dtype))

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        return self.forward(layer, x2)

    def dequantize(self, layer: QuantizedLinear, dtype: torch.dtype) -> torch.Tensor:
        if layer.mode == "int4":
            return _int4_of(layer).dequantize(dtype)
        return Int8Weight(layer.qweight, layer.scales).dequantize(dtype)


class TritonW4A16Kernel(DequantKernel):
    """INT4 on CUDA: tiers.quantization.triton_w4a16 (GEMV / tl.dot GEMM / dequantize + cuBLAS by row count).
    Reads back exactly the values it computes with (Int4Weight.dequantize)."""
    name = "triton_w4a16"
    device_type = "cuda"

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        return device.type == "cuda" and isinstance(weight, Int4Weight) and triton_w4a16_ok(weight)

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        _int4_buffers(layer, weight, device)
        from tiers.quantization.w4a16_dense import reserve

        # the dense path's bf16 buffer for this layer, allocated now so that the KV cache (sized from the memory
        # left after loading) leaves room for it
        reserve(device, layer.out_features * layer.in_features * 2)

    def forward(self, layer: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
        from tiers.quantization.triton_w4a16 import w4a16_matmul

        return w4a16_matmul(x, _int4_of(layer))


class TorchInt4PackKernel(Kernel):
    """torch's `_weight_int4pack_mm_for_cpu` (bf16 rows); with dense_min_rows, many rows go to one float32 GEMM
    over the weight dequantized for the call, which needs the nibbles in the portable layout too."""
    name, device_type, family, row_dtype, dense_rows = "cpu_int4pack", "cpu", "torch", torch.bfloat16, True

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        if device.type != "cpu" or not isinstance(weight, Int4Weight):
            return False
        n, k = weight.shape
        return (hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
                and hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")
                and n % 16 == 0 and k % 2 == 0 and weight.group_size in INT4_CPU_GROUP_SIZES)

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        if layer.dense_min_rows is not None:
            layer.register_buffer("nibbles", weight.packed.to(device))  # pack_nibbles' layout, for dense_weight
        codes = weight.codes().to(torch.int32)
        layer.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 2))
        # torch's convention: value = (code - 8) * scale + zero, so zero = min + 8 * scale.
        zeros = weight.mins.float() + 8 * weight.scales.float()
        layer.register_buffer("scales_and_zeros", torch.stack((weight.scales.float(), zeros), dim=-1)
                              .transpose(0, 1).contiguous().to(torch.bfloat16))  # [groups, N, 2]

    def hot(self, layer: QuantizedLinear, x: torch.Tensor) -> bool:
        return (x.dtype == torch.bfloat16 and x.dim() == 2 and x.shape[1] == layer.in_features
                and x.is_contiguous())

    def dense_weight(self, layer: QuantizedLinear) -> torch.Tensor:
        """The float32 [N, K] weight the packed kernel computes with: (code - 8) * scale + zero with its bf16
        scales and zeros."""
        n, k = layer.out_features, layer.in_features
        codes = unpack_nibbles(layer.nibbles).view(n, k // layer.group_size, layer.group_size).float()
        scales, zeros = layer.scales_and_zeros.float().transpose(0, 1).unbind(-1)  # [N, groups] each
        return ((codes - 8) * scales.unsqueeze(-1) + zeros.unsqueeze(-1)).view(n, k)

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        if layer.dense_min_rows is not None and x2.shape[0] >= layer.dense_min_rows:
            return F.linear(x2.float(), self.dense_weight(layer)).to(x2.dtype)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x2, layer.qweight, layer.group_size,
                                                          layer.scales_and_zeros)


class TorchInt8PackKernel(TorchInt4PackKernel):
    """torch's `_weight_int8pack_mm` (bf16 rows, per-channel scales); dense rows: the int8 codes as float32, the
    scale applied after the GEMM, as the kernel does."""
    name = "cpu_int8pack"

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        return (device.type == "cpu" and isinstance(weight, Int8Weight)
                and hasattr(torch.ops.aten, "_weight_int8pack_mm") and not weight.blockwise)

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        layer.register_buffer("qweight", weight.qweight.to(device))
        layer.register_buffer("scales", weight.scales.to(device, torch.bfloat16))

    def dense_weight(self, layer: QuantizedLinear) -> torch.Tensor:
        return layer.qweight.float()

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        if layer.dense_min_rows is not None and x2.shape[0] >= layer.dense_min_rows:
            return (F.linear(x2.float(), self.dense_weight(layer)) * layer.scales.float()).to(x2.dtype)
        return torch.ops.aten._weight_int8pack_mm(x2, layer.qweight, layer.scales)


class NativeKernel(Kernel):
    """AIO's own CPU kernels (tiers/native/w4a8.c): rows of codes with their scales, float32 rows in."""
    device_type, family, native, row_dtype = "cpu", "native", True, torch.float32

    def __init__(self, name: str, mode: str, float_activations: bool = False) -> None:
        self.name, self.mode, self.float_activations = name, mode, float_activations

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        return (device.type == "cpu" and isinstance(weight, Int4Weight if self.mode == "int4" else Int8Weight)
                and native_kernel_ok(weight))

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        layer.native = native_library()
        layer.register_buffer("qweight", native_weights.int4_rows(weight, device) if self.mode == "int4"
                              else native_weights.int8_rows(weight, device))

    def hot(self, layer: QuantizedLinear, x: torch.Tensor) -> bool:
        return (x.dtype == torch.float32 and x.dim() == 2 and x.shape[1] == layer.in_features
                and x.stride(1) == 1)

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        return gemm(layer.native, x2, layer.qweight, layer.in_features, self.mode == "int8",
                    float_activations=self.float_activations)

    def dequantize(self, layer: QuantizedLinear, dtype: torch.dtype) -> torch.Tensor:
        # exact weights (the kernel's error is in its int8 activations)
        return native_weights.dequantize_native(layer.qweight, layer.in_features, self.mode == "int8", dtype)


class KQuantKernel(NativeKernel):
    """GGUF blocks as stored (KQuantWeight) on the native CPU kernel; dense_min_rows: kquant_dense's GEMM."""
    dense_rows = True

    def __init__(self) -> None:
        super().__init__("cpu_kq", "kquant")

    def accepts(self, weight: Weight, device: torch.device) -> bool:
        return device.type == "cpu" and isinstance(weight, KQuantWeight) and native_library() is not None

    def build(self, layer: QuantizedLinear, weight: Weight, device: torch.device) -> None:
        layer.native = native_library()
        layer.kq = kquant.repack(layer.native, weight)
        # the blocks it computes from (a repacked copy where the weight came stored): counted in resident_bytes /
        # weight_bytes, and not the stored ones, which the layer does not need
        for i, (_, rows) in enumerate(layer.kq.parts):
            layer.register_buffer(f"kq_part{i}", rows)

    def matmul(self, layer: QuantizedLinear, x2: torch.Tensor) -> torch.Tensor:
        if layer.dense_min_rows is not None and x2.shape[0] >= layer.dense_min_rows:
            return kquant_dense.dense_gemm(layer.native, x2, layer.kq)
        return kquant.gemm(layer.native, x2, layer.kq)

    def dequantize(self, layer: QuantizedLinear, dtype: torch.dtype) -> torch.Tensor:
        return layer.kq.dequantize(dtype)


KERNELS: dict[str, Kernel] = {k.name: k for k in (
    DequantKernel(), TorchInt4PackKernel(), TorchInt8PackKernel(), TritonW4A16Kernel(),
    # cpu_w8a32: INT8 weights with float32 activations, for the lm_head (its input's precision decides the argmax)
    NativeKernel("cpu_w4a8", "int4"), NativeKernel("cpu_w8a8", "int8"),
    NativeKernel("cpu_w8a32", "int8", float_activations=True), KQuantKernel())}
NATIVE_KERNELS = tuple(name for name, k in KERNELS.items() if k.native)


# ------------------------------------------------------------------------------------------------------- methods

class QuantMethod:
    """One weight format: how float weights are packed into it, and its kernels in the order they are picked."""
    name = ""
    weight_type: type = object
    kernels: tuple[str, ...] = ()  # preference order; "dequant" (any device) last where it applies
    explicit: tuple[str, ...] = ()  # the kernels a caller may name for this format (on CPU)

    def quantize(self, weight: torch.Tensor, group_size: int = 128, blockwise: bool = False) -> Weight:
        raise QuantizationError(f"{self.name} weights are read from files, not quantized here")

    def pick(self, weight: Weight, device: torch.device, family: str | None = None) -> Kernel:
        """The first of `kernels` that takes the weight on the device. family "torch" passes over the native
        kernels; "native" is the default order (native first where it builds), so either falls back to the best
        remaining kernel."""
        for name in self.kernels:
            kernel = KERNELS[name]
            if family == "torch" and kernel.native:
                continue
            if kernel.accepts(weight, device):
                return kernel
        raise QuantizationError(f"no kernel runs {self.name} weights on {device}")

    def check(self, weight: Weight, device: torch.device, kernel: Kernel) -> None:
        """QuantizationError unless a caller may force `kernel` for this weight on this device."""
        if kernel.native and not (kernel.name in self.explicit and kernel.accepts(weight, device)):
            raise QuantizationError(f"the {kernel.name} kernel takes {kernel.name[4:6]} weights on CPU with "
                                    "in_features % 32 == 0, and needs the native library (a C compiler)")
        if kernel.name == "triton_w4a16" and not (isinstance(weight, Int4Weight) and triton_w4a16_ok(weight)):
            raise QuantizationError("the triton_w4a16 kernel takes int4 weights with a group size multiple of 32 "
                                    "(and needs triton)")


class Int4Method(QuantMethod):
    """Group-wise 4-bit (Int4Weight: RTN, GGUF Q4_0/Q4_1, AWQ): code * scale + min per group."""
    name, weight_type = "int4", Int4Weight
    kernels = ("triton_w4a16", "cpu_w4a8", "cpu_int4pack", "dequant")
    explicit = ("cpu_w4a8",)

    def quantize(self, weight: torch.Tensor, group_size: int = 128, blockwise: bool = False) -> Int4Weight:
        return quantize_int4(weight, group_size)


class Int8Method(QuantMethod):
    """Symmetric 8-bit (Int8Weight): per channel, or per block of 32 (GGUF Q8_0's) where the native kernel runs."""
    name, weight_type = "int8", Int8Weight
    kernels = ("cpu_w8a32", "cpu_int8pack", "dequant")
    explicit = ("cpu_w8a8", "cpu_w8a32")

    def quantize(self, weight: torch.Tensor, group_size: int = 128, blockwise: bool = False) -> Int8Weight:
        return quantize_int8(weight, blockwise=blockwise)


class KQuantMethod(QuantMethod):
    """GGUF block types kept as stored (KQuantWeight): the native CPU kernel only; callers dequantize them for
    anything else."""
    name, weight_type = "kquant", KQuantWeight
    kernels = ("cpu_kq",)
    explicit = ("cpu_kq",)

    def pick(self, weight: Weight, device: torch.device, family: str | None = None) -> Kernel:
        if family in (None, "native") and KERNELS["cpu_kq"].accepts(weight, device):
            return KERNELS["cpu_kq"]
        raise QuantizationError(f"GGUF {'/'.join(weight.types)} weights run on the native CPU kernel only "
                                f"(device {device}, kernel {family!r}): dequantize them for anything else")

    def check(self, weight: Weight, device: torch.device, kernel: Kernel) -> None:
        if kernel.name != "cpu_kq" or not kernel.accepts(weight, device):
            self.pick(weight, device, kernel.name)  # raises with the message above


METHODS: dict[str, QuantMethod] = {m.name: m for m in (Int4Method(), Int8Method(), KQuantMethod())}


def method_of(weight: object) -> QuantMethod:
    for method in METHODS.values():
        if isinstance(weight, method.weight_type):
            return method
    raise QuantizationError(f"QuantizedLinear takes an Int4Weight or Int8Weight, got {type(weight).__name__}")
