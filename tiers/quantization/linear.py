"""QuantizedLinear: a drop-in for nn.Linear holding 4-bit or 8-bit weights, and quantize_model, which swaps a
model's projection layers for it.

The kernel is chosen once, when the layer is built on its device:
- int4 / int8 on CPU, when the native library builds (tiers.native) and in_features % 32 == 0: "cpu_w4a8"
  (activations quantized to int8 blocks of 32 as llama.cpp does) / "cpu_w8a32" (float32 activations; "cpu_w8a8",
  int8 activations, on request); any float dtype in;
- otherwise int4 on CPU: torch's `_weight_int4pack_mm_for_cpu` (bf16 activations; needs out_features % 16 == 0
  and a group size of 32/64/128/256);
- int8 on CPU: torch's `_weight_int8pack_mm` (bf16 activations: float32 activations take a path ~10x slower);
- int4 on CUDA with triton importable: the Triton W4A16 kernel (tiers.quantization.triton_w4a16; group sizes that
  are multiples of 32);
- anything else (int8 on CUDA, odd shapes, a torch without the op): dequantize the weight and matmul ("dequant").
With dense_min_rows, the two torch CPU kernels hand inputs of at least that many rows (prefill chunks, large decode
batches) to one float32 GEMM over the weight dequantized for the call: the packed kernels' cost grows with every
row, where MKL's GEMM amortises the weight (~2x faster per call at 512 rows; docs/benchmarks.md). cpu_kq does the
same in bfloat16 where the CPU has bf16 units (tiers.quantization.kquant_dense). An int4 layer
then keeps its nibbles in the portable layout too (+0.5 byte per weight): torch's packed layout is CPU-specific.
Callers pass and get back their own dtype (float32 or bf16): the kernels' bf16 cast happens inside.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tiers.quantization.int4 import Int4Weight, QuantizationError, quantize_int4, unpack_nibbles
from tiers.quantization.int8 import Int8Weight, quantize_int8
from tiers.quantization import native_weights
from tiers.native import native_library
from tiers.quantization.cpu_native import gemm
from tiers.quantization import kquant
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization import kquant_dense

INT4_CPU_GROUP_SIZES = (32, 64, 128, 256)
# The projections of tiers.models.llama (and their unfused Hugging Face names). lm_head / embed_tokens stay as is.
PROJECTION_NAMES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj",
                    "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def _int4_cpu_kernel_ok(weight: Int4Weight) -> bool:
    n, k = weight.shape
    return (hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
            and hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")
            and n % 16 == 0 and k % 2 == 0 and weight.group_size in INT4_CPU_GROUP_SIZES)


def _triton_w4a16_ok(weight: Int4Weight) -> bool:
    try:  # imports triton: only asked for CUDA layers
        from tiers.quantization.triton_w4a16 import w4a16_supported
    except ImportError:
        return False
    return w4a16_supported(weight)


def _int8_cpu_kernel_ok(weight: Int8Weight) -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm") and not weight.blockwise


KERNELS = ("dequant", "cpu_int4pack", "cpu_int8pack", "triton_w4a16", "cpu_w4a8", "cpu_w8a8", "cpu_w8a32",
           "cpu_kq")
# cpu_w8a32: INT8 weights with float32 activations, for the lm_head (its input's precision decides the argmax);
# cpu_kq: GGUF block types as stored (KQuantWeight: K-quants, Q5_0/Q5_1/Q8_0; tiers/native/kquant.c)
NATIVE_KERNELS = ("cpu_w4a8", "cpu_w8a8", "cpu_w8a32", "cpu_kq")
# Families a caller may name instead of one kernel: "native" (cpu_w4a8 / cpu_w8a32 by mode) or "torch" (torch's
# packed CPU kernels); a family the layer cannot take falls back to the best remaining kernel.
KERNEL_FAMILIES = ("native", "torch")


def native_quantized(model: nn.Module) -> bool:
    """Whether some layer of `model` runs the native kernels (the model's other ops may then run native too)."""
    return any(isinstance(m, QuantizedLinear) and m.kernel in NATIVE_KERNELS for m in model.modules())


def native_kernel_ok(weight: Int4Weight | Int8Weight) -> bool:
    return native_weights.native_ok(weight) and native_library() is not None


class QuantizedLinear(nn.Module):
    def __init__(self, weight: Int4Weight | Int8Weight | KQuantWeight, bias: torch.Tensor | None = None,
                 device: torch.device | str | None = None, kernel: str | None = None,
                 dense_min_rows: int | None = None) -> None:
        """kernel: None picks the best one for the device; "dequant" forces the portable fallback.
        dense_min_rows: see the module docstring (CPU kernels only; None: always the packed kernel).
        A KQuantWeight runs on "cpu_kq" only (CPU, native library): callers dequantize it elsewhere."""
        super().__init__()
        if dense_min_rows is not None and dense_min_rows < 1:
            raise QuantizationError(f"dense_min_rows must be >= 1, got {dense_min_rows}")
        if isinstance(weight, KQuantWeight):
            self._init_kquant(weight, bias, device, kernel, dense_min_rows)
            return
        if not isinstance(weight, (Int4Weight, Int8Weight)):
            raise QuantizationError(f"QuantizedLinear takes an Int4Weight or Int8Weight, got {type(weight).__name__}")
        device = torch.device(device) if device is not None else (
            weight.packed.device if isinstance(weight, Int4Weight) else weight.qweight.device)
        self.out_features, self.in_features = weight.shape
        self.mode = "int4" if isinstance(weight, Int4Weight) else "int8"
        self.group_size = weight.group_size if isinstance(weight, Int4Weight) else None
        if kernel is None or kernel in KERNEL_FAMILIES:
            kernel = self._pick_kernel(weight, device, kernel)
        elif kernel not in KERNELS:
            raise QuantizationError(f"unknown kernel {kernel!r}")
        elif kernel in NATIVE_KERNELS and not (device.type == "cpu" and native_kernel_ok(weight) and kernel in (
                ("cpu_w4a8",) if self.mode == "int4" else ("cpu_w8a8", "cpu_w8a32"))):
            raise QuantizationError(f"the {kernel} kernel takes {kernel[4:6]} weights on CPU with in_features % 32 "
                                    "== 0, and needs the native library (a C compiler)")
        elif kernel == "triton_w4a16" and not (isinstance(weight, Int4Weight) and _triton_w4a16_ok(weight)):
            raise QuantizationError("the triton_w4a16 kernel takes int4 weights with a group size multiple of 32 "
                                    "(and needs triton)")
        self.kernel = kernel
        self.device = device
        # not for the native kernels: their int8 activations are the computation, and they scale as well as a GEMM
        self.dense_min_rows = dense_min_rows if kernel in ("cpu_int4pack", "cpu_int8pack") else None
        self.native = native_library() if kernel in NATIVE_KERNELS else None
        if kernel == "cpu_int4pack" and self.dense_min_rows is not None:
            self.register_buffer("nibbles", weight.packed.to(device))  # pack_nibbles' layout, for _dense_weight
        if kernel in NATIVE_KERNELS:
            self.register_buffer("qweight", native_weights.int4_rows(weight, device) if self.mode == "int4"
                                 else native_weights.int8_rows(weight, device))
        elif kernel == "cpu_int4pack":
            codes = weight.codes().to(torch.int32)
            self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 2))
            # torch's convention: value = (code - 8) * scale + zero, so zero = min + 8 * scale.
            zeros = weight.mins.float() + 8 * weight.scales.float()
            self.register_buffer("scales_and_zeros", torch.stack((weight.scales.float(), zeros), dim=-1)
                                 .transpose(0, 1).contiguous().to(torch.bfloat16))  # [groups, N, 2]
        elif kernel == "cpu_int8pack":
            self.register_buffer("qweight", weight.qweight.to(device))
            self.register_buffer("scales", weight.scales.to(device, torch.bfloat16))
        elif isinstance(weight, Int4Weight):
            weight = weight.to(device)
            self.register_buffer("qweight", weight.packed)
            self.register_buffer("scales", weight.scales.float())
            self.register_buffer("mins", weight.mins.float())
        else:
            self.register_buffer("qweight", weight.qweight.to(device))
            self.register_buffer("scales", weight.scales.to(device, torch.float32))
        self.bias = nn.Parameter(bias.detach().to(device), requires_grad=False) if bias is not None else None

    def _init_kquant(self, weight: KQuantWeight, bias: torch.Tensor | None, device: torch.device | str | None,
                     kernel: str | None, dense_min_rows: int | None) -> None:
        device = torch.device(device or "cpu")
        if device.type != "cpu" or kernel not in (None, "native", "cpu_kq") or native_library() is None:
            raise QuantizationError(f"GGUF {'/'.join(weight.types)} weights run on the native CPU kernel only "
                                    f"(device {device}, kernel {kernel!r}): dequantize them for anything else")
        self.out_features, self.in_features = weight.shape
        self.mode, self.group_size, self.kernel, self.device = "kquant", None, "cpu_kq", device
        self.dense_min_rows = dense_min_rows  # tiers.quantization.kquant_dense
        self.native = native_library()
        self.kq = weight
        for i, (_, rows) in enumerate(weight.parts):  # counted in resident_bytes / weight_bytes
            self.register_buffer(f"kq_part{i}", rows)
        self.bias = nn.Parameter(bias.detach().to(device), requires_grad=False) if bias is not None else None

    @staticmethod
    def _pick_kernel(weight: Int4Weight | Int8Weight, device: torch.device, family: str | None = None) -> str:
        if device.type == "cuda" and isinstance(weight, Int4Weight) and _triton_w4a16_ok(weight):
            return "triton_w4a16"
        if device.type != "cpu":
            return "dequant"
        if family != "torch" and native_kernel_ok(weight):
            # INT8 weights keep float32 activations: the int8 activations cost more top-1 than INT8 weights save
            return "cpu_w4a8" if isinstance(weight, Int4Weight) else "cpu_w8a32"
        if isinstance(weight, Int4Weight):
            return "cpu_int4pack" if _int4_cpu_kernel_ok(weight) else "dequant"
        return "cpu_int8pack" if _int8_cpu_kernel_ok(weight) else "dequant"

    def kq_arrays(self) -> tuple:
        """A cpu_kq layer's parts as C arrays (pointers, row counts, GGUF type ids) and their count, for the native
        decoder layer (tiers/native/layer.py); built once, they point into this layer's buffers."""
        return kquant.call_arrays(self.kq)

    @property
    def resident_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers()) + (
            self.bias.numel() * self.bias.element_size() if self.bias is not None else 0)

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The float [N, K] weight the layer computes with (for the packed kernels: read back through the kernel
        with an identity input, so bf16-rounded)."""
        if self.kernel in ("dequant", "triton_w4a16"):  # the Triton kernel computes with exactly these values
            return self._dequant(dtype)
        if self.kernel == "cpu_kq":
            return self.kq.dequantize(dtype)
        if self.kernel in NATIVE_KERNELS:  # exact weights (the kernel's error is in its int8 activations)
            return native_weights.dequantize_native(self.qweight, self.in_features, self.mode == "int8", dtype)
        eye = torch.eye(self.in_features, dtype=torch.bfloat16, device=self.qweight.device)
        return self._kernel_matmul(eye).t().to(dtype).contiguous()

    def _dequant(self, dtype: torch.dtype) -> torch.Tensor:
        if self.mode == "int4":
            return Int4Weight(self.qweight, self.scales, self.mins, self.group_size).dequantize(dtype)
        return Int8Weight(self.qweight, self.scales).dequantize(dtype)

    def _dense_weight(self) -> torch.Tensor:
        """The float32 [N, K] weight the packed kernel computes with: (code - 8) * scale + zero with its bf16 scales
        and zeros for int4; the int8 codes for int8 (the per-channel scale is applied after the matmul, as there)."""
        if self.kernel == "cpu_int8pack":
            return self.qweight.float()
        n, k = self.out_features, self.in_features
        codes = unpack_nibbles(self.nibbles).view(n, k // self.group_size, self.group_size).float()
        scales, zeros = self.scales_and_zeros.float().transpose(0, 1).unbind(-1)  # [N, groups] each
        return ((codes - 8) * scales.unsqueeze(-1) + zeros.unsqueeze(-1)).view(n, k)

    def _kernel_matmul(self, x2: torch.Tensor) -> torch.Tensor:
        if self.dense_min_rows is not None and x2.shape[0] >= self.dense_min_rows:
            if self.kernel == "cpu_kq":
                return kquant_dense.dense_gemm(self.native, x2, self.kq)
            y = F.linear(x2.float(), self._dense_weight())
            if self.kernel == "cpu_int8pack":
                y = y * self.scales.float()
            return y.to(x2.dtype)
        if self.kernel == "cpu_kq":
            return kquant.gemm(self.native, x2, self.kq)
        if self.kernel in NATIVE_KERNELS:
            return gemm(self.native, x2, self.qweight, self.in_features, self.mode == "int8",
                        float_activations=self.kernel == "cpu_w8a32")
        if self.kernel == "cpu_int4pack":
            return torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.qweight, self.group_size,
                                                              self.scales_and_zeros)
        return torch.ops.aten._weight_int8pack_mm(x2, self.qweight, self.scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (self.kernel in NATIVE_KERNELS and self.bias is None and x.dtype == torch.float32 and x.dim() == 2
                and x.shape[1] == self.in_features and x.stride(1) == 1):
            return self._kernel_matmul(x)  # the decode hot path of a float32 model: no copies
        if (self.kernel in ("cpu_int4pack", "cpu_int8pack") and self.bias is None and x.dtype == torch.bfloat16
                and x.dim() == 2 and x.shape[1] == self.in_features and x.is_contiguous()):
            return self._kernel_matmul(x)  # the decode hot path: bf16 rows straight into the kernel, no casts
        if x.shape[-1] != self.in_features:
            raise QuantizationError(f"input has {x.shape[-1]} features, the layer expects {self.in_features}")
        if not same_device(x.device, self.device):
            raise QuantizationError(f"input on {x.device}, the quantized weight on {self.device}: build the "
                                    "quantized layers on the model's final device")
        if self.kernel == "dequant":
            if self.mode == "int8":  # the per-channel scale commutes with the matmul: no float weight is built
                y = F.linear(x, self.qweight.to(x.dtype)) * self.scales.to(x.dtype)
            else:
                y = F.linear(x, self._dequant(x.dtype))
        elif self.kernel == "triton_w4a16":
            from tiers.quantization.triton_w4a16 import w4a16_matmul

            y = w4a16_matmul(x, Int4Weight(self.qweight, self.scales, self.mins, self.group_size))
        else:
            kernel_dtype = torch.float32 if self.kernel in NATIVE_KERNELS else torch.bfloat16
            x2 = x.reshape(-1, self.in_features).to(kernel_dtype).contiguous()
            y = self._kernel_matmul(x2).view(*x.shape[:-1], self.out_features).to(x.dtype)
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
    if mode == "int4":
        weight: Int4Weight | Int8Weight = quantize_int4(linear.weight, group_size)
    elif mode == "int8":
        # blocks of 32 where the native kernel runs it: its row records hold a scale per block either way, so the
        # finer scales cost no memory
        weight = quantize_int8(linear.weight, blockwise=_native_int8(linear, kernel))
    else:
        raise QuantizationError(f"unknown quantization mode {mode!r}: expected 'int4' or 'int8'")
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
