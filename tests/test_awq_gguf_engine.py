"""Quantized checkpoints through Engine.from_pretrained: AutoAWQ GEMM folders and GGUF files (tiny ones written
here), their weights, outputs, tokenizer / chat template, and the clear errors of bad input."""
import json

import numpy as np
import pytest
import torch

from conftest import INIT_RANGE
from quant_helpers import prefill_logits, write_awq_checkpoint, write_gguf
from test_engine_equality import engine_greedy, make_prompts
from tiers import Engine, SamplingParams
from tiers.checkpoints import create_random_checkpoint
from tiers.models.awq import AWQError
from tiers.models.gguf import GGUFError, load_gguf
from tiers.quantization import QuantizedLinear

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def float_dir(tmp_path_factory):
    """in_features 128 / 256: AWQ's groups of 128 divide every projection."""
    return create_random_checkpoint(tmp_path_factory.mktemp("awq") / "float", "llama", seed=0, hidden_size=128,
                                    intermediate_size=256, initializer_range=INIT_RANGE)


@pytest.fixture(scope="module")
def awq(float_dir):
    reference = write_awq_checkpoint(float_dir, float_dir.parent / "awq")
    return float_dir.parent / "awq", reference


def test_awq_loads_as_int4_with_the_packed_weights(awq):
    path, reference = awq
    dequantized = Engine.from_pretrained(path, quantization=None, dtype="float32", max_model_len=64).runner.model
    int4 = Engine.from_pretrained(path, dtype="float32", max_model_len=64).runner.model
    for i, layer in enumerate(dequantized.layers):
        ref = {k.split(f"layers.{i}.", 1)[1]: v for k, v in reference.items() if f".layers.{i}." in k}
        qkv = torch.cat([ref[f"self_attn.{p}_proj.weight"] for p in "qkv"])
        gate_up = torch.cat([ref["mlp.gate_proj.weight"], ref["mlp.up_proj.weight"]])
        pairs = [("self_attn.qkv_proj", qkv), ("self_attn.o_proj", ref["self_attn.o_proj.weight"]),
                 ("mlp.gate_up_proj", gate_up), ("mlp.down_proj", ref["mlp.down_proj.weight"])]
        for name, want in pairs:
            assert torch.equal(layer.get_submodule(name).weight, want), name  # exact: (q - z) * s
            q = int4.layers[i].get_submodule(name)
            assert isinstance(q, QuantizedLinear) and q.kernel in ("cpu_int4pack", "cpu_w4a8") and q.group_size == 128
            torch.testing.assert_close(q.dequantized_weight(), want, rtol=2 ** -7, atol=2e-3)
    assert torch.equal(dequantized.embed_tokens.weight, reference["model.embed_tokens.weight"])


def test_awq_greedy_equals_the_dequantized_float_engine(awq):
    """Greedy decoding on the INT4 kernels follows the float32 engine on the dequantized weights: every token the
    INT4 engine picks is, teacher-forced, the float engine's argmax or a near-tie within 5% of the logit range.
    (Token-exact runs fork within a few tokens: the kernels round their activations, and a random tiny model's
    greedy path has many near-ties.)

    The bounds, measured: correct kernels pick the argmax at 94-98% of the 168 tokens and a near-tie within
    0.1-1.7% of the range elsewhere (native and torch's kernels, the latter with every projection's output
    rounding perturbed by up to a bf16 unit, as other CPUs round); a 2% scale error gives 57% and a 25-34% miss,
    a neighbouring group's scale, a dropped zero point, shuffled blocks or swapped nibbles 0-32% and 57-100%."""
    path, _ = awq
    int4 = Engine.from_pretrained(path, dtype="float32")
    dequantized = Engine.from_pretrained(path, quantization=None, dtype="float32")
    prompts = make_prompts(int4.model_config.vocab_size)
    got = engine_greedy(int4, prompts)
    exact = total = 0
    for prompt, tokens in zip(prompts, got):
        logits = prefill_logits(dequantized.runner.model, prompt + tokens)[len(prompt) - 1:-1]
        picked = logits.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)
        margin = (logits.max(-1).values - picked) / (logits.max(-1).values - logits.min(-1).values)
        assert margin.max() < 0.05, margin
        exact += int((margin == 0).sum())
        total += len(tokens)
    assert exact / total >= 0.8
    default = Engine.from_pretrained(path, max_model_len=64, quantized_kernel="torch").runner.dtype
    assert default == torch.bfloat16  # quantized on torch's kernels: bf16 activations by default


