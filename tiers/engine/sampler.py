"""Turns the last-position logits of each sampling sequence into its next token (and logprobs if asked)."""
from __future__ import annotations

import torch

from tiers.engine.sequence import Sequence, TokenLogprob


def sample(logits: torch.Tensor, seqs: list[Sequence]) -> tuple[list[int], list[TokenLogprob | None]]:
    """logits: [len(seqs), vocab] in float32. Greedy rows take the argmax; the others are sampled with each
    sequence's own generator, so a seeded request gives the same tokens whatever else is in the batch."""
    tokens = logits.argmax(dim=-1)
    sampled_rows = [i for i, seq in enumerate(seqs) if not seq.params.greedy]
    if sampled_rows:
        rows = torch.tensor(sampled_rows, device=logits.device)
        probs = _processed_probs(logits[rows], [seqs[i].params for i in sampled_rows])
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p; E comes from the request's generator.
        noise = torch.empty_like(probs)
        for j, i in enumerate(sampled_rows):
            noise[j].exponential_(generator=seqs[i].generator)
        tokens[rows] = (probs / noise).argmax(dim=-1)
    token_list = tokens.tolist()
    logprobs: list[TokenLogprob | None] = [None] * len(seqs)
    wanted = [i for i, seq in enumerate(seqs) if seq.params.logprobs is not None]
    if wanted:
        rows = torch.tensor(wanted, device=logits.device)
        all_logprobs = torch.log_softmax(logits[rows], dim=-1)
        k = max(seqs[i].params.logprobs or 0 for i in wanted)
        top_values, top_ids = all_logprobs.topk(k, dim=-1) if k else (None, None)
        chosen = all_logprobs.gather(1, tokens[rows].unsqueeze(1)).squeeze(1).tolist()
        for j, i in enumerate(wanted):
            n = seqs[i].params.logprobs or 0
            top = list(zip(top_ids[j, :n].tolist(), top_values[j, :n].tolist())) if n else []
            logprobs[i] = TokenLogprob(token_list[i], chosen[j], top)
    return token_list, logprobs


def _processed_probs(logits: torch.Tensor, params: list) -> torch.Tensor:
    temperature = torch.tensor([p.temperature for p in params], device=logits.device, dtype=logits.dtype)
    logits = logits / temperature.unsqueeze(1)
    top_ks = [p.top_k for p in params]
    if any(top_ks):
        vocab = logits.shape[-1]
        k = torch.tensor([min(t, vocab) if t else vocab for t in top_ks], device=logits.device)
        sorted_logits = logits.sort(dim=-1, descending=True).values
        kth = sorted_logits.gather(1, (k - 1).unsqueeze(1))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    top_ps = [p.top_p for p in params]
    if any(p < 1.0 for p in top_ps):
        top_p = torch.tensor(top_ps, device=logits.device, dtype=probs.dtype).unsqueeze(1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
