"""Llama-family decoder (Llama 2/3/3.1/3.2, Mistral, Qwen2) over a flattened batch of tokens and a paged KV cache."""
from __future__ import annotations

import functools
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from tiers.attention.backend import AttentionMetadata
from tiers.attention.layer import PagedAttention
from tiers.models.config import ModelConfig
from tiers.models.rotary import RotaryEmbedding, apply_rotary_one
from tiers.native import NativeLibrary
from tiers.native.layer import NativeLayer, NativeStack
from tiers.native.ops import MAX_HEAD_DIM, rmsnorm, rotary_, silu_mul


# The fused Triton ops (tiers/models/triton_ops.py): None uses them on CUDA tensors, True also on CPU tensors (only in
# Triton's interpreter: tests), False never.
TRITON_OPS: bool | None = None


@functools.cache
def _triton_ops() -> ModuleType | None:
    try:  # imports triton: only once a tensor asks for it
        from tiers.models import triton_ops
    except ImportError:
        return None
    return triton_ops


def use_triton_ops(x: torch.Tensor) -> bool:
    """Whether the ops on x run as the fused Triton kernels instead of several torch ops each."""
    if TRITON_OPS is False or not (x.is_cuda or TRITON_OPS):
        return False
    return x.dtype in (torch.float16, torch.bfloat16, torch.float32) and _triton_ops() is not None