def test_awq_weights_stream_layer_by_layer_and_equal_the_whole_file_conversion(awq, monkeypatch):
    """load_awq_weights converts each layer as soon as its three tensors are read (not after the whole file, which
    for a 70B checkpoint would sit in host memory), fuses qkv / gate_up as soon as their last shard is there, and
    gives exactly what converting the whole file at once gives."""
    from safetensors.torch import load_file

    from tiers.models import awq as awq_module
    from tiers.models.checkpoint import open_checkpoint
    from tiers.models.awq import awq_gemm_to_int4
    from tiers.quantization import Int4Weight

    path, _ = awq
    config = open_checkpoint(path).config
    reads, converted_after = [0], []
    real_iterate, real_convert = awq_module.iterate_weights, awq_module.awq_gemm_to_int4

    def counting_iterate(folder):
        for item in real_iterate(folder):
            reads[0] += 1
            yield item

    def recording_convert(*args, **kwargs):
        converted_after.append(reads[0])
        return real_convert(*args, **kwargs)

    monkeypatch.setattr(awq_module, "iterate_weights", counting_iterate)
    monkeypatch.setattr(awq_module, "awq_gemm_to_int4", recording_convert)
    got = awq_module.load_awq_weights(path, config, torch.bfloat16, "cpu")
    assert len(converted_after) == 7 * config.num_layers
    assert converted_after[0] < reads[0] // 2  # the first layer converted long before the last tensor is read

    state = load_file(str(path / "model.safetensors"))
    for i in range(config.num_layers):
        prefix = f"model.layers.{i}."
        int4 = {name: awq_gemm_to_int4(*(state[f"{prefix}{name}.{k}"] for k in ("qweight", "qzeros", "scales")))
                for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
        want = {"self_attn.qkv_proj": Int4Weight.cat([int4[f"self_attn.{p}_proj"] for p in "qkv"]),
                "self_attn.o_proj": int4["self_attn.o_proj"], "mlp.down_proj": int4["mlp.down_proj"],
                "mlp.gate_up_proj": Int4Weight.cat([int4["mlp.gate_proj"], int4["mlp.up_proj"]])}
        for name, w in want.items():
            have = got[f"layers.{i}.{name}.weight"]
            assert all(torch.equal(getattr(have, f), getattr(w, f)) for f in ("packed", "scales", "mins")), name
        assert got[f"layers.{i}.input_layernorm.weight"].dtype == torch.bfloat16
    assert torch.equal(got["embed_tokens.weight"], state["model.embed_tokens.weight"].to(torch.bfloat16))


def test_awq_bad_group_and_missing_tensors_are_clear_errors(float_dir, tmp_path):
    write_awq_checkpoint(float_dir, tmp_path / "g64", group_size=64)
    with pytest.raises(AWQError, match="AWQ group size 64 is not supported"):
        Engine.from_pretrained(tmp_path / "g64")
    write_awq_checkpoint(float_dir, tmp_path / "liar", group_size=64, config_group_size=128)
    with pytest.raises(AWQError, match="shapes do not agree"):
        Engine.from_pretrained(tmp_path / "liar")
    write_awq_checkpoint(float_dir, tmp_path / "missing", drop=("model.layers.1.mlp.up_proj.qzeros",))
    with pytest.raises(AWQError, match="layers.1.mlp.up_proj has no qzeros"):
        Engine.from_pretrained(tmp_path / "missing")
    config = json.loads((tmp_path / "missing" / "config.json").read_text())
    config["quantization_config"]["version"] = "gemv"
    (tmp_path / "missing" / "config.json").write_text(json.dumps(config))
    with pytest.raises(AWQError, match="version 'gemv' is not supported"):
        Engine.from_pretrained(tmp_path / "missing")


# --- GGUF ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, hidden=64, heads=4, kv_heads=2, ffn=128, scale=0.3)
    return path


def test_gguf_file_runs_natively_int4_with_its_tokenizer_and_chat_template(gguf_file):
    engine = Engine.from_pretrained(gguf_file, max_model_len=128)
    model = engine.runner.model
    assert engine.runner.dtype in (torch.float32, torch.bfloat16) and engine.path == gguf_file
    assert isinstance(model.layers[0].self_attn.qkv_proj, QuantizedLinear)
    assert model.layers[0].self_attn.qkv_proj.group_size == 32
    messages = [{"role": "user", "content": "hello world"}]
    ids = engine.apply_chat_template(messages)
    assert engine.tokenizer.decode(ids) == "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
    out = engine.generate(ids, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    assert len(out.token_ids) == 8 and out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_gguf_quantization_modes(gguf_file):
    checkpoint = load_gguf(gguf_file)  # one parse, several engines
    native = Engine(checkpoint, _config(dtype="float32"))
    as_int4 = Engine(checkpoint, _config(quantization="int4", dtype="float32"))
    dequantized = Engine(checkpoint, _config(quantization=None, dtype="float32"))
    int8 = Engine(checkpoint, _config(quantization="int8"))
    qkv = "layers.1.self_attn.qkv_proj"
    exact = checkpoint.weights[f"{qkv}.weight"].dequantize()
    assert torch.equal(dequantized.runner.model.get_submodule(qkv).weight, exact)
    for engine in (native, as_int4):
        layer = engine.runner.model.get_submodule(qkv)
        assert isinstance(layer, QuantizedLinear) and layer.mode == "int4" and layer.group_size == 32
        torch.testing.assert_close(layer.dequantized_weight(), exact, rtol=2 ** -7, atol=2e-3)
    assert int8.runner.model.get_submodule(qkv).mode == "int8"
    prompts = [[5, 70, 80, 90, 100, 110], [200, 210]]
    assert engine_greedy(native, prompts, 8) == engine_greedy(as_int4, prompts, 8)


def _config(**kw):
    from tiers import EngineConfig

    return EngineConfig(max_model_len=128, **kw)


def test_gguf_errors_surface_from_the_engine(tmp_path):
    write_gguf(tmp_path / "f.gguf", arch="falcon")
    with pytest.raises(GGUFError, match="unsupported GGUF architecture 'falcon'"):
        Engine.from_pretrained(tmp_path / "f.gguf")
    write_gguf(tmp_path / "t.gguf")
    data = (tmp_path / "t.gguf").read_bytes()
    (tmp_path / "t.gguf").write_bytes(data[:len(data) * 2 // 3])
    with pytest.raises(GGUFError, match="truncated"):
        Engine.from_pretrained(tmp_path / "t.gguf")
    write_gguf(tmp_path / "n.gguf", tokenizer=False)
    with pytest.raises(GGUFError, match="no tokenizer"):
        Engine.from_pretrained(tmp_path / "n.gguf")
    write_gguf(tmp_path / "i.gguf", extra_tensors={"blk.0.attn_q.bias": np.zeros(64, dtype=np.int8)})
    with pytest.raises(GGUFError, match="'blk.0.attn_q.bias' has type I8"):
        Engine.from_pretrained(tmp_path / "i.gguf")
    with pytest.raises(GGUFError, match="no GGUF file at"):
        Engine.from_pretrained(tmp_path / "absent.gguf")
    with pytest.raises(ValueError, match="quantization must be"):
        Engine.from_pretrained(tmp_path / "t.gguf", quantization="int3")  # options are checked first


def test_a_tier_can_point_at_a_gguf_file(gguf_file, tmp_path):
    from aio.settings import TierSettings
    from aio.tier_loader import TierLoadError, build_tier

    tier = build_tier("small", TierSettings(path=gguf_file, max_model_len=128, quantization="none"))
    assert tier.model == "tiny" and tier.max_model_len == 128
    assert not any(isinstance(m, QuantizedLinear) for m in tier.engine.runner.model.modules())
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(TierLoadError, match="neither a checkpoint folder .* nor a .gguf file"):
        build_tier("small", TierSettings(path=tmp_path / "notes.txt"))
