"""tiers.checkpoints: tiny random Hugging Face checkpoints and their tokenizer, built offline."""
import json
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from tiers.checkpoints import ARCHS, CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer, create_random_checkpoint

EXPECTED_CLASS = {"llama": "LlamaForCausalLM", "llama-tied": "LlamaForCausalLM", "llama-mha": "LlamaForCausalLM",
                  "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("random-checkpoints")
    return {arch: create_random_checkpoint(root / arch, arch, initializer_range=0.15) for arch in ARCHS}


def rope_of(config) -> dict:
    """The rope settings, whichever layout the installed transformers uses (5.x rope_parameters, 4.x rope_*)."""
    params = getattr(config, "rope_parameters", None)
    if params:
        return dict(params)
    return {**(getattr(config, "rope_scaling", None) or {"rope_type": "default"}), "rope_theta": config.rope_theta}


def all_tensors(path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


@pytest.mark.parametrize("arch", ARCHS)
def test_each_arch_loads_back_with_its_intended_config(built, tokenizer, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = built[arch]
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json"):
        assert (path / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(path)
    config = model.config
    assert type(model).__name__ == EXPECTED_CLASS[arch]
    assert config.architectures == [EXPECTED_CLASS[arch]]
    assert next(model.parameters()).dtype == torch.float32
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (512, 64, 2)
    assert config.num_attention_heads == 4
    assert config.num_key_value_heads == (4 if arch == "llama-mha" else 2)  # GQA except for llama-mha
    assert config.initializer_range == 0.15
    # Special ids agree between config, generation config and tokenizer.
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    generation = json.loads((path / "generation_config.json").read_text())
    assert tokenizer.eos_token_id in generation["eos_token_id"]
    assert tokenizer.convert_tokens_to_ids("<|eot_id|>") in generation["eos_token_id"]
    loaded = AutoTokenizer.from_pretrained(path)
    assert len(loaded) <= config.vocab_size
    assert loaded.encode("Hello there") == tokenizer.encode("Hello there")
    with torch.no_grad():
        logits = model(torch.tensor([[tokenizer.bos_token_id, 100, 200, 300]])).logits
    assert logits.shape == (1, 4, 512) and torch.isfinite(logits).all()


def test_llama_uses_llama3_rope_scaling_that_changes_some_frequencies(built):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(built["llama"])
    rope = rope_of(model.config)
    assert rope["rope_type"] == "llama3"
    assert (rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]) == (8.0, 1.0, 4.0)
    assert rope["original_max_position_embeddings"] == 256
    assert rope["rope_theta"] == 500000.0
    head_dim = 64 // 4
    plain = 1.0 / rope["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ratio = plain / model.model.rotary_emb.inv_freq
    kept, scaled = torch.isclose(ratio, torch.tensor(1.0)), torch.isclose(ratio, torch.tensor(8.0))
    assert kept.any() and scaled.any() and (~kept & ~scaled).any()  # all three branches of the llama3 rule


@pytest.mark.parametrize("arch", ["llama-tied", "llama-mha", "qwen2", "mistral"])
def test_other_archs_use_plain_rope(built, arch):
    from transformers import AutoConfig

    assert rope_of(AutoConfig.from_pretrained(built[arch])).get("rope_type", "default") == "default"


def test_llama_tied_shares_embeddings_and_stores_them_once(built):
    from transformers import AutoModelForCausalLM

    tied = AutoModelForCausalLM.from_pretrained(built["llama-tied"])
    assert tied.config.tie_word_embeddings is True
    assert tied.lm_head.weight.data_ptr() == tied.model.embed_tokens.weight.data_ptr()
    assert "lm_head.weight" not in all_tensors(built["llama-tied"])
    untied = AutoModelForCausalLM.from_pretrained(built["llama"])
    assert untied.config.tie_word_embeddings is False
    assert not torch.equal(untied.lm_head.weight, untied.model.embed_tokens.weight)
    assert "lm_head.weight" in all_tensors(built["llama"])


def test_qwen2_has_nonzero_qkv_biases(built):
    from transformers import AutoModelForCausalLM

    tensors = all_tensors(built["qwen2"])
    for layer in range(2):
        for proj in ("q_proj", "k_proj", "v_proj"):
            bias = tensors[f"model.layers.{layer}.self_attn.{proj}.bias"]
            assert bias.abs().min() > 0 and bias.std() > 0.05  # random, at the initializer's scale (0.15)
        assert f"model.layers.{layer}.self_attn.o_proj.bias" not in tensors
    model = AutoModelForCausalLM.from_pretrained(built["qwen2"])
    assert torch.equal(model.model.layers[0].self_attn.k_proj.bias, tensors["model.layers.0.self_attn.k_proj.bias"])
    assert not any(name.endswith(".bias") for name in all_tensors(built["llama"]))


def test_small_max_shard_size_gives_a_sharded_checkpoint_with_the_same_weights(built, tmp_path):
    from transformers import AutoModelForCausalLM

    sharded = create_random_checkpoint(tmp_path / "sharded", "llama", initializer_range=0.15, max_shard_size="200KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and all((sharded / shard).is_file() for shard in shards)
    assert not (sharded / "model.safetensors").exists()
    whole, parts = all_tensors(built["llama"]), all_tensors(sharded)
    assert whole.keys() == parts.keys() == set(index["weight_map"])
    assert all(torch.equal(whole[name], parts[name]) for name in whole)
    model = AutoModelForCausalLM.from_pretrained(sharded)
    assert torch.equal(model.model.norm.weight, whole["model.norm.weight"])


def test_same_seed_same_weights_other_seed_other_weights(built, tmp_path):
    again = all_tensors(create_random_checkpoint(tmp_path / "again", "qwen2", initializer_range=0.15))
    first = all_tensors(built["qwen2"])
    assert first.keys() == again.keys() and all(torch.equal(first[n], again[n]) for n in first)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    other = all_tensors(create_random_checkpoint(tmp_path / "other", "qwen2", seed=1, initializer_range=0.15))
    assert torch.equal(torch.rand(3), expected)  # the caller's random state is left alone
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (built["qwen2"] / "tokenizer.json").read_bytes()


def test_tokenizer_is_deterministic_across_processes(tokenizer):
    assert build_tokenizer().get_vocab() == tokenizer.get_vocab()
    code = ("import json; from tiers.checkpoints import build_tokenizer; "
            "print(json.dumps(sorted(build_tokenizer().get_vocab().items())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert [tuple(item) for item in json.loads(out)] == sorted(tokenizer.get_vocab().items())


def test_tokenizer_special_tokens(tokenizer):
    assert len(tokenizer) == 512
    assert tokenizer.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == SPECIAL_TOKENS
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|begin_of_text|>", "<|end_of_text|>", "<pad>")
    ids = tokenizer.encode("Hello")
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
    for special in SPECIAL_TOKENS:  # each special token is one token, never split
        assert tokenizer.encode(special, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(special)]
    assert len(build_tokenizer(8192)) < 8192  # a larger vocab_size is a ceiling: the corpus runs out of merges
    assert len(build_tokenizer(300)) == 300


ROUND_TRIP_TEXTS = ["", " ", "Hello, world!", "  leading and trailing  ", "tabs\tand\nnewlines\r\n",
                    "naïve café über", "日本語のテキスト", "emoji 🙂🚀👩‍👩‍👧", "e\u0301 (combining)", "\x00\x01 control",
                    "math ∑ √ ∞", "a" * 300, "def f(x):\n    return x ** 2  # comment"]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_tokenizer_round_trips_any_text(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert all(0 <= i < 512 for i in ids)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80))
def test_tokenizer_round_trips_random_text(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_chat_template_renders_a_conversation_with_the_generation_prompt(tokenizer, built):
    from transformers import AutoTokenizer

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": " Why is the sky blue? "}]
    body = ("<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhy is the sky blue?<|eot_id|>")
    prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == body + prompt
    assert tokenizer.apply_chat_template(messages, tokenize=False) == body
    loaded = AutoTokenizer.from_pretrained(built["llama"])
    assert loaded.chat_template == CHAT_TEMPLATE
    assert json.loads((built["llama"] / "tokenizer_config.json").read_text())["chat_template"] == CHAT_TEMPLATE
    ids = loaded.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids  # transformers 5.x returns a BatchEncoding
    assert ids.count(loaded.bos_token_id) == 1 and ids[0] == loaded.bos_token_id  # the template's bos only
    assert ids.count(loaded.convert_tokens_to_ids("<|eot_id|>")) == 4
    assert loaded.decode(ids) == body + prompt


def test_larger_initializer_range_gives_peaked_logits(built):
    """Token-exact greedy tests need top-2 logit gaps far above float noise."""
    from transformers import AutoModelForCausalLM

    ids = torch.randint(10, 512, (8, 64), generator=torch.Generator().manual_seed(0))
    for arch in ARCHS:
        model = AutoModelForCausalLM.from_pretrained(built[arch])
        with torch.no_grad():
            top2 = model(ids).logits.topk(2, dim=-1).values
        gap = top2[..., 0] - top2[..., 1]
        assert gap.median() > 0.05, arch
        assert (gap < 1e-4).float().mean() < 0.01, arch


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown arch 'gpt2'.*llama"):
        create_random_checkpoint(tmp_path / "x", "gpt2")
    with pytest.raises(ValueError, match="vocab_size 250 is smaller than the tokenizer's 262 tokens"):
        create_random_checkpoint(tmp_path / "y", "llama", vocab_size=250)  # 256 bytes + 6 special tokens


def test_config_overrides_reach_the_config(tmp_path):
    from transformers import AutoConfig

    path = create_random_checkpoint(tmp_path / "m", "mistral", sliding_window=64, rms_norm_eps=1e-5)
    config = AutoConfig.from_pretrained(path)
    assert (config.sliding_window, config.rms_norm_eps) == (64, 1e-5)
