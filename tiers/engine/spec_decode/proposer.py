"""Draft proposals: up to k tokens per decoding sequence, written to seq.spec_token_ids (and seq.draft_probs).

- NgramProposer (prompt lookup): copies what followed the latest earlier occurrence of the context's last n
  tokens. No model, no cost: for tiers without a smaller partner, and for repetitive outputs (code, extraction).
- DraftModelProposer: a smaller model of the same vocabulary runs k single-token steps, after catching up on the
  tokens it has not seen (the whole context on its first proposal but for the blocks whose draft KV its pool
  holds from a prefix-cache hit, in chunks of at most max_num_batched_tokens; the bonus token after a full
  acceptance).
  Greedy requests take the draft's argmax; sampling requests sample from the draft's distribution under the
  request's own temperature/top-k/top-p and generator, and keep it (q) for the rejection sampler. Each draft token's
  confidence (its probability under the distribution it was picked from: the draft's softmax for greedy, q for
  sampled) goes to `keep_drafting`, which may stop a request before its k (adaptive.py's confidence stop).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from tiers.engine.input_batch import ForwardChunk
from tiers.engine.sampler import exponential_race, processed_probs
from tiers.engine.sequence import Sequence
from tiers.engine.spec_decode.draft_head import DraftLogits
from tiers.engine.spec_decode.draft_runner import DraftRunner
from tiers.native import native_library
from tiers.native.ops import argmax_prob

# (requests still drafting, their draft tokens' confidences) -> which draft one more (SpecController.keep_drafting)
KeepDrafting = Callable[[list[tuple[Sequence, list[float]]]], list[bool]]


class NgramProposer:
    def __init__(self, min_n: int = 1, max_n: int = 3, max_lookback: int = 4096) -> None:
        self.min_n, self.max_n, self.max_lookback = min_n, max_n, max_lookback

    def propose(self, items: list[tuple[Sequence, int]]) -> None:
        for seq, k in items:
            seq.spec_token_ids = self.lookup(seq.token_ids, k)
            seq.draft_probs = None

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """The k tokens after the latest earlier occurrence of the longest suffix n-gram (max_n down to min_n)."""
        context = tokens[-self.max_lookback:]
        length = len(context)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            suffix = context[length - n:]
            first = suffix[0]
            # Latest match first: the freshest continuation is the likeliest to repeat.
            for start in range(length - n - 1, -1, -1):
                if context[start] == first and context[start:start + n] == suffix:
                    return context[start + n:start + n + k]
        return []


class DraftModelProposer:
    def __init__(self, runner: DraftRunner, on_forward: Callable[[int, float], None] | None = None,
                 max_chunk_tokens: int = 2048) -> None:
        self.runner = runner
        self.on_forward = on_forward  # (tokens in the forward, seconds): the controller's draft cost model
        self.max_chunk_tokens = max_chunk_tokens  # per sequence and forward, as the target's chunked prefill

    def propose(self, items: list[tuple[Sequence, int]], keep_drafting: KeepDrafting | None = None) -> None:
        """Up to k tokens for each (seq, k); keep_drafting, asked after every forward, stops requests early."""
        active = [(seq, k) for seq, k in items if k > 0]
        for seq, _ in active:
            seq.clear_draft()
            # a prefix-cache hit: the draft's KV of those blocks is in its pool already (at least the last token
            # is fed again, for its logits)
            seq.num_draft_computed_tokens = min(self.runner.computed_prefix(seq), seq.num_tokens - 1)
        self._catch_up_long([seq for seq, _ in active])
        round_ = 0
        while active:
            if round_ == 0:  # catch up on every token the draft has not seen, ending with the last one
                chunks = [ForwardChunk(seq, seq.num_draft_computed_tokens,
                                       seq.token_ids[seq.num_draft_computed_tokens:]) for seq, _ in active]
            else:
                chunks = [ForwardChunk(seq, seq.num_tokens + round_ - 1, seq.spec_token_ids[-1:]) for seq, _ in active]
            start = time.perf_counter()
            logits = self.runner.last_logits(chunks)
            seqs = [seq for seq, _ in active]
            tokens, probs, confidence = self._sample(logits, seqs)
            if self.on_forward is not None:
                self.on_forward(sum(c.num_tokens for c in chunks), time.perf_counter() - start)
            for j, seq in enumerate(seqs):
                if round_ == 0:
                    self.runner.record_filled(seq, seq.num_draft_computed_tokens, seq.num_tokens)
                seq.num_draft_computed_tokens = seq.num_tokens + round_
                seq.spec_token_ids.append(tokens[j])
                seq.draft_confidences.append(confidence[j])
                if probs[j] is not None:
                    prev = seq.draft_probs
                    seq.draft_probs = probs[j][None] if prev is None else torch.cat([prev, probs[j][None]])
            round_ += 1
            active = [(seq, k) for seq, k in active if k > round_]
            if active and keep_drafting is not None:
                keep = keep_drafting([(seq, seq.draft_confidences) for seq, _ in active])
                active = [item for item, more in zip(active, keep) if more]

    def _catch_up_long(self, seqs: list[Sequence]) -> None:
        """Chunked prefill for the draft: a sequence more than max_chunk_tokens behind (its prompt, or tokens
        decoded while k was 0) catches up in forwards of at most that many tokens, until the rest fits one."""
        n = self.max_chunk_tokens
        while behind := [seq for seq in seqs if seq.num_tokens - seq.num_draft_computed_tokens > n]:
            chunks = [ForwardChunk(seq, seq.num_draft_computed_tokens,
                                   seq.token_ids[seq.num_draft_computed_tokens:seq.num_draft_computed_tokens + n])
                      for seq in behind]
            start = time.perf_counter()
            self.runner.last_logits(chunks)
            if self.on_forward is not None:
                self.on_forward(sum(c.num_tokens for c in chunks), time.perf_counter() - start)
            for seq in behind:
                self.runner.record_filled(seq, seq.num_draft_computed_tokens, seq.num_draft_computed_tokens + n)
                seq.num_draft_computed_tokens += n

    @staticmethod
    def _sample(logits: DraftLogits, seqs: list[Sequence]
                ) -> tuple[list[int], list[torch.Tensor | None], list[float]]:
        """The draft tokens, q of the sampled ones (None: greedy), and each token's confidence."""
        tokens, confidence = _argmax_prob(logits)
        probs: list[torch.Tensor | None] = [None] * len(seqs)
        sampled = [i for i, s in enumerate(seqs) if not s.params.greedy]
        if sampled:
            full = logits.full()
            q = processed_probs(full[torch.tensor(sampled, device=full.device)], [seqs[i].params for i in sampled])
            for j, i in enumerate(sampled):
                tokens[i] = exponential_race(q[j], seqs[i].generator)
                probs[i] = q[j]
                confidence[i] = q[j][tokens[i]]
        return tokens.tolist(), probs, confidence.tolist()


def _argmax_prob(logits: DraftLogits) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's argmax over the vocabulary and its softmax probability: one native call on CPU over the kept rows
    (torch's few ops over a 151,936-token row cost ~0.9 ms of a ~14 ms draft step right after the layers), torch
    elsewhere."""
    values = logits.values
    native = native_library() if values.device.type == "cpu" else None
    if native is not None and values.dtype == torch.float32 and values.is_contiguous():
        return argmax_prob(native, values, logits.token_ids)
    full = logits.full()
    top, tokens = full.max(dim=-1)
    return tokens, torch.exp(top - torch.logsumexp(full, dim=-1))
