"""Shared by test_gguf.py and test_quantization.py: tiny GGUF files and a one-prompt forward of our model."""
from __future__ import annotations

import numpy as np
import torch

from tiers.attention.backend import BatchLayout
from tiers.attention.selector import get_attention_backend


def prefill_logits(model, token_ids: list[int], block_size: int = 16) -> torch.Tensor:
    """Logits of every position of one prompt through our LlamaForCausalLM (one prefill, a private KV cache)."""
    c = model.config
    n = len(token_ids)
    num_blocks = -(-n // block_size)
    dtype = model.norm.weight.dtype  # the activations (embed_tokens may be INT8)
    shape = (num_blocks, block_size, c.num_kv_heads, c.head_dim)
    kv_caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in model.layers]
    if model.rotary is None:
        model.build_rotary(max(n, 64), torch.device("cpu"))
    layout = BatchLayout(block_ids=[list(range(num_blocks))], seq_lens=[n], query_start_loc=[0, n],
                         slot_mapping=list(range(n)), block_size=block_size)
    meta = get_attention_backend("torch", torch.device("cpu")).prepare_metadata(layout, kv_caches,
                                                                               torch.device("cpu"), dtype)
    with torch.no_grad():
        hidden = model(torch.tensor(token_ids), torch.arange(n), meta)
        return model.compute_logits(hidden)


BYTE_TOKENS = None


def tiny_vocab() -> tuple[list[str], list[str], list[int]]:
    """A byte-level BPE vocabulary: three specials, the 256 byte symbols, and a few merges."""
    from tiers.models.gguf.tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + symbols + [m.replace(" ", "") for m in merges]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, merges, types


