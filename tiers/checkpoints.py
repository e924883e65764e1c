"""Tiny random Hugging Face checkpoints built offline: the demo tiers, the tests and the benchmark use them.

The tokenizer is a byte-level BPE trained on a small embedded corpus (deterministic, under a second), with a
Llama-3-style chat template. Weights are random: the text is gibberish, but every code path of a real
checkpoint (config layout, safetensors shards, tokenizer files, chat template) is exercised.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<pad>"]
BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<pad>"
ARCHS = ("llama", "llama-tied", "llama-mha", "qwen2", "mistral")

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

CORPUS = """\
The quick brown fox jumps over the lazy dog. A router sends each request to the cheapest model that answers well.
Explain why the sky is blue: sunlight scatters off the molecules of the air, and blue light scatters the most.
Compare the two approaches step by step, then evaluate which one costs less and why it would be faster.
What would happen if the cache were full? The scheduler preempts the request with the lowest priority.
Analyze the following code and synthesize a summary. def add(a, b): return a + b  # adds two numbers
Write a short poem about the sea, the wind and the light of the morning over the harbour.
Translate "good morning" into French: bonjour. Into German: guten Morgen. Into Spanish: buenos días.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 -7 1e-5. Dates: 2026-11-22, 12:30, Monday.
Questions and answers: Who wrote Hamlet? Shakespeare. What is the capital of Japan? Tokyo.
Symbols and unicode: café, naïve, über, 日本語, 中文, русский, العربية, emoji 🙂🚀, math ∑ √ ∞ ≤ ≥.
SELECT name, cost FROM requests WHERE tier = 'small' ORDER BY created_at DESC LIMIT 10;
{"model": "auto", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.7}
"""


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer wrapped as transformers' PreTrainedTokenizerFast, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS.splitlines() * 4, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                      additional_special_tokens=SPECIAL_TOKENS[2:5])
    wrapped.chat_template = CHAT_TEMPLATE
    # Prompts start with bos, as Llama 3's do.
    from tokenizers import processors

    bos_id = wrapped.convert_tokens_to_ids(BOS)
    wrapped._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    return wrapped


def create_random_checkpoint(path: str | Path, arch: str = "llama", *, seed: int = 0, vocab_size: int = 512,
                             hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                             intermediate_size: int = 128, max_position_embeddings: int = 1024,
                             max_shard_size: str | None = None, initializer_range: float = 0.02,
                             **config_overrides: Any) -> Path:
    """Saves a random model of the given family with a tokenizer into `path` and returns it."""
    from transformers import GenerationConfig

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    path = Path(path)
    tokenizer = build_tokenizer(vocab_size)
    if len(tokenizer) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {len(tokenizer)} tokens")
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in (("bos", BOS), ("eos", EOS), ("pad", PAD))}
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_heads if arch == "llama-mha" else num_kv_heads,
        max_position_embeddings=max_position_embeddings, initializer_range=initializer_range,
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
        tie_word_embeddings=arch == "llama-tied",
    )
    if arch == "llama":
        # llama3 scaling with a short original context, so that some frequencies really are rescaled.
        common["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        common["rope_theta"] = 500000.0
    common.update(config_overrides)
    config = _config_class(arch)(**_rope_for_installed_transformers(common))
    torch.manual_seed(seed)
    model = _model_class(arch)(config).to(torch.float32).eval()
    if arch == "qwen2":
        with torch.no_grad():  # real, non-zero q/k/v biases, so bias handling is exercised
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, initializer_range)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **kwargs)
    tokenizer.save_pretrained(path)
    # As in Llama 3, the end of an assistant turn also ends generation.
    eos_ids = [ids["eos"], tokenizer.convert_tokens_to_ids("<|eot_id|>")]
    GenerationConfig(bos_token_id=ids["bos"], eos_token_id=eos_ids, pad_token_id=ids["pad"]).save_pretrained(path)
    return path


def _config_class(arch: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    return {"qwen2": Qwen2Config, "mistral": MistralConfig}.get(arch, LlamaConfig)


def _model_class(arch: str):
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

    return {"qwen2": Qwen2ForCausalLM, "mistral": MistralForCausalLM}.get(arch, LlamaForCausalLM)


def _rope_for_installed_transformers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """transformers 5.x takes `rope_parameters` (theta inside); 4.x takes `rope_theta` and `rope_scaling`."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        return kwargs
    kwargs = dict(kwargs)
    scaling = kwargs.pop("rope_scaling", None) or {"rope_type": "default"}
    theta = kwargs.pop("rope_theta", 10000.0)
    kwargs["rope_parameters"] = {**scaling, "rope_theta": theta}
    return kwargs
