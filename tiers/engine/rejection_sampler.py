"""Verifies draft tokens against the target's distributions (Leviathan et al. 2023, Chen et al. 2023).

For draft token d_i proposed from q_i, with the target's p_i over the same prefix: accept with probability
min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a token drawn from norm(max(0, p_i - q_i)) and stop; if
all k are accepted emit a bonus token drawn from p_{k+1}. Every emitted token is then distributed exactly as the
target's p (after the request's temperature, top-k and top-p, applied alike to p and q). Greedy requests accept
while the draft token is the target's argmax, then emit the argmax: token for token the target's greedy output.
A deterministic proposal (n-gram lookup, or a greedy draft) has q one-hot on d_i: accept with p_i(d_i), resample
from p_i without d_i.
"""
from __future__ import annotations

import torch

from tiers.engine.sampler import exponential_race, greedy_tokens, processed_probs
from tiers.engine.sequence import Sequence


def rejection_sample(logits: torch.Tensor, seqs: list[Sequence], row_starts: list[int]) -> list[list[int]]:
    """logits: [rows, vocab] float32, sequence i owning rows row_starts[i] : row_starts[i] + k_i + 1 where
    k_i = len(seqs[i].spec_token_ids) (row j: the target's distribution after the j-th draft token). Returns, per
    sequence, the accepted draft tokens followed by the recovered or bonus token."""
    assert not any(s.processes_logits for s in seqs), "requests that process logits decode without speculation"
    out: list[list[int]] = [[] for _ in seqs]
    greedy = [i for i, s in enumerate(seqs) if s.params.greedy]
    if greedy:
        argmax = greedy_tokens(logits).tolist()
        for i in greedy:
            draft, r = seqs[i].spec_token_ids, row_starts[i]
            a = 0
            while a < len(draft) and argmax[r + a] == draft[a]:
                a += 1
            out[i] = draft[:a] + [argmax[r + a]]
    sampled = [i for i, s in enumerate(seqs) if not s.params.greedy]
    if not sampled:
        return out
    rows = [r for i in sampled for r in range(row_starts[i], row_starts[i] + len(seqs[i].spec_token_ids) + 1)]
    params = [seqs[i].params for i in sampled for _ in range(len(seqs[i].spec_token_ids) + 1)]
    probs = processed_probs(logits[torch.tensor(rows, device=logits.device)], params)
    offset = 0
    for i in sampled:
        seq = seqs[i]
        k = len(seq.spec_token_ids)
        out[i] = verify_one(probs[offset:offset + k + 1], seq.spec_token_ids, seq.draft_probs, seq.generator)
        offset += k + 1
    return out


def verify_one(p: torch.Tensor, draft: list[int], q: torch.Tensor | None,
               generator: torch.Generator | None) -> list[int]:
    """p: [k + 1, vocab] target probabilities; q: [k, vocab] draft probabilities, or None for a deterministic
    proposal. Returns the accepted draft tokens and one more."""
    k = len(draft)
    if k:
        idx = torch.arange(k, device=p.device)
        d = torch.tensor(draft, device=p.device)
        p_d = p[idx, d]
        q_d = q[idx, d] if q is not None else torch.ones_like(p_d)
        u = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)
        rejected = (u * q_d >= p_d).tolist()  # u < p/q accepts; a token the target rules out (p = 0) never passes
        a = rejected.index(True) if True in rejected else k
    else:
        a = 0
    if a == k:
        return draft + [int(exponential_race(p[k], generator))]
    if q is not None:
        residual = (p[a] - q[a]).clamp_(min=0)
    else:
        residual = p[a].clone()
        residual[draft[a]] = 0
    if float(residual.sum()) <= 0:  # p == q up to rounding: rejection was a rounding artefact
        residual = p[a]
    return draft[:a] + [int(exponential_race(residual, generator))]
