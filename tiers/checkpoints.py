"""Tiny random Hugging Face checkpoints built offline: the demo tiers, the tests and the benchmark use them.

The tokenizer is a byte-level BPE trained on a small embedded corpus (deterministic, well under a second), with a
Llama-3-style chat template. Weights are random: the text is gibberish, but every code path of a real
checkpoint (config layout, safetensors shards, tokenizer files, chat template) is exercised.

Random models with the usual `initializer_range=0.02` have nearly flat logits, where float rounding can flip a
greedy argmax; token-exact comparisons should raise it (0.1 to 0.2 gives top-2 gaps around 0.2).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<pad>"]
BOS, EOS, PAD, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<pad>", "<|eot_id|>"
ARCHS = ("llama", "llama-tied", "llama-mha", "qwen2", "mistral")

# Llama 3's template, less its date and tool handling.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# llama3 rope scaling. With rope_theta 500000 and head_dim 16 (the default sizes), the wavelengths are 6, 32, 167,
# 860, ... tokens: the first two stay (shorter than 256 / 4 = 64), the third is interpolated (between 64 and 256)
# and the rest are divided by 8, so all three branches of the rule are exercised.
LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 256}
LLAMA3_ROPE_THETA = 500000.0

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
Once upon a time, in a village by the river, there lived an old baker who rose every day before the sun.
She kneaded the dough, lit the oven and waited; the smell of fresh bread drifted through the narrow streets.
Children stopped on their way to school, and the baker always had a small roll for each of them.
The history of computing is a story of layers: transistors make gates, gates make processors, and processors
run operating systems, which run the programs that people actually use every day at work and at home.
A good summary keeps the main idea, drops the details, and uses plain words. Keep it short and clear.
Photosynthesis turns light, water and carbon dioxide into sugar and oxygen inside the leaves of plants.
The mitochondria produce most of the energy of the cell; the nucleus holds its genetic information.
In mathematics, a prime number has exactly two divisors: one and itself. 2, 3, 5, 7, 11 and 13 are primes.
The derivative of x squared is two x, and the integral of one over x is the natural logarithm of x.
Dear team, thank you for your patience this week. The release is ready, and the tests pass on every platform.
Please review the attached report before Friday's meeting, and send me your comments by Thursday evening.
class Cache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.items.get(key)
for (int i = 0; i < n; i++) { total += values[i] * weights[i]; }
fn main() { let xs = vec![1, 2, 3]; println!("{:?}", xs.iter().map(|x| x * 2).collect::<Vec<_>>()); }
$ pip install --upgrade package && python -m pytest -q tests/
ERROR: connection refused (errno 111) at 10.0.0.1:8080; retrying in 5 seconds...
Weather today: cloudy in the morning, sunny in the afternoon, 18 °C, wind from the west at 20 km/h.
Recipe: mix 200 g of flour, 2 eggs, 300 ml of milk and a pinch of salt; rest for 30 minutes; cook in a hot pan.
Is it better to train a larger model on less data, or a smaller model on more data? It depends on the budget.
Why do cats purr? Nobody knows for sure, but they purr when content and sometimes when hurt or afraid.
The train leaves at 7:45 from platform 3 and arrives in the city centre at 9:10, after four stops.
Über den Wolken muss die Freiheit wohl grenzenlos sein. La vie est belle. ¿Dónde está la biblioteca?
東京は日本の首都です。北京是中国的首都。Москва — столица России. 서울은 한국의 수도입니다.
Lists: apples, oranges, pears; red, green, blue; north, south, east, west; first, second, third.
"I think, therefore I am," wrote Descartes. 'To be or not to be' is the question Hamlet asks.
"""


def build_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer (trained on CORPUS, the same vocabulary every run) wrapped as transformers'
    PreTrainedTokenizerFast, with bos/eos/pad, Llama 3's header tokens and a chat template. `encode` prepends bos.

    The vocabulary holds at most `vocab_size` tokens: the 256 bytes, the 6 special tokens and as many merges as the
    corpus yields (about 1,500; a larger `vocab_size` leaves the model's extra ids without a token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    # Prompts start with bos, as Llama 3's do.
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                      additional_special_tokens=SPECIAL_TOKENS[2:5],
                                      clean_up_tokenization_spaces=False)  # decode(encode(text)) == text
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def create_random_checkpoint(path: str | Path, arch: str = "llama", *, seed: int = 0, vocab_size: int = 512,
                             hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                             intermediate_size: int = 128, max_position_embeddings: int = 1024,
                             max_shard_size: str | None = None, initializer_range: float = 0.02,
                             **config_overrides: Any) -> Path:
    """Saves a random float32 model of the given family, with a tokenizer, into `path` and returns it.

    arch: "llama" (GQA, llama3 rope scaling), "llama-tied" (Llama 3.2 style tied embeddings), "llama-mha"
    (num_kv_heads = num_heads, plain rope), "qwen2" (random non-zero q/k/v biases) or "mistral".
    `max_shard_size` (e.g. "200KB") splits the safetensors into shards with an index; `config_overrides` go to
    the transformers config class last. The same arguments give the same files, byte for byte in the weights."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    path = Path(path)
    tokenizer = build_tokenizer(vocab_size)
    if len(tokenizer) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {len(tokenizer)} tokens")
    ids = special_token_ids(tokenizer)
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads,
        num_key_value_heads=num_heads if arch == "llama-mha" else num_kv_heads,
        max_position_embeddings=max_position_embeddings, initializer_range=initializer_range,
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
        tie_word_embeddings=arch == "llama-tied",
    )
    if arch in ("llama", "llama-tied"):
        common["rope_theta"] = LLAMA3_ROPE_THETA
    if arch == "llama":
        common["rope_scaling"] = dict(LLAMA3_ROPE_SCALING)
    common.update(config_overrides)
    config = _config_class(arch)(**rope_for_installed_transformers(common))
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's random state
        torch.manual_seed(seed)
        model = _model_class(arch)(config).to(torch.float32).eval()
        if arch == "qwen2":
            with torch.no_grad():  # real, non-zero q/k/v biases, so that bias handling is exercised
                for layer in model.model.layers:
                    for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                        proj.bias.normal_(0.0, initializer_range)
    kwargs: dict[str, Any] = {"safe_serialization": True} if _transformers_major() < 5 else {}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kwargs)
    save_tokenizer(path, tokenizer)
    return path


def special_token_ids(tokenizer) -> dict[str, int]:
    """{"bos", "eos", "pad"}: build_tokenizer's ids for them (what a config.json built for it names)."""
    return {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in (("bos", BOS), ("eos", EOS), ("pad", PAD))}


