"""The draft's output matrix cut to the tokens it is likely to propose (a reduced draft vocabulary, as EAGLE-3 and
FR-Spec draft).

Policy: a small draft's output matrix is a large share of its step (the family's 0.5B: 151,936 rows of 896, a
third of its decode step on CPU), and the target verifies every draft token, so the draft may score fewer tokens
without changing any output. Greedy tokens stay the target's; a sampled draft token comes from the draft's
distribution over its rows (zero elsewhere), which rejection sampling corrects exactly like any other q. A token
outside the rows is never proposed: its position costs a rejection, never a wrong token.

The rows: the first `size` token ids (byte-level BPE and SentencePiece vocabularies number their tokens in merge or
score order, the commonest first), the special tokens, and every token the draft is fed from then on (prompts and
accepted tokens: what a conversation writes, it tends to write again), until the rows reach twice `size`. A
vocabulary of at most twice `size` keeps the full matrix, and so does a head on a GPU: there the output matrix is a
smaller share of a memory-bound step, and its rows would take memory the KV pool was sized without.

The rows' format: GGUF Q5_0 (5.5 bits a weight, run as the native kernel's Q5_0_R) where the head's own rows take
more bytes (INT8, Q8_0, Q6_K, float) and the native kernel takes rows of its width (a multiple of 128); otherwise the
head's own. Each draft forward streams them: for the family's 0.5B, as INT8, 1.70 ms of a 13.6 ms forward; as Q5_0
they read 35% fewer bytes, in 1.16 ms (docs/benchmarks.md, issue 37's twenty-fifth pass). Their rounding moves the
draft's logits, so a near tie may propose another token: the target's verification still decides every output token.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tiers.native import huge_pages, native_library
from tiers.quantization import cpu_native, kquant
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization.linear import QuantizedLinear
from tiers.quantization.native_weights import dequantize_native

RowsMatmul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (hidden [M, K], rows) -> float32 [M, n]
COMPACT = "Q5_0"  # the kept rows' block type where the head's rows are wider (see the module docstring)


@dataclass
class DraftLogits:
    """A draft forward's logits: values float32 [M, n] for the tokens token_ids [n] (a DraftHead's kept rows, every
    other token's logit -inf), or for the whole vocabulary (token_ids None). A greedy draft token needs only the
    kept rows; spreading them over the vocabulary cost ~0.4 ms a draft forward on CPU."""
    values: torch.Tensor
    token_ids: torch.Tensor | None
    vocab_size: int

    def full(self) -> torch.Tensor:
        """float32 [M, vocab]: the values in their tokens' columns, -inf elsewhere."""
        if self.token_ids is None:
            return self.values
        out = torch.full((self.values.shape[0], self.vocab_size), float("-inf"), dtype=torch.float32,
                         device=self.values.device)
        return out.index_copy_(1, self.token_ids, self.values)


@dataclass(frozen=True)
class RowFormat:
    """Rows of vocabulary (one per token) of in_features each, and how to compute with them."""
    rows: torch.Tensor
    in_features: int
    matmul: RowsMatmul  # (hidden [M, K], some of the rows) -> their logits, float32 [M, n]
    dequantize: Callable[[torch.Tensor], torch.Tensor]  # some of the rows -> float32 [n, K]


def _row_format(head: nn.Module) -> RowFormat | None:
    """The head's weight as one tensor of vocabulary rows, its product with a slice of those rows computed as the
    head computes it (the same kernel, so each kept token's logit is the full head's), and their float values;
    None: a head whose rows are not one tensor (torch's packed kernels, a weight of several block types)."""
    if isinstance(head, nn.Linear) and head.bias is None:
        return RowFormat(head.weight, head.in_features, lambda x, rows: F.linear(x.to(rows.dtype), rows).float(),
                         lambda rows: rows.float())
    if not isinstance(head, QuantizedLinear) or head.bias is not None:
        return None
    k = head.in_features
    if head.kernel in ("cpu_w8a32", "cpu_w8a8", "cpu_w4a8"):
        w8, f32 = head.mode == "int8", head.impl.float_activations
        return RowFormat(head.qweight, k, lambda x, rows: cpu_native.gemm(head.native, x, rows, k, w8, f32),
                         lambda rows: dequantize_native(rows, k, w8))
    if head.kernel == "cpu_kq" and len(head.kq.parts) == 1:
        kind = head.kq.parts[0][0]
        return RowFormat(head.kq.parts[0][1], k,
                         lambda x, rows: kquant.gemm(head.native, x, KQuantWeight([(kind, rows)], k)),
                         lambda rows: kquant.dequantize_rows(head.native, rows, kind, k))
    return None


