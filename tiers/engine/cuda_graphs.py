"""Decode steps replayed from CUDA graphs (as vLLM, SGLang and nano-vllm capture them).

Policy. A step in which every sequence feeds one token, with at most the largest graph size of sequences, replays
the graph captured for the smallest size that holds it. Its inputs are copied into static buffers that every graph
reads; the rows past the batch are idle: token 0 at position 0, KV slot -1 (nothing is written) and context length
0 (they attend to nothing). Every other step (prefill chunks, verifications of draft tokens, larger batches) runs
eagerly. A graph covers the model and the output projection: the step's logits for every row land in a static
tensor, and sampling (penalties, grammars, seeded generators) runs after the replay on the real rows.

Graphs are captured at start-up from the largest size down and share one memory pool. A replay runs the same
kernels on the same shapes as an eager step of `size` rows, so a batch of exactly a graph size gets the eager
step's tokens; a smaller batch is padded, and the matmuls of `size` rows may round differently from those of
the batch's own row count (cuBLAS picks its kernel by shape).
"""
from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Sequence
from typing import Protocol

import torch

from tiers.attention.backend import AttentionBackend, AttentionMetadata, KVCaches
from tiers.engine.input_batch import BatchPlan

logger = logging.getLogger(__name__)

MAX_DEFAULT_GRAPH_SIZE = 256
PAD_SLOT = -1


class DecoderModel(Protocol):
    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


def default_graph_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 16, up to min(max_num_seqs, 256), which is always a size."""
    largest = min(max_num_seqs, MAX_DEFAULT_GRAPH_SIZE)
    sizes = {n for n in (1, 2, 4, 8) if n <= largest} | set(range(16, largest + 1, 16)) | {largest}
    return tuple(sorted(sizes))


def graph_size_for(num_seqs: int, sizes: Sequence[int]) -> int | None:
    """The smallest of `sizes` (sorted) holding num_seqs sequences, or None when none does."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class DecodeBuffers:
    """The static inputs every graph reads, sized for the largest graph. A step's inputs travel to the device as
    one copy: a row per sequence (token, position, KV slot, context length, block table) in a pinned host buffer;
    the graph itself then splits the rows into the tensors the kernels take."""

    COLUMNS = 4  # token, position, slot, length; the block table follows

    def __init__(self, max_size: int, max_blocks_per_seq: int, device: torch.device) -> None:
        shape = (max_size, self.COLUMNS + max_blocks_per_seq)
        self.host = torch.zeros(shape, dtype=torch.int64, pin_memory=device.type == "cuda")
        self.host[:, 2] = PAD_SLOT  # every row idle until a step fills it (the capture's warm-up writes no KV)
        self.rows = self.host.to(device)
        self.input_ids = torch.zeros(max_size, dtype=torch.int64, device=device)
        self.positions = torch.zeros(max_size, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((max_size,), PAD_SLOT, dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(max_size, dtype=torch.int32, device=device)
        self.query_start_loc = torch.arange(max_size + 1, dtype=torch.int32, device=device)  # one token each
        self.block_tables = torch.zeros(max_size, max_blocks_per_seq, dtype=torch.int32, device=device)

    @property
    def max_blocks_per_seq(self) -> int:
        return self.block_tables.shape[1]

    def fill(self, plan: BatchPlan, size: int) -> None:
        """Copies a decode step's inputs into the first rows and makes rows num_seqs..size idle: token 0 at
        position 0, slot PAD_SLOT, length 0. Block-table entries past a sequence's own are never read."""
        n = len(plan.input_ids)
        rows = self.host.numpy()
        rows[:n, 0], rows[:n, 1], rows[:n, 2], rows[:n, 3] = (plan.input_ids, plan.positions,
                                                              plan.layout.slot_mapping, plan.layout.seq_lens)
        rows[n:size, :self.COLUMNS] = (0, 0, PAD_SLOT, 0)
        for i, ids in enumerate(plan.layout.block_ids):
            rows[i, self.COLUMNS:self.COLUMNS + len(ids)] = ids
        # The host rows are rewritten only at the next step, after this one's sampling has synchronised.
        self.rows[:size].copy_(self.host[:size], non_blocking=True)

    def unpack(self, size: int) -> None:
        """Device-side, inside the graph: the rows into the kernels' contiguous inputs."""
        for i, target in enumerate((self.input_ids, self.positions, self.slot_mapping, self.seq_lens)):
            target[:size].copy_(self.rows[:size, i])
        self.block_tables[:size].copy_(self.rows[:size, self.COLUMNS:])

    def metadata(self, size: int, kv_caches: KVCaches, backend: AttentionBackend) -> AttentionMetadata:
        return AttentionMetadata(self.slot_mapping[:size], self.block_tables[:size], self.seq_lens[:size],
                                 self.query_start_loc[:size + 1], 1, kv_caches, backend)


class CUDAGraphRunner:
    """Runs decode steps of up to max(sizes) sequences as graphs. capture=False runs the same padded forward
    eagerly instead of replaying (CPU tests of everything around the capture)."""

    def __init__(self, model: DecoderModel, backend: AttentionBackend, kv_caches: KVCaches, sizes: Sequence[int],
                 max_blocks_per_seq: int, device: torch.device, capture: bool = True) -> None:
        if not sizes:
            raise ValueError("need at least one graph size")
        self.model, self.backend, self.kv_caches = model, backend, kv_caches
        self.sizes = tuple(sorted(set(sizes)))
        self.buffers = DecodeBuffers(self.sizes[-1], max_blocks_per_seq, device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.num_replays = 0
        if capture:
            self._capture_all()

    def can_run(self, plan: BatchPlan) -> bool:
        """A decode-only step that a graph holds, every block table within the buffers' width (max_model_len's)."""
        return (plan.num_tokens == len(plan.order) and graph_size_for(plan.num_tokens, self.sizes) is not None
                and max(map(len, plan.layout.block_ids)) <= self.buffers.max_blocks_per_seq)

    def run(self, plan: BatchPlan) -> torch.Tensor:
        """The logits [num_seqs, vocab] of a decode step in batch order (a view valid until the next run)."""
        assert self.can_run(plan), "not a decode step a graph holds"
        n = plan.num_tokens
        size = graph_size_for(n, self.sizes)
        self.buffers.fill(plan, size)
        self.num_replays += 1
        if size in self.graphs:
            self.graphs[size].replay()
            return self.logits[size][:n]
        return self._forward(size)[:n]

    def _forward(self, size: int) -> torch.Tensor:
        b = self.buffers
        b.unpack(size)
        hidden = self.model(b.input_ids[:size], b.positions[:size], b.metadata(size, self.kv_caches, self.backend))
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def _capture_all(self) -> None:
        start = time.perf_counter()
        pool = None
        for size in reversed(self.sizes):
            self._forward(size)  # warm-up: compiles the Triton kernels, settles the allocator
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[size] = self._forward(size)
            pool = graph.pool() if pool is None else pool
            self.graphs[size] = graph
        torch.cuda.synchronize()
        logger.info("captured %d CUDA graphs for decode batches of up to %d in %.1f s", len(self.graphs),
                    self.sizes[-1], time.perf_counter() - start)
