"""The logits a request chooses from: the model's, changed by its penalties, logit_bias, min_tokens and grammar.

One batched pass per step over the rows that ask for any of it (rows that do not cost nothing), in this order:
1. repetition_penalty (vLLM/HF): for tokens in the prompt or the output so far, logit / p where positive, else * p,
   with p in [0.01, 2] so that the result stays finite (SamplingParams);
2. frequency and presence penalties (OpenAI): logit[j] -= count[j] * frequency + (count[j] > 0) * presence, with
   count over the generated tokens only;
3. logit_bias: added to the token's logit;
4. min_tokens: EOS and stop_token_ids at -inf until min_tokens tokens were generated;
5. the grammar mask (structured output): every token the grammar does not allow next at -inf. When min_tokens
   leaves a grammar no token at all (the JSON is complete before min_tokens), the grammar wins: its stop tokens
   stay allowed.
Temperature, top-k and top-p then apply to the result (sampler.processed_probs, exact for any temperature > 0);
greedy takes its argmax.
"""
from __future__ import annotations

import torch

from tiers.engine.sequence import Sequence
from tiers.engine.structured_output import apply_grammar_masks


def process_logits(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """logits: [len(seqs), vocab] float32, row i for seqs[i]. Returns `logits` itself when no row is processed,
    else a processed copy."""
    rows = [i for i, seq in enumerate(seqs) if seq.processes_logits]
    if not rows:
        return logits
    logits = logits.clone()
    penalised = [i for i in rows if seqs[i].params.has_penalties]
    if penalised:
        _apply_penalties(logits, penalised, [seqs[i] for i in penalised])
    biased = [i for i in rows if seqs[i].params.logit_bias]
    if biased:
        _apply_logit_bias(logits, biased, [seqs[i] for i in biased])
    min_tokens = [i for i in rows if seqs[i].min_tokens_pending]
    constrained = [i for i in rows if seqs[i].grammar is not None]
    before_grammar = logits[min_tokens].clone() if set(min_tokens) & set(constrained) else None
    if min_tokens:
        _mask_stop_tokens(logits, min_tokens, [seqs[i] for i in min_tokens])
    if constrained:
        apply_grammar_masks(logits, constrained, [seqs[i].grammar for i in constrained])
    if before_grammar is not None:
        _let_grammar_finish(logits, min_tokens, constrained, before_grammar, seqs)
    return logits


def _apply_penalties(logits: torch.Tensor, rows: list[int], seqs: list[Sequence]) -> None:
    vocab = logits.shape[-1]
    device = logits.device
    sub = logits[rows]
    output_counts = _counts([seq.output_token_ids for seq in seqs], vocab, device)
    repetition = torch.tensor([s.params.repetition_penalty for s in seqs], device=device).unsqueeze(1)
    if bool((repetition != 1.0).any()):
        seen = (_counts([seq.prompt_token_ids for seq in seqs], vocab, device) + output_counts) > 0
        penalised = torch.where(sub > 0, sub / repetition, sub * repetition)
        sub = torch.where(seen, penalised, sub)
    frequency = torch.tensor([s.params.frequency_penalty for s in seqs], device=device).unsqueeze(1)
    presence = torch.tensor([s.params.presence_penalty for s in seqs], device=device).unsqueeze(1)
    sub = sub - output_counts * frequency - (output_counts > 0).to(sub.dtype) * presence
    logits[rows] = sub


def _counts(token_lists: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """[len(token_lists), vocab] float: how often each token occurs in each list."""
    width = max((len(t) for t in token_lists), default=0)
    counts = torch.zeros(len(token_lists), vocab + 1, device=device)
    if width:
        # Pad with an extra column `vocab`, dropped after counting.
        ids = torch.tensor([t + [vocab] * (width - len(t)) for t in token_lists], device=device)
        counts.scatter_add_(1, ids, torch.ones(ids.shape, device=device))
    return counts[:, :vocab]


def _apply_logit_bias(logits: torch.Tensor, rows: list[int], seqs: list[Sequence]) -> None:
    row_ids, token_ids, values = [], [], []
    for i, seq in zip(rows, seqs):
        for token, bias in seq.params.logit_bias.items():
            row_ids.append(i)
            token_ids.append(token)
            values.append(bias)
    device = logits.device
    logits.index_put_((torch.tensor(row_ids, device=device), torch.tensor(token_ids, device=device)),
                      torch.tensor(values, device=device, dtype=logits.dtype), accumulate=True)


def _mask_stop_tokens(logits: torch.Tensor, rows: list[int], seqs: list[Sequence]) -> None:
    row_ids = [i for i, seq in zip(rows, seqs) for _ in seq.min_tokens_stop_ids]
    token_ids = [t for seq in seqs for t in seq.min_tokens_stop_ids]
    if row_ids:
        device = logits.device
        logits[torch.tensor(row_ids, device=device), torch.tensor(token_ids, device=device)] = float("-inf")


def _let_grammar_finish(logits: torch.Tensor, min_tokens: list[int], constrained: list[int],
                        before_grammar: torch.Tensor, seqs: list[Sequence]) -> None:
    """A constrained row that min_tokens left without any token gets its grammar's mask alone."""
    for j, i in enumerate(min_tokens):
        if i in constrained and not bool(torch.isfinite(logits[i]).any()):
            row = before_grammar[j:j + 1].clone()
            apply_grammar_masks(row, [0], [seqs[i].grammar])
            logits[i] = row[0]
