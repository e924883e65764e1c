"""Incremental detokenization and stop-string matching."""
from __future__ import annotations

from tiers.engine.sequence import Sequence


class Detokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        # The Rust tokenizer decodes without transformers' Python overhead; this runs every step for streams.
        self._fast = getattr(tokenizer, "_tokenizer", None)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        if self._fast is not None:
            return self._fast.decode(token_ids, skip_special_tokens=skip_special_tokens)
        return self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def update(self, seq: Sequence) -> str:
        """Appends the text of seq's new tokens to seq.text and returns it. Holds back tokens that end in an
        incomplete UTF-8 character until the character is complete."""
        skip = seq.params.skip_special_tokens
        ids = seq.token_ids
        prefix_text = self.decode(ids[seq.prefix_offset:seq.read_offset], skip)
        new_text = self.decode(ids[seq.prefix_offset:], skip)
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        delta = new_text[len(prefix_text):]
        seq.prefix_offset, seq.read_offset = seq.read_offset, len(ids)
        seq.text += delta
        return delta


def find_stop(seq: Sequence, num_new_chars: int) -> str | None:
    """If a stop string now appears in seq.text, cut the text before it and return the stop string."""
    for stop in seq.params.stop:
        start = max(0, len(seq.text) - num_new_chars - len(stop) + 1)
        index = seq.text.find(stop, start)
        if index != -1:
            seq.text = seq.text[:index]
            return stop
    return None
