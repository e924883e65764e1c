"""The model shapes the GPU benchmark builds, its workload settings, and the bandwidth arithmetic: the bytes a
batch-1 decode step must read (every weight once, one embedding row, the KV cache at the step's context)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LLAMA3_VOCAB = 128256
LLAMA3_ROPE_THETA = 500000.0
# Llama 3.2's long-context rope (Llama-3.2-1B's config.json)
LLAMA32_ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}
AWQ_GROUP_SIZE = 128
# The engine's INT4 layout (tiers.quantization.int4.Int4Weight, on the GPU too): 4-bit codes plus a float32 scale
# and a float32 min per group, whatever the checkpoint stored (AWQ's fp16 scales and 4-bit zeros are converted).
INT4_GROUP_BYTES = 4 + 4


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = LLAMA3_VOCAB
    tied: bool = False
    max_position: int = 8192
    long_rope: bool = False  # Llama 3.2's llama3 rope scaling

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def projections(self) -> dict[str, tuple[int, int]]:
        """One layer's projections (Hugging Face names): (in_features, out_features)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"self_attn.q_proj": (self.hidden, q), "self_attn.k_proj": (self.hidden, kv),
                "self_attn.v_proj": (self.hidden, kv), "self_attn.o_proj": (q, self.hidden),
                "mlp.gate_proj": (self.hidden, self.intermediate), "mlp.up_proj": (self.hidden, self.intermediate),
                "mlp.down_proj": (self.intermediate, self.hidden)}

    @property
    def projection_weights(self) -> int:
        """Weights of the attention and MLP projections, all layers."""
        return self.layers * sum(i * o for i, o in self.projections.values())

    @property
    def num_params(self) -> int:
        norms = (2 * self.layers + 1) * self.hidden
        return self.projection_weights + norms + self.vocab * self.hidden * (1 if self.tied else 2)

    def kv_bytes_per_token(self, element_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * element_bytes

    def hf_config(self) -> dict[str, Any]:
        """LlamaConfig keyword arguments (transformers 4.x spelling: see tiers.checkpoints'
        rope_for_installed_transformers)."""
        config: dict[str, Any] = dict(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.max_position, rms_norm_eps=1e-5, tie_word_embeddings=self.tied,
            rope_theta=LLAMA3_ROPE_THETA, initializer_range=0.02)
        if self.long_rope:
            config["rope_scaling"] = dict(LLAMA32_ROPE_SCALING)
        return config


def decode_step_bytes(shape: ModelShape, float_bytes: int, context: float, int4: bool = False,
                      kv_bytes: int | None = None, group_size: int = AWQ_GROUP_SIZE) -> int:
    """Bytes a batch-1 decode step must read: every weight once (projections as the engine stores them: float, or
    INT4 codes with INT4_GROUP_BYTES per group), norms, the LM head and one embedding row in `float_bytes` (a tied
    embedding is the LM head, read once), and K and V of `context` tokens (`kv_bytes` per element, default
    `float_bytes`)."""
    proj = shape.projection_weights
    proj_bytes = proj // 2 + proj // group_size * INT4_GROUP_BYTES if int4 else proj * float_bytes
    other = (2 * shape.layers + 1) * shape.hidden + shape.vocab * shape.hidden + (0 if shape.tied else shape.hidden)
    kv = shape.kv_bytes_per_token(kv_bytes or float_bytes) * context
    return int(proj_bytes + other * float_bytes + kv)


SHAPES = {
    "llama-1b": ModelShape("llama-1b", hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, tied=True,
                           max_position=131072, long_rope=True),
    "llama-8b": ModelShape("llama-8b", hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336),
    "llama-70b-awq": ModelShape("llama-70b-awq", hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672),
}
# --smoke: the same roles at sizes a CPU runs in seconds (in_features multiples of AWQ's group of 128)
SMOKE_SHAPES = {
    "llama-1b": ModelShape("llama-1b", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256, vocab=512,
                           tied=True, max_position=131072, long_rope=True),
    "llama-8b": ModelShape("llama-8b", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256, vocab=512,
                           max_position=2048),
    "llama-70b-awq": ModelShape("llama-70b-awq", hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256,
                                vocab=512, max_position=2048),
}


@dataclass(frozen=True)
class Settings:
    """What each part runs; --smoke's are tiny."""
    shapes: dict[str, ModelShape] = field(default_factory=lambda: dict(SHAPES))
    prompt_len: int = 128  # batch-1 decode
    new_tokens: int = 256
    repeats: int = 3  # batch-1: best of
    num_requests: int = 128  # throughput, the workload of benchmarks/engine.py
    many_requests: int = 512  # throughput with the KV cache's peak usage
    awq_requests: int = 64
    prompt_range: tuple[int, int] = (32, 512)
    output_range: tuple[int, int] = (16, 256)
    max_model_len: int = 1024  # every engine: the longest request is 512 + 256 tokens
    check_prompts: int = 4  # correctness: prompts x tokens
    check_tokens: int = 32
    copy_bytes: int = 1 << 30
    seed: int = 0


SMOKE_SETTINGS = Settings(shapes=dict(SMOKE_SHAPES), prompt_len=16, new_tokens=8, repeats=1, num_requests=6,
                          many_requests=8, awq_requests=4, prompt_range=(8, 24), output_range=(2, 6),
                          max_model_len=128, check_prompts=2, check_tokens=6, copy_bytes=64 << 20)
