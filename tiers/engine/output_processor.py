"""Appends sampled tokens to their sequences, decides when a sequence stops, and hands RequestOutputs to callers
(vLLM's output processor)."""
from __future__ import annotations

import logging
from typing import Any

from tiers.engine.detokenizer import Detokenizer, find_stop
from tiers.engine.outputs import RequestOutput
from tiers.engine.sequence import Sequence, TokenLogprob
from tiers.models.config import ModelConfig

logger = logging.getLogger(__name__)


def eos_token_ids(model_config: ModelConfig, tokenizer: Any) -> set[int]:
    """The model's end-of-sequence tokens and the tokenizer's."""
    eos = set(model_config.eos_token_ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    return eos


def _grammar_terminates(seq: Sequence, token: int) -> bool:
    """Advances the sequence's grammar by its new token; True when that token (a stop token) ended the grammar.
    GrammarError when the grammar cannot go on: the request fails, not the step."""
    seq.grammar.accept(token)
    return seq.grammar.is_terminated


class OutputProcessor:
    def __init__(self, detokenizer: Detokenizer | None, eos_token_ids: set[int], max_model_len: int) -> None:
        self.detokenizer = detokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len

    def append_tokens(self, seq: Sequence, token_ids: list[int], logprobs: list[TokenLogprob | None],
                      outputs: list[RequestOutput]) -> str | None:
        """Appends a step's tokens (a stream gets an output per token); the finish reason when one of them ends the
        sequence, the tokens after it dropped."""
        for token, logprob in zip(token_ids, logprobs):
            reason = self.append_token(seq, token, logprob)
            if reason is not None:
                return reason
            if seq.stream:
                self.emit(seq, outputs)
        return None

    def append_token(self, seq: Sequence, token: int, logprob: TokenLogprob | None) -> str | None:
        """Returns the finish reason when this token ends the sequence. Raises GrammarError when the sequence's
        grammar cannot take the token."""
        seq.token_ids.append(token)
        if logprob is not None:
            seq.logprobs.append(logprob)
        params = seq.params
        reason: str | None = None
        if seq.grammar is not None and _grammar_terminates(seq, token):
            reason = "stop"
        elif token in params.stop_token_ids:
            reason, seq.stop_reason = "stop", token
        elif not params.ignore_eos and token in self.eos_token_ids:
            reason = "stop"
        if self.detokenizer is not None and (seq.stream or params.stop):
            delta = self.detokenizer.update(seq)
            if reason is None and params.stop:
                stop = find_stop(seq, len(delta))
                if stop is not None:
                    reason, seq.stop_reason = "stop", stop
        if reason is None and (seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len):
            reason = "length"
        return reason

    def finish(self, seq: Sequence, outputs: list[RequestOutput], error: str | None = None,
               error_kind: str | None = None) -> None:
        """The last output of a sequence the scheduler has let go of."""
        if error is None and self.detokenizer is not None and not (seq.stream or seq.params.stop):
            seq.text = self.detokenizer.decode(seq.output_token_ids, seq.params.skip_special_tokens)
        self.emit(seq, outputs, error, error_kind)

    def emit(self, seq: Sequence, outputs: list[RequestOutput], error: str | None = None,
             error_kind: str | None = None) -> None:
        text_end = len(seq.text)
        if not seq.is_finished and seq.params.stop:
            # A stop string may be forming at the end: hold those characters back until it is decided.
            text_end = max(seq.num_text_sent, text_end - max(len(s) for s in seq.params.stop) + 1)
        out = RequestOutput(
            request_id=seq.request_id, prompt_token_ids=seq.prompt_token_ids, token_ids=seq.output_token_ids,
            text=seq.text[:text_end], finished=seq.is_finished, finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason, new_token_ids=seq.token_ids[seq.num_prompt_tokens + seq.num_tokens_sent:],
            delta_text=seq.text[seq.num_text_sent:text_end],
            logprobs=list(seq.logprobs) if seq.params.logprobs is not None else None,
            num_cached_tokens=seq.num_cached_tokens, queue_time_s=seq.queue_time, error=error, error_kind=error_kind)
        seq.num_text_sent, seq.num_tokens_sent = text_end, seq.num_output_tokens
        outputs.append(out)
        if seq.on_output is not None:
            try:
                seq.on_output(out)
            except Exception:  # e.g. the consumer's event loop is gone: never let it break the step
                logger.exception("output callback of request %s failed", seq.request_id)