def _compact(source: RowFormat) -> tuple[Callable[[torch.Tensor], torch.Tensor], RowFormat] | None:
    """(source rows -> kept rows, the kept rows' format) for COMPACT rows, or None where the source's rows are as
    small already or the native kernel does not take rows of their width."""
    native, k = native_library(), source.in_features
    packed = kquant.REPACKED[COMPACT]
    if native is None or k % kquant.BLOCK_TYPES[packed][1]:
        return None
    if source.rows[0].numel() * source.rows.element_size() <= kquant.row_bytes(packed, k):
        return None

    def convert(rows: torch.Tensor) -> torch.Tensor:
        return kquant.repack(native, kquant.quantize(source.dequantize(rows), COMPACT), in_place=True).parts[0][1]

    empty = torch.empty(0, kquant.row_bytes(packed, k), dtype=torch.uint8)
    return convert, RowFormat(empty, k, lambda x, rows: kquant.gemm(native, x, KQuantWeight([(packed, rows)], k)),
                              lambda rows: kquant.dequantize_rows(native, rows, packed, k))


class DraftHead:
    def __init__(self, source: RowFormat, vocab_size: int, size: int, always: Iterable[int] = (),
                 compact: bool = True) -> None:
        """source: the head's rows (_row_format; use DraftHead.build). size: see the module docstring; `always`:
        token ids kept from the start (end-of-sequence and special tokens); compact: COMPACT rows where they pay."""
        self.source = source.rows.detach()
        packed = _compact(source) if compact else None
        self._to_rows, self.format = packed if packed else (lambda rows: rows, source)
        self.vocab_size, self.capacity = vocab_size, 2 * size
        # streamed by every draft step: on huge pages, as the weights are
        self.rows = huge_pages.empty((self.capacity, *self.format.rows.shape[1:]), self.format.rows.dtype)
        self.token_ids = torch.empty(self.capacity, dtype=torch.long, device=self.source.device)  # row -> token id
        self.kept: dict[int, int] = {}  # token id -> row
        self.add(range(size))
        self.add(always)

    @classmethod
    def build(cls, head: nn.Module, vocab_size: int, size: int, always: Iterable[int] = (),
              compact: bool = True) -> DraftHead | None:
        """A DraftHead over `head` (the draft model's output matrix, never modified: it may be another engine's),
        or None where the full matrix stays (see the module docstring)."""
        fmt = _row_format(head)
        if size <= 0 or 2 * size >= vocab_size or fmt is None or fmt.rows.device.type != "cpu":
            return None
        return cls(fmt, vocab_size, size, always, compact)

    @property
    def num_rows(self) -> int:
        return len(self.kept)

    def add(self, token_ids: Iterable[int]) -> None:
        """Gives the tokens not yet kept a row each, first offered first, while rows are left (a set lookup per token:
        a draft forward offers its tokens every time)."""
        new = [t for t in dict.fromkeys(token_ids) if 0 <= t < self.vocab_size and t not in self.kept]
        new = new[:self.capacity - self.num_rows]
        if not new:
            return
        start = self.num_rows
        ids = torch.tensor(new, dtype=torch.long, device=self.source.device)
        self.rows[start:start + len(new)] = self._to_rows(self.source[ids])
        self.token_ids[start:start + len(new)] = ids
        self.kept.update(zip(new, range(start, start + len(new))))

    @torch.no_grad()
    def kept_logits(self, hidden: torch.Tensor) -> DraftLogits:
        """[M, hidden] -> the kept tokens' logits: as the full head computes them, or (compact rows) as their Q5_0
        rows do. Rows added later do not move these."""
        n = self.num_rows
        return DraftLogits(self.format.matmul(hidden, self.rows[:n]), self.token_ids[:n], self.vocab_size)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[M, hidden] -> float32 [M, vocab]: the kept tokens' logits, -inf elsewhere."""
        return self.kept_logits(hidden).full()
