"""Owns the target model and its KV cache; turns a scheduled step into one forward pass and sampled tokens."""
from __future__ import annotations

import logging

import torch

from tiers.attention.backend import AttentionBackend
from tiers.attention.native_backend import NativeCPUAttentionBackend
from tiers.engine.config import EngineConfig
from tiers.engine.cuda_graphs import CUDAGraphRunner, default_graph_sizes
from tiers.engine.input_batch import ForwardChunk, model_input, plan_batch, select_rows
from tiers.engine.kv_cache import KVCache, kv_bytes_per_block, num_kv_blocks
from tiers.engine.rejection_sampler import rejection_sample
from tiers.engine.sampler import SamplerOutput, sample, token_logprobs
from tiers.engine.scheduler import ScheduledSequence
from tiers.engine.sequence import Sequence, TokenLogprob
from tiers.models.checkpoint import Checkpoint
from tiers.native import native_library
from tiers.quantization.linear import native_quantized
from tiers.quantization.placement import pack_streamed_weights

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, checkpoint: Checkpoint, config: EngineConfig, device: torch.device, dtype: torch.dtype,
                 attention_backend: AttentionBackend, extra_kv_bytes_per_block: int = 0) -> None:
        """extra_kv_bytes_per_block: a draft model's KV per block, paid from the same budget."""
        self.model_config = model_config = checkpoint.config
        self.device, self.dtype = device, dtype
        self.block_size = config.block_size
        self.attention_backend = attention_backend
        self.extra_kv_bytes_per_block = extra_kv_bytes_per_block
        self.model = checkpoint.load_model(device, dtype, config.quantization, config.quantization_group_size,
                                           config.quantize_lm_head, config.quantized_dense_min_rows,
                                           config.quantized_kernel)
        native_cpu = device.type == "cpu" and native_quantized(self.model)
        if native_cpu:
            pack_streamed_weights(self.model)
        if config.attention_backend is None and native_cpu and dtype == torch.float32:
            native = native_library()
            self.model.use_native_ops(native)
            self.attention_backend = NativeCPUAttentionBackend(native)
        self.num_blocks = num_kv_blocks(config, model_config, device, dtype, extra_kv_bytes_per_block)
        self.kv_cache = KVCache(model_config, self.num_blocks, self.block_size, dtype, device)
        self.cuda_graphs: CUDAGraphRunner | None = None

    def capture_cuda_graphs(self, config: EngineConfig, max_model_len: int, capture: bool = True) -> None:
        """Decode steps from CUDA graphs (tiers.engine.cuda_graphs), where the device and backend have them.
        capture=False: the same padded decode steps run eagerly, on any device (tests)."""
        if capture and (config.enforce_eager or self.device.type != "cuda"):
            return
        if not self.attention_backend.supports_cuda_graphs:
            logger.info("no CUDA graphs: the %s attention backend cannot run in one", self.attention_backend.name)
            return
        sizes = config.cuda_graph_sizes or default_graph_sizes(config.max_num_seqs)
        try:
            self.cuda_graphs = CUDAGraphRunner(self.model, self.attention_backend, self.kv_cache.layers, sizes,
                                               -(-max_model_len // self.block_size), self.device, capture)
        except Exception as e:  # an op that cannot be captured: serve eagerly rather than not at all
            logger.warning("CUDA graph capture failed, every step runs eagerly (enforce_eager=True hides this "
                           "warning): %s: %s", type(e).__name__, e)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

    @property
    def kv_bytes_per_block(self) -> int:
        return kv_bytes_per_block(self.model_config, self.block_size, self.dtype)

    def make_generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledSequence]) -> dict[int, SamplerOutput]:
        """Runs one step. Returns {index in `scheduled`: output} for the sequences that sample: their next token,
        or for a sequence with draft tokens (seq.spec_token_ids) the accepted ones and one more."""
        chunks = [ForwardChunk(s.seq, s.seq.num_computed_tokens,
                               s.seq.tokens_at(s.seq.num_computed_tokens, s.seq.num_computed_tokens + s.num_new_tokens))
                  for s in scheduled]
        plan = plan_batch(chunks, self.attention_backend, self.block_size)
        if self.cuda_graphs is not None and self.cuda_graphs.can_run(plan):
            step_logits, hidden = self.cuda_graphs.run(plan), None  # one row per sequence
        else:
            inputs = model_input(plan, self.attention_backend, self.kv_cache.layers, self.device, self.dtype)
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.attn_metadata)
        order = plan.order
        plain = [j for j, i in enumerate(order) if scheduled[i].samples and not scheduled[i].num_spec_tokens]
        spec = [j for j, i in enumerate(order) if scheduled[i].num_spec_tokens]
        if not plain and not spec:
            return {}
        rows = [plan.last_rows[j] for j in plain]
        spec_starts: list[int] = []
        for j in spec:
            k = scheduled[order[j]].num_spec_tokens
            spec_starts.append(len(rows) - len(plain))
            rows.extend(range(plan.last_rows[j] - k, plan.last_rows[j] + 1))
        if hidden is None:  # a copy: the graph's output buffer is overwritten by its next replay
            logits = step_logits[torch.tensor(rows, device=self.device)]
        else:
            logits = self.model.compute_logits(select_rows(hidden, rows))
        results: dict[int, SamplerOutput] = {}
        if plain:
            tokens, logprobs = sample(logits[:len(plain)], [chunks[order[j]].seq for j in plain])
            for j, tok, lp in zip(plain, tokens, logprobs):
                results[order[j]] = SamplerOutput([tok], [lp])
        if spec:
            seqs = [chunks[order[j]].seq for j in spec]
            outputs = _verify(logits[len(plain):], seqs, spec_starts)
            results.update((order[j], out) for j, out in zip(spec, outputs))
        return results


def _verify(logits: torch.Tensor, seqs: list[Sequence], starts: list[int]) -> list[SamplerOutput]:
    """The rejection sampler's tokens per sequence, with their logprobs when asked."""
    outputs = []
    for seq, start, tokens in zip(seqs, starts, rejection_sample(logits, seqs, starts)):
        logprobs: list[TokenLogprob | None] = [None] * len(tokens)
        if seq.params.logprobs is not None:
            logprobs = list(token_logprobs(logits[start:start + len(tokens)], tokens,
                                           [seq.params.logprobs] * len(tokens)))
        outputs.append(SamplerOutput(tokens, logprobs, len(seq.spec_token_ids), len(tokens) - 1))
    return outputs
