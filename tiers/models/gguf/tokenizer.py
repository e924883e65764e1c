"""The tokenizer a GGUF file describes, as a transformers fast tokenizer (what the engine's tokenizer is).

Byte-level BPE vocabularies ("gpt2": Llama 3, Qwen2, SmolLM, ...) are built here as a `tokenizers` tokenizer.json,
with the pre-tokenizer llama.cpp uses for the file's `tokenizer.ggml.pre` and the special tokens at their own ids:
that works the same under transformers 4.46 .. 5.x. Other vocabularies (sentencepiece "llama") go through
transformers' own GGUF conversion.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from tiers.models.gguf.file import GGUFError, number_array, string_array

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (split regex, or None for GPT-2's own, digits one by one first, BPE ignore_merges)
PRE_TOKENIZERS: dict[str, tuple[str | None, bool, bool]] = {
    "default": (None, False, False), "gpt2": (None, False, False),
    "smollm": (None, True, False),  # llama.cpp: "\p{N}" then GPT-2's regex; SmolLM's tokenizer.json: Digits + ByteLevel
    "llama3": (_LLAMA3_SPLIT, False, True), "llama-v3": (_LLAMA3_SPLIT, False, True),
    "llama-bpe": (_LLAMA3_SPLIT, False, True), "smaug-bpe": (_LLAMA3_SPLIT, False, False),
    "qwen2": (_QWEN2_SPLIT, False, False), "deepseek-r1-qwen": (_QWEN2_SPLIT, False, False),
}


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of the 256 byte values."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes, n = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, codes)))


def build_tokenizer(reader, metadata: dict[str, Any], path: Path | str = ""):
    model = metadata.get("tokenizer.ggml.model")
    tokens = string_array(reader, "tokenizer.ggml.tokens")
    if model is None or not tokens:
        raise GGUFError(f"{path}: no tokenizer in the metadata (tokenizer.ggml.model / tokenizer.ggml.tokens are "
                        "missing); pass token ids, or use a file converted with its tokenizer")
    if model != "gpt2":
        return _transformers_tokenizer(path, model)
    merges = string_array(reader, "tokenizer.ggml.merges")
    if merges is None:
        raise GGUFError(f"{path}: byte-level BPE tokenizer without tokenizer.ggml.merges")
    token_types = number_array(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    backend = byte_level_bpe(tokens, merges, token_types, metadata)
    return wrap_tokenizer(backend, tokens, metadata)


def byte_level_bpe(tokens: list[str], merges: list[str], token_types: list[int], metadata: dict[str, Any]):
    from tokenizers import Tokenizer

    pre = metadata.get("tokenizer.ggml.pre") or "default"
    split, digits, ignore_merges = PRE_TOKENIZERS.get(pre, PRE_TOKENIZERS["default"])
    alphabet = set(bytes_to_unicode().values())
    spelling = bytes_to_unicode()
    vocab: dict[str, int] = {}
    added = []
    for i, (token, kind) in enumerate(zip(tokens, token_types)):
        if kind in (CONTROL, USER_DEFINED):
            added.append({"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == CONTROL})
        spelled = token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(spelled, i)
    pre_tokenizers: list[dict[str, Any]] = []
    if digits:
        pre_tokenizers.append({"type": "Digits", "individual_digits": True})
    if split is not None:
        pre_tokenizers.append({"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False})
    pre_tokenizers.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": split is None})
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False)) and bos_id is not None
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False))
    eos_id = metadata.get("tokenizer.ggml.eos_token_id")
    post: dict[str, Any] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if add_bos or (add_eos and eos_id is not None):
        pre_ids = [(tokens[int(bos_id)], int(bos_id))] if add_bos else []
        post_ids = [(tokens[int(eos_id)], int(eos_id))] if add_eos and eos_id is not None else []
        single = [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in pre_ids] + \
            [{"Sequence": {"id": "A", "type_id": 0}}] + [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in post_ids]
        pair = single + [{"Sequence": {"id": "B", "type_id": 1}}]
        specials = {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in pre_ids + post_ids}
        post = {"type": "Sequence", "processors": [
            post, {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}]}
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [m.split(" ", 1) for m in merges]},
    }
    return Tokenizer.from_str(json.dumps(spec))


def wrap_tokenizer(backend, tokens: list[str], metadata: dict[str, Any]):
    from transformers import PreTrainedTokenizerFast

    def token(key: str) -> str | None:
        i = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    kwargs = {name: token(key) for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                                                 ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id"))}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    template = metadata.get("tokenizer.chat_template")
    if template:
        kwargs["chat_template"] = template
    return PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **kwargs)


def _transformers_tokenizer(path: Path | str, model: str):
    try:
        from transformers import AutoTokenizer

        path = Path(path)
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:
        raise GGUFError(f"{path}: cannot build its {model!r} tokenizer: {type(e).__name__}: {e}") from e