def save_tokenizer(path: str | Path, tokenizer) -> None:
    """Writes build_tokenizer's tokenizer files and a generation_config.json into the checkpoint folder `path`
    (for checkpoints whose weights are written some other way, e.g. built on a GPU)."""
    from transformers import GenerationConfig

    path = Path(path)
    ids = special_token_ids(tokenizer)
    tokenizer.save_pretrained(path)
    _portable_tokenizer_config(path / "tokenizer_config.json")
    # As in Llama 3, the end of an assistant turn also ends generation.
    eos_ids = [ids["eos"], tokenizer.convert_tokens_to_ids(EOT)]
    GenerationConfig(bos_token_id=ids["bos"], eos_token_id=eos_ids, pad_token_id=ids["pad"]).save_pretrained(path)


def _portable_tokenizer_config(file: Path) -> None:
    """The chat template inside tokenizer_config.json too (transformers 5.x writes only chat_template.jinja, which
    transformers before 4.43 and other readers miss), and a tokenizer class both 4.x and 5.x know.

    An explicit `"unk_token": null`: transformers 5.x loads qwen2 checkpoints with its Qwen2Tokenizer whatever the
    file says, whose default unk token `<|endoftext|>` would otherwise be added past the model's vocabulary."""
    config = json.loads(file.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.setdefault("unk_token", None)
    file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _config_class(arch: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    return {"qwen2": Qwen2Config, "mistral": MistralConfig}.get(arch, LlamaConfig)


def _model_class(arch: str):
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

    return {"qwen2": Qwen2ForCausalLM, "mistral": MistralForCausalLM}.get(arch, LlamaForCausalLM)


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def rope_for_installed_transformers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """transformers 5.x takes `rope_parameters` (theta inside); 4.x takes `rope_theta` and `rope_scaling`."""
    if _transformers_major() < 5 or "rope_parameters" in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    scaling = kwargs.pop("rope_scaling", None) or {"rope_type": "default"}
    theta = kwargs.pop("rope_theta", 10000.0)
    kwargs["rope_parameters"] = {**scaling, "rope_theta": theta}
    return kwargs


def create_draft_target_pair(root: str | Path, *, draft_layers: int = 1, extra_layers: int = 3,
                             residual_scale: float = 0.05, seed: int = 0, **kwargs: Any) -> tuple[Path, Path]:
    """A correlated (target, draft) pair for speculative decoding, built offline into root/target and root/draft.

    The target is a random Llama of draft_layers + extra_layers layers whose extra (last) layers write only small
    residuals: their o_proj and down_proj are scaled by `residual_scale`. The draft is the target's first
    draft_layers layers with the same embeddings, final norm, LM head and tokenizer. The target still pays for
    every layer; how often the draft's argmax agrees with the target's follows from residual_scale (0: always) and
    is measured, not assumed. kwargs go to create_random_checkpoint."""
    from safetensors.torch import load_file, save_file

    root = Path(root)
    target = create_random_checkpoint(root / "target", "llama", seed=seed, num_layers=draft_layers + extra_layers,
                                      **kwargs)
    files = sorted(target.glob("*.safetensors"))
    if len(files) != 1:
        raise ValueError("create_draft_target_pair writes unsharded checkpoints (leave max_shard_size unset)")
    weights = load_file(str(files[0]))
    for name, tensor in weights.items():
        parts = name.split(".")
        if len(parts) > 3 and parts[1] == "layers" and int(parts[2]) >= draft_layers and \
                parts[-2] in ("o_proj", "down_proj"):
            tensor.mul_(residual_scale)
    save_file(weights, str(files[0]), metadata={"format": "pt"})
    draft = root / "draft"
    draft.mkdir(parents=True, exist_ok=True)
    for file in target.iterdir():
        if file.suffix != ".safetensors" and file.is_file():
            (draft / file.name).write_bytes(file.read_bytes())
    config = json.loads((draft / "config.json").read_text())
    config["num_hidden_layers"] = draft_layers
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:draft_layers]
    (draft / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    keep = {n: t for n, t in weights.items()
            if not (n.split(".")[1:2] == ["layers"] and int(n.split(".")[2]) >= draft_layers)}
    save_file(keep, str(draft / files[0].name), metadata={"format": "pt"})
    return target, draft