def permute_like_llama_cpp(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's permute, verbatim in numpy."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_writer(path, arch: str, *, hidden: int, heads: int, kv_heads: int, ffn: int, layers: int,
                tokenizer: bool = True):
    """A GGUFWriter holding a small llama-family model's metadata and (tokenizer) tiny_vocab's tokenizer, padded to
    a multiple of 32 tokens like real vocabularies; returns it and the vocabulary size."""
    import gguf

    tokens, merges, types = tiny_vocab()
    vocab = len(tokens) + (32 - len(tokens) % 32) % 32
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(50000.0)
    w.add_rope_dimension_count(hidden // heads)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens + [f"<pad{i}>" for i in range(vocab - len(tokens))])
        w.add_token_types(types + [4] * (vocab - len(types)))
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    return w, vocab


def write_gguf(path, *, arch: str = "llama", proj_type: str = "Q4_1", embed_type: str = "Q8_0", hidden: int = 64,
               heads: int = 4, kv_heads: int = 2, ffn: int = 128, layers: int = 2, tied: bool = True,
               tokenizer: bool = True, seed: int = 0, extra_tensors: dict | None = None,
               scale: float = 0.2) -> dict[str, np.ndarray]:
    """Writes a random llama-family GGUF as llama.cpp would (q/k rows permuted for llama); returns the original
    float weights under Hugging Face names (before quantization and permutation)."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    w, vocab = gguf_writer(path, arch, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers,
                           tokenizer=tokenizer)
    if tokenizer:
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    originals: dict[str, np.ndarray] = {}

    def add(gguf_name: str, hf_name: str, shape: tuple[int, ...], kind: str, permute_heads: int | None = None,
            norm: bool = False):
        x = (1 + 0.1 * rng.standard_normal(shape) if norm else scale * rng.standard_normal(shape)).astype(np.float32)
        originals[hf_name] = x
        stored = permute_like_llama_cpp(x, permute_heads) if permute_heads else x
        qtype = Q[kind]
        if qtype == Q.F32:
            w.add_tensor(gguf_name, stored)
        elif qtype == Q.F16:
            w.add_tensor(gguf_name, stored.astype(np.float16))
        else:
            w.add_tensor(gguf_name, gguf.quants.quantize(stored, qtype), raw_dtype=qtype)

    permute = arch in ("llama", "mistral")
    add("token_embd.weight", "model.embed_tokens.weight", (vocab, hidden), embed_type)
    for i in range(layers):
        p, h = f"blk.{i}", f"model.layers.{i}"
        add(f"{p}.attn_norm.weight", f"{h}.input_layernorm.weight", (hidden,), "F32", norm=True)
        add(f"{p}.ffn_norm.weight", f"{h}.post_attention_layernorm.weight", (hidden,), "F32", norm=True)
        add(f"{p}.attn_q.weight", f"{h}.self_attn.q_proj.weight", (heads * head_dim, hidden), proj_type,
            heads if permute else None)
        add(f"{p}.attn_k.weight", f"{h}.self_attn.k_proj.weight", (kv_heads * head_dim, hidden), proj_type,
            kv_heads if permute else None)
        add(f"{p}.attn_v.weight", f"{h}.self_attn.v_proj.weight", (kv_heads * head_dim, hidden), proj_type)
        if arch == "qwen2":
            add(f"{p}.attn_q.bias", f"{h}.self_attn.q_proj.bias", (heads * head_dim,), "F32")
            add(f"{p}.attn_k.bias", f"{h}.self_attn.k_proj.bias", (kv_heads * head_dim,), "F32")
            add(f"{p}.attn_v.bias", f"{h}.self_attn.v_proj.bias", (kv_heads * head_dim,), "F32")
        add(f"{p}.attn_output.weight", f"{h}.self_attn.o_proj.weight", (hidden, heads * head_dim), proj_type)
        add(f"{p}.ffn_gate.weight", f"{h}.mlp.gate_proj.weight", (ffn, hidden), proj_type)
        add(f"{p}.ffn_up.weight", f"{h}.mlp.up_proj.weight", (ffn, hidden), proj_type)
        add(f"{p}.ffn_down.weight", f"{h}.mlp.down_proj.weight", (hidden, ffn), proj_type)
    add("output_norm.weight", "model.norm.weight", (hidden,), "F32", norm=True)
    if not tied:
        add("output.weight", "lm_head.weight", (vocab, hidden), embed_type)
    for name, array in (extra_tensors or {}).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return originals


AWQ_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def awq_pack(codes: torch.Tensor) -> torch.Tensor:
    """uint8 [R, C] codes -> AutoAWQ's int32 [R, C / 8]: nibble j of word w holds column 8 w + AWQ_ORDER[j]."""
    from tiers.models.awq import AWQ_ORDER

    c = codes.to(torch.int32).view(codes.shape[0], -1, 8)
    word = torch.zeros(c.shape[:-1], dtype=torch.int32)
    for j, column in enumerate(AWQ_ORDER):
        word |= c[..., column] << (4 * j)
    return word


def awq_quantize(weight: torch.Tensor, group_size: int = 128):
    """AutoAWQ's round-to-nearest with zero points (its GEMM layout) of a float [out, in] weight: (qweight, qzeros,
    scales) and the float weight they stand for, (q - z) * s."""
    w = weight.detach().float().t().reshape(weight.shape[1] // group_size, group_size, weight.shape[0])
    lo, hi = w.amin(1), w.amax(1)  # [groups, out]
    scales = ((hi - lo).clamp_min(1e-5) / 15).half()
    s = scales.float()
    zeros = (-lo / s).round().clamp(0, 15)
    q = ((w / s.unsqueeze(1)).round() + zeros.unsqueeze(1)).clamp(0, 15)  # [groups, group, out]
    dequantized = ((q - zeros.unsqueeze(1)) * s.unsqueeze(1)).reshape(weight.shape[1], -1).t().contiguous()
    qweight = awq_pack(q.reshape(weight.shape[1], -1).to(torch.uint8))
    return qweight, awq_pack(zeros.to(torch.uint8)), scales, dequantized


def write_awq_checkpoint(src, dst, group_size: int = 128, config_group_size: int | None = None,
                         drop: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Re-saves the float Hugging Face folder `src` as an AutoAWQ GEMM checkpoint in `dst` (projections quantized,
    the rest fp16); returns {HF weight name: the float weight its quantized form stands for}. `drop`: tensor names
    to leave out (to test missing tensors); config_group_size: what config.json claims (default: group_size)."""
    import json
    import shutil
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors*"):
        f.unlink()
    state = {}
    for f in sorted(src.glob("*.safetensors")):
        state.update(load_file(f))
    out, reference = {}, {}
    for name, tensor in state.items():
        module = name.rpartition(".")[0]
        if name.endswith(".weight") and module.split(".", 3)[-1] in AWQ_PROJECTIONS:
            qweight, qzeros, scales, dequantized = awq_quantize(tensor, group_size)
            out.update({f"{module}.qweight": qweight, f"{module}.qzeros": qzeros, f"{module}.scales": scales})
            reference[name] = dequantized
        else:
            out[name] = tensor.half()
            reference[name] = tensor.half().float()
    save_file({k: v.contiguous() for k, v in out.items() if k not in drop}, str(dst / "model.safetensors"))
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "version": "gemm", "zero_point": True,
                                     "group_size": config_group_size or group_size}
    config["torch_dtype"] = "float16"
    config.pop("dtype", None)
    (dst / "config.json").write_text(json.dumps(config))
    return reference

