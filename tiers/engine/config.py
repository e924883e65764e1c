"""Engine options: one flat dataclass, the single definition (Engine.from_pretrained's keyword arguments and a
tier's engine settings are both validated into it). Importing it needs no torch."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tiers.quantization.modes import QUANTIZATION_GROUP_SIZES, QUANTIZATION_MODES

MAX_SPECULATIVE_TOKENS = 16


@dataclass
class EngineConfig:
    device: str = "cpu"
    # None: on CPU float32, or bfloat16 when the projections are quantized and run torch's kernels (see
    # tiers.models.loader.resolve_dtype);
    # on CUDA the checkpoint's half type (or bfloat16)
    dtype: str | None = None
    block_size: int = 16
    kv_cache_bytes: int | None = None  # the KV budget in bytes ...
    kv_cache_fraction: float | None = None  # ... or as a fraction of device memory (weights + KV on CUDA)
    max_num_seqs: int = 256
    max_model_len: int | None = None  # default: the model's max_position_embeddings (capped by the KV pool)
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool = True
    attention_backend: str | None = None  # "torch" or "triton"; None: triton on CUDA, torch elsewhere
    seed: int = 0
    # Speculative decoding: "draft" (a smaller model of the same vocabulary, passed to the Engine as `draft`),
    # "ngram" (prompt lookup, no model) or None. num_speculative_tokens is the largest k; with
    # speculative_adaptive the engine picks k in 0..num_speculative_tokens every step from measured acceptance
    # and costs, else it always proposes num_speculative_tokens.
    speculative: str | None = None
    num_speculative_tokens: int = 4
    speculative_adaptive: bool = True
    # With speculative_adaptive and a draft model: once speculating pays, a request drafts up to
    # num_speculative_tokens and stops early where the draft's confidence says one more token would not pay
    # (tiers/engine/spec_decode/adaptive.py). Never changes an output.
    speculative_confidence_stop: bool = True
    ngram_min: int = 1
    ngram_max: int = 3
    # The draft model scores this many token ids (the commonest: the lowest ids), the special tokens and the tokens
    # it is fed from then on, up to twice as many, instead of its whole vocabulary (tiers/engine/spec_decode/
    # draft_head.py; EAGLE-3's draft vocabulary is 32,768). Never changes an output: the target verifies every
    # draft token. 0, a vocabulary of at most twice this, or a draft on a GPU: the full output matrix.
    draft_vocab_size: int = 32768
    # Weight-only quantization of the attention and MLP projections (embeddings, lm_head and norms stay float in
    # `dtype`). "auto": as the checkpoint stores them: float checkpoints run float, AutoAWQ checkpoints and a GGUF
    # file's Q4_0/Q4_1 projections run natively as INT4 (a GGUF's other types are dequantized to float).
    # None (or "none"): everything float; 4-bit weights are dequantized (exactly), e.g. a GGUF's fp32 reference.
    # "int8": per-channel symmetric INT8 everywhere, by round-to-nearest from the float (or dequantized) weights.
    # "int4": INT4 everywhere: native 4-bit weights kept as stored (GGUF: groups of 32, AWQ: 128), float ones by
    # round-to-nearest in groups of quantization_group_size (layers whose in_features it does not divide stay
    # float, with a warning). See `dtype` and `quantized_kernel` for the activations' precision on CPU.
    quantization: str | None = "auto"
    quantization_group_size: int = 128
    # The output projection (lm_head) as INT8 too, and a tied embedding read from the same INT8 rows: per block of
    # 32 on the native CPU kernel, else per channel. On CPU it is the largest single matmul of a small model's
    # decode step. With quantization other than None, a GGUF file whose output tensor is Q8_0 (llama.cpp's usual choice)
    # keeps it INT8 on the native kernel whatever this says (exact: the same blocks and scales).
    quantize_lm_head: bool = False
    # On CPU, quantized projections fed at least this many rows at once (prefill chunks, large decode batches) run
    # as one GEMM over the weight dequantized for the call instead of the per-row kernels, whose cost grows with
    # every row: torch's packed INT4/INT8 kernels (float32 GEMM, ~2x faster at 512 rows, break-even near 128;
    # INT4 layers then keep their nibbles in a portable layout too, +0.5 byte per weight) and GGUF blocks run as
    # stored (cpu_kq: a bfloat16 GEMM where the CPU has bf16 units, float32 elsewhere; 5x a Qwen 1.5B's prefill
    # at 128). Off by default: the GEMM's rounding differs from the kernel's, so a request's tokens would depend
    # on how many rows its step carried (batch composition, chunking), which the kernels' row-by-row results do
    # not. None: always the kernels.
    quantized_dense_min_rows: int | None = None
    # The quantized projections' CPU kernels: None (auto) or "native" takes AIO's own (tiers/native/w4a8.c, built
    # at first use with the system's C compiler: int8 activations per block of 32, as llama.cpp; float32
    # activations; the step's norms, SiLU-and-mul and decode attention then run in the same native library),
    # falling back to torch's where it cannot build; "torch": torch's packed INT4/INT8 kernels (bf16 activations).
    quantized_kernel: str | None = None
    # On CUDA, decode-only steps of up to the largest of cuda_graph_sizes sequences replay a CUDA graph captured at
    # start-up for the smallest size that holds them (the batch padded with idle rows): no Python or launch
    # overhead per layer. Token-exact with eager steps. True: every step eager (as vLLM's enforce_eager). Ignored
    # off CUDA, where there are no graphs. None: 1, 2, 4, 8, then every multiple of 16 up to
    # min(max_num_seqs, 256).
    enforce_eager: bool = False
    cuda_graph_sizes: tuple[int, ...] | None = None

    @classmethod
    def option_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))

    @classmethod
    def from_options(cls, **options: Any) -> EngineConfig:
        """Like the constructor, with an error that names an unknown option and lists the known ones."""
        unknown = sorted(set(options) - cls.option_names())
        if unknown:
            raise TypeError(f"unknown engine option(s) {', '.join(map(repr, unknown))}; the options are "
                            f"{', '.join(sorted(cls.option_names()))}")
        return cls(**options)

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_bytes", "max_model_len",
                     "quantized_dense_min_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.kv_cache_bytes is not None and self.kv_cache_fraction is not None:
            raise ValueError("set kv_cache_bytes or kv_cache_fraction, not both")
        if self.kv_cache_fraction is not None and not 0 < self.kv_cache_fraction <= 1:
            raise ValueError(f"kv_cache_fraction must be in (0, 1], got {self.kv_cache_fraction}")
        if self.attention_backend not in (None, "torch", "triton"):
            raise ValueError(f"attention_backend must be 'torch' or 'triton', got {self.attention_backend!r}")
        self._check_speculation()
        self._check_quantization()
        if self.cuda_graph_sizes is not None:
            sizes = tuple(self.cuda_graph_sizes)
            if not sizes or any(not isinstance(n, int) or n < 1 for n in sizes):
                raise ValueError(f"cuda_graph_sizes must be positive integers, got {self.cuda_graph_sizes!r}")
            self.cuda_graph_sizes = tuple(sorted(set(sizes)))

    def _check_quantization(self) -> None:
        if self.quantization == "none":
            self.quantization = None
        if self.quantization not in QUANTIZATION_MODES:
            raise ValueError(f"quantization must be 'auto', 'int8', 'int4' or None ('none'), got "
                             f"{self.quantization!r}")
        if self.quantized_kernel not in (None, "native", "torch"):
            raise ValueError(f"quantized_kernel must be 'native', 'torch' or None, got {self.quantized_kernel!r}")
        if self.quantization_group_size not in QUANTIZATION_GROUP_SIZES:
            raise ValueError(f"quantization_group_size must be one of {QUANTIZATION_GROUP_SIZES}, got "
                             f"{self.quantization_group_size}")

    def _check_speculation(self) -> None:
        if self.speculative not in (None, "draft", "ngram"):
            raise ValueError(f"speculative must be 'draft', 'ngram' or None, got {self.speculative!r}")
        if not 1 <= self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"num_speculative_tokens must be in 1..{MAX_SPECULATIVE_TOKENS}, "
                             f"got {self.num_speculative_tokens}")
        if self.draft_vocab_size < 0:
            raise ValueError(f"draft_vocab_size must be >= 0 (0: the draft's whole vocabulary), got "
                             f"{self.draft_vocab_size}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min} and {self.ngram_max}")