def _native_rows(native: NativeLibrary | None, x: torch.Tensor) -> bool:
    return native is not None and x.dtype == torch.float32 and x.dim() == 2 and x.stride(1) == 1 and \
        x.device.type == "cpu"


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps
        self.native: NativeLibrary | None = None  # set by LlamaForCausalLM.use_native_ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if use_triton_ops(x) and use_triton_ops(self.weight):
            return _triton_ops().rms_norm(x, self.weight, self.eps)
        if _native_rows(self.native, x) and self.weight.dtype == torch.float32:
            return rmsnorm(self.native, x, self.weight, self.eps)
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(self(x + residual), x + residual): one launch on the fused path."""
        if use_triton_ops(x) and use_triton_ops(self.weight) and residual.dtype == x.dtype:
            return _triton_ops().fused_add_rms_norm(x, residual, self.weight, self.eps)
        residual = residual + x
        return self(residual), residual


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=config.o_bias)
        self.attn = PagedAttention(self.head_dim ** -0.5)
        self.native: NativeLibrary | None = None  # set by LlamaForCausalLM.use_native_ops

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata
                ) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        if use_triton_ops(qkv) and rope[0].dtype == qkv.dtype:
            qk = qkv[:, :self.q_size + self.kv_size].view(-1, self.num_heads + self.num_kv_heads, self.head_dim)
            _triton_ops().rotary_(qk, *rope)  # q and k, in place
            return self._attend(qkv, meta)
        if _native_rows(self.native, qkv) and rope[0].dtype == torch.float32 and self.head_dim <= MAX_HEAD_DIM:
            rotary_(self.native, qkv, self.num_heads + self.num_kv_heads, self.head_dim, *rope)  # q and k
            return self._attend(qkv, meta)
        qk, v = qkv.split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        # q and k rotated together, as one [T, H + Hkv, D] tensor: half the small ops of a decode step's rotary
        qk = apply_rotary_one(qk.reshape(-1, self.num_heads + self.num_kv_heads, self.head_dim), *rope)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        out = self.attn(q, k, v, meta)
        return self.o_proj(out.view(-1, self.q_size))

    def _attend(self, qkv: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Attention and the output projection over qkv [T, q | k | v] whose q and k are already rotated."""
        q = qkv[:, :self.q_size].view(-1, self.num_heads, self.head_dim)
        k = qkv[:, self.q_size:self.q_size + self.kv_size].view(-1, self.num_kv_heads, self.head_dim)
        v = qkv[:, self.q_size + self.kv_size:].view(-1, self.num_kv_heads, self.head_dim)
        return self.o_proj(self.attn(q, k, v, meta).view(-1, self.q_size))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.native: NativeLibrary | None = None  # set by LlamaForCausalLM.use_native_ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if use_triton_ops(gate_up):
            return self.down_proj(_triton_ops().silu_and_mul(gate_up))
        if _native_rows(self.native, gate_up) and gate_up.is_contiguous():
            return self.down_proj(silu_mul(self.native, gate_up))
        gate, up = gate_up.split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.native: NativeLibrary | None = None  # set by LlamaForCausalLM.use_native_ops, with native_layer
        self.native_layer: NativeLayer | None = None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata
                ) -> torch.Tensor:
        tables = getattr(meta, "token_tables", None)  # the native attention backend's
        if (self.native_layer is not None and tables is not None and _native_rows(self.native, x)
                and x.is_contiguous() and rope[0].dtype == torch.float32 and self.native_layer.runs(x.shape[0])):
            k_cache, v_cache = meta.kv_caches[self.self_attn.attn.layer_idx]
            return self.native_layer.forward(self.native, x, rope, k_cache, v_cache, meta.slot_mapping, tables)
        x = x + self.self_attn(self.input_layernorm(x), rope, meta)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_fused(self, x: torch.Tensor, residual: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                      meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """As vLLM's layers: (hidden, residual) whose sum is the layer's output, the add left to the next norm
        (fused_add_rms_norm). The first layer takes residual=None and x as the residual stream."""
        if residual is None:
            residual, h = x, self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add_forward(x, residual)
        h, residual = self.post_attention_layernorm.add_forward(self.self_attn(h, rope, meta), residual)
        return self.mlp(h), residual


class LlamaForCausalLM(nn.Module):
    # HF checkpoint names of weights that live inside one of our fused parameters: (ours, shard index)
    packed = {
        "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        for i, layer in enumerate(self.layers):
            layer.self_attn.attn.layer_idx = i
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary: RotaryEmbedding | None = None
        self.native: NativeLibrary | None = None  # set by use_native_ops
        self.native_stack: NativeStack | None = None  # every layer a NativeLayer: the stack in one call

    def use_native_ops(self, native: NativeLibrary) -> None:
        """Norms, rotary and SiLU-and-mul from the native library (tiers/native/ops.c) on float32 CPU rows: one
        call each instead of several torch ops; a whole decoder layer in one call where all its projections run
        native kernels (tiers/native/layer.c). Set for models whose projections run the native kernels, whose output
        already differs from torch's in the last bits."""
        for module in self.modules():
            if isinstance(module, (RMSNorm, LlamaMLP, LlamaAttention, LlamaDecoderLayer)):
                module.native = native
            if isinstance(module, LlamaDecoderLayer) and NativeLayer.supports(module):
                module.native_layer = NativeLayer(module)
        self.native = native
        if all(layer.native_layer is not None for layer in self.layers):
            self.native_stack = NativeStack([layer.native_layer for layer in self.layers])

    def build_rotary(self, max_positions: int, device: torch.device) -> None:
        """Called after the weights are on their device (the module is built on the meta device)."""
        rotary = RotaryEmbedding(self.config.rope, self.config.head_dim, max_positions)
        self.rotary = rotary.to(device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        assert self.rotary is not None, "build_rotary() was not called"
        x = self.embed_tokens(input_ids)
        if use_triton_ops(x):
            rope = self.rotary.cos_sin(positions, x.dtype)
            residual = None
            for layer in self.layers:
                x, residual = layer.forward_fused(x, residual, rope, meta)
            return self.norm(x) if residual is None else self.norm.add_forward(x, residual)[0]
        if self._stack_runs(x, positions, meta):
            return self.native_stack.forward(self.native, x, (self.rotary.cos, self.rotary.signed_sin), positions,
                                             meta.kv_caches, meta.slot_mapping, meta.token_tables,
                                             (self.norm.weight, self.norm.eps))
        rope = self.rotary.cos_sin(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, rope, meta)
        return self.norm(x)

    def _stack_runs(self, x: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether this step's layers and final norm run as one native call: each layer would take its own one-call
        path, and the norm its native op."""
        stack = self.native_stack
        return (stack is not None and getattr(meta, "token_tables", None) is not None
                and _native_rows(self.native, x) and x.is_contiguous() and stack.runs(x.shape[0])
                and positions.dtype == torch.int64 and positions.is_contiguous()
                and self.rotary.cos.dtype == torch.float32 and self.norm.weight.dtype == torch.float32
                and all(layer.native_layer is native for layer, native in zip(self.layers, stack.layers)))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    def shard_slice(self, fused: str, shard: int) -> slice:
        c = self.config
        if fused == "qkv_proj":
            q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
            return [slice(0, q), slice(q, q + kv), slice(q + kv, q + 2 * kv)][shard]
        i = c.intermediate_size
        return [slice(0, i), slice(i, 2 * i)][shard]
