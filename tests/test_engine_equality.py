"""Token-exact greedy equality with Hugging Face transformers on tiny random checkpoints."""
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import ARCHS, DEVICES, TRITON_DEVICES
from tiers import Engine, SamplingParams, UnsupportedModelError

MAX_TOKENS = 24


def make_prompts(vocab_size: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(10, vocab_size, (37,), generator=g).tolist()  # shared, crosses two 16-token blocks
    lengths = [1, 3, 16, 29, 64]
    prompts = [prefix + torch.randint(10, vocab_size, (n,), generator=g).tolist() for n in lengths]
    prompts.append(torch.randint(10, vocab_size, (5,), generator=g).tolist())  # no shared prefix
    prompts.append(prefix[:16])  # exactly one full cached block
    return prompts


_hf_cache: dict[str, list[list[int]]] = {}


def hf_greedy(path, prompts: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    key = f"{path}:{max_tokens}:{hash(tuple(map(tuple, prompts)))}"
    if key not in _hf_cache:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        model.generation_config.eos_token_id = None
        outs = []
        for p in prompts:
            ids = model.generate(torch.tensor([p]), max_new_tokens=max_tokens, min_new_tokens=None, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
            outs.append(ids[0, len(p):].tolist())
        _hf_cache[key] = outs
    return _hf_cache[key]


def engine_greedy(engine: Engine, prompts, max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    outs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
    assert all(o.finish_reason == "length" for o in outs)
    return [o.token_ids for o in outs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_batch_matches_transformers(checkpoint_dir, arch, device):
    path = checkpoint_dir(arch)
    engine = Engine.from_pretrained(path, device=device, dtype="float32")
    prompts = make_prompts(engine.model_config.vocab_size)
    assert engine_greedy(engine, prompts) == hf_greedy(path, prompts)
    stats = engine.stats()
    assert stats.prefix_cache_hit_rate > 0  # the shared prefix was reused within the batch
    assert stats.num_used_blocks == 0 and stats.num_running == stats.num_waiting == 0


@pytest.mark.parametrize("device", DEVICES)
def test_chunked_prefill_matches_transformers(llama_path, device):
    engine = Engine.from_pretrained(llama_path, device=device, dtype="float32", max_num_batched_tokens=7)
    prompts = make_prompts(engine.model_config.vocab_size)
    assert engine_greedy(engine, prompts) == hf_greedy(llama_path, prompts)
    # 7 prompts, the longest 101 tokens, 7 tokens per step: chunked over many steps
    assert engine.stats().num_steps > 101 // 7 + MAX_TOKENS


@pytest.mark.parametrize("device", DEVICES)
def test_preemption_matches_transformers(llama_path, device):
    probe = Engine.from_pretrained(llama_path, max_model_len=128)
    block_bytes = probe.runner.kv_bytes_per_block
    engine = Engine.from_pretrained(llama_path, device=device, dtype="float32", max_model_len=128,
                                    kv_cache_bytes=10 * block_bytes,
                                    enable_prefix_caching=False)
    assert engine.stats().num_blocks == 10
    prompts = make_prompts(engine.model_config.vocab_size)
    assert engine_greedy(engine, prompts) == hf_greedy(llama_path, prompts)
    assert engine.stats().num_preemptions > 0
    assert engine.stats().num_free_blocks == 10


def test_preemption_with_prefix_cache_matches_transformers(llama_path):
    probe = Engine.from_pretrained(llama_path, max_model_len=128)
    engine = Engine.from_pretrained(llama_path, max_model_len=128, kv_cache_bytes=11 * probe.runner.kv_bytes_per_block,
                                    max_num_batched_tokens=13)
    prompts = make_prompts(engine.model_config.vocab_size)
    assert engine_greedy(engine, prompts) == hf_greedy(llama_path, prompts)
    assert engine.stats().num_preemptions > 0


def test_prefix_hits_give_identical_outputs(llama_path):
    cached = Engine.from_pretrained(llama_path)
    uncached = Engine.from_pretrained(llama_path, enable_prefix_caching=False)
    prompts = make_prompts(cached.model_config.vocab_size, seed=3)
    first = engine_greedy(cached, prompts)
    rate_after_first = cached.stats().prefix_cache_hit_rate
    second = engine_greedy(cached, prompts)  # now nearly every full block is a hit
    assert cached.stats().prefix_cache_hit_rate > rate_after_first
    assert first == second == engine_greedy(uncached, prompts)
    assert uncached.stats().prefix_cache_hit_rate == 0


def test_sharded_checkpoint_and_transformers_4x_config(checkpoint_dir, tmp_path):
    sharded = checkpoint_dir("llama", max_shard_size="200KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    engine = Engine.from_pretrained(sharded)
    prompts = make_prompts(engine.model_config.vocab_size)[:3]
    expected = hf_greedy(sharded, prompts)
    assert engine_greedy(engine, prompts) == expected
    # Rewrite the config the way transformers 4.x serialises it: rope_theta + rope_scaling at the top level.
    legacy = tmp_path / "legacy"
    shutil.copytree(sharded, legacy)
    config = json.loads((legacy / "config.json").read_text())
    rope = config.pop("rope_parameters", None) or {}
    config["rope_theta"] = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
    config["rope_scaling"] = {**rope, "type": rope.get("rope_type", "default")}
    config["rope_scaling"].pop("rope_type", None)
    (legacy / "config.json").write_text(json.dumps(config))
    legacy_engine = Engine.from_pretrained(legacy)
    assert legacy_engine.model_config.rope == engine.model_config.rope
    assert engine_greedy(legacy_engine, prompts) == expected


def test_unsupported_architecture_is_named(llama_path, tmp_path):
    bad = tmp_path / "gpt2"
    shutil.copytree(llama_path, bad)
    config = json.loads((bad / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel.*supported: LlamaForCausalLM"):
        Engine.from_pretrained(bad)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_triton_backend_in_the_engine_matches_torch_backend(llama_path, device):
    """The unified Triton kernels (interpreter on CPU) wired into the engine: same tokens as the PyTorch path,
    through prefill chunks with a cached prefix, decodes and a preemption-free mixed batch."""
    prompts = make_prompts(512)[:4]
    kw = dict(device=device, dtype="float32", max_model_len=128, max_num_batched_tokens=24)
    torch_engine = Engine.from_pretrained(llama_path, attention_backend="torch", **kw)
    triton_engine = Engine.from_pretrained(llama_path, attention_backend="triton", **kw)
    assert triton_engine.runner.attention_backend.name == "triton"
    assert engine_greedy(triton_engine, prompts, 6) == engine_greedy(torch_engine, prompts, 6)
