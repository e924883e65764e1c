"""Random checkpoints built where the benchmark runs (never carried): Llama shapes in bf16 (transformers' own
random init, on the GPU) and an AutoAWQ INT4 "GEMM" checkpoint written directly as packed int32 qweight / qzeros
and fp16 scales, shard by shard, so no float copy of a 70B model ever exists.

A folder is built under a temporary name, then renamed and given a MARKER file (the shape and seed it was built
for): a builder skips a folder whose marker matches, and rebuilds one without (a run killed mid-build).
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch

from benchmarks.gpu.shapes import AWQ_GROUP_SIZE, ModelShape

MARKER = ".complete"
SHARD_BYTES = 4 << 30
AWQ_SCALE_SPREAD = (0.75, 1.25)  # a layer's scales: 1 / (8 sqrt(in_features)) times a uniform factor in this range


@dataclass
class Built:
    path: Path
    seconds: float  # 0 when the folder was already there
    bytes: int
    reused: bool


def _marker(shape: ModelShape, kind: str, seed: int) -> str:
    return json.dumps({"kind": kind, "seed": seed, "shape": asdict(shape)}, sort_keys=True)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _reuse_or_start(path: Path, marker: str, needed: int) -> tuple[Path, Built | None]:
    if (path / MARKER).is_file() and (path / MARKER).read_text() == marker:
        return path, Built(path, 0.0, folder_bytes(path), True)
    for stale in (path, path.with_name(path.name + ".partial")):
        if stale.exists():
            shutil.rmtree(stale)
    make_room(path.parent, needed, keep=path)
    tmp = path.with_name(path.name + ".partial")
    tmp.mkdir(parents=True)
    return tmp, None


def _finish(tmp: Path, path: Path, marker: str, start: float) -> Built:
    tmp.rename(path)
    (path / MARKER).write_text(marker)
    return Built(path, time.perf_counter() - start, folder_bytes(path), False)


def make_room(root: Path, needed: int, keep: Path) -> None:
    """Removes other finished checkpoints under `root` (largest first) until `needed` bytes plus 2 GiB are free;
    raises when even that is not enough. (The GPU machine's disk holds the 70B and 8B checkpoints barely or not
    at all together.)"""
    root.mkdir(parents=True, exist_ok=True)
    margin = 2 << 30
    others = sorted((p for p in root.iterdir() if p.is_dir() and p != keep and (p / MARKER).is_file()),
                    key=folder_bytes, reverse=True)
    while shutil.disk_usage(root).free < needed + margin and others:
        victim = others.pop(0)
        print(f"  removing {victim} ({folder_bytes(victim) / 1e9:.1f} GB) to make room", flush=True)
        shutil.rmtree(victim)
    free = shutil.disk_usage(root).free
    if free < needed + margin:
        raise OSError(f"{root}: {free / 1e9:.1f} GB free, a checkpoint of {needed / 1e9:.1f} GB needs "
                      f"{(needed + margin) / 1e9:.1f} GB")


def _tokenizer_and_config(shape: ModelShape) -> tuple[object, object]:
    from transformers import LlamaConfig

    from tiers.checkpoints import build_tokenizer, rope_for_installed_transformers, special_token_ids

    tokenizer = build_tokenizer(512)  # the model's other ids have no token: prompts are token ids
    ids = special_token_ids(tokenizer)
    kwargs = dict(shape.hf_config(), bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"])
    return tokenizer, LlamaConfig(**rope_for_installed_transformers(kwargs))


def build_llama(path: Path, shape: ModelShape, device: str, dtype: torch.dtype, seed: int = 0) -> Built:
    """A random Llama of `shape` (transformers' init, seeded) built on `device`, saved in `dtype` (safetensors,
    5 GB shards) with a tokenizer."""
    from transformers import LlamaForCausalLM

    from tiers.checkpoints import save_tokenizer

    marker = _marker(shape, f"llama-{str(dtype).removeprefix('torch.')}", seed)
    tmp, built = _reuse_or_start(path, marker, shape.num_params * dtype.itemsize)
    if built:
        return built
    start = time.perf_counter()
    tokenizer, config = _tokenizer_and_config(shape)
    torch.manual_seed(seed)  # the CPU's and every GPU's generator
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(dtype).eval()
    model = model.to("cpu")  # save_pretrained then writes plain host tensors
    model.save_pretrained(tmp, max_shard_size="5GB")
    del model
    save_tokenizer(tmp, tokenizer)
    return _finish(tmp, path, marker, start)


# ------------------------------------------------------------------------------------------------ AutoAWQ INT4


def awq_tensor_specs(shape: ModelShape, group: int = AWQ_GROUP_SIZE) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, kind) of every tensor of an AutoAWQ GEMM checkpoint of `shape`, in file order. kind: embed,
    norm, qweight (int32 [in, out/8]), qzeros (int32 [in/group, out/8]) or scales (fp16 [in/group, out])."""
    specs: list[tuple[str, tuple[int, ...], str]] = [("model.embed_tokens.weight", (shape.vocab, shape.hidden),
                                                      "embed")]
    for i in range(shape.layers):
        prefix = f"model.layers.{i}."
        specs += [(prefix + "input_layernorm.weight", (shape.hidden,), "norm"),
                  (prefix + "post_attention_layernorm.weight", (shape.hidden,), "norm")]
        for name, (k, n) in shape.projections.items():
            if k % group or n % 8:
                raise ValueError(f"{shape.name}: {name} [{k} -> {n}] does not fit AWQ groups of {group}")
            specs += [(f"{prefix}{name}.qweight", (k, n // 8), "qweight"),
                      (f"{prefix}{name}.qzeros", (k // group, n // 8), "qzeros"),
                      (f"{prefix}{name}.scales", (k // group, n), "scales")]
    specs.append(("model.norm.weight", (shape.hidden,), "norm"))
    if not shape.tied:
        specs.append(("lm_head.weight", (shape.vocab, shape.hidden), "embed"))
    return specs


_KIND_BYTES = {"embed": 2, "norm": 2, "qweight": 4, "qzeros": 4, "scales": 2}


def random_awq_tensor(kind: str, size: tuple[int, ...], g: torch.Generator, device: str,
                      in_features: int = 0) -> torch.Tensor:
    """Random codes (every nibble uniform in 0..15), zero points 7 or 8, scales 1 / (8 sqrt(in_features)) times
    AWQ_SCALE_SPREAD, so a layer's output stays about the size of its normalised input and 80 layers stay finite;
    embeddings N(0, 0.02), norms 1."""
    numel = math.prod(size)
    if kind == "qweight":
        return torch.randint(0, 256, (4 * numel,), generator=g, device=device, dtype=torch.uint8).view(
            torch.int32).view(size)
    if kind == "qzeros":
        nibbles = 7 + torch.randint(0, 2, (8 * numel,), generator=g, device=device, dtype=torch.uint8)
        return (nibbles[0::2] | (nibbles[1::2] << 4)).view(torch.int32).view(size)
    if kind == "scales":
        lo, hi = AWQ_SCALE_SPREAD
        factor = torch.rand(size, generator=g, device=device) * (hi - lo) + lo
        return (factor / (8 * math.sqrt(in_features))).half()
    if kind == "norm":
        return torch.ones(size, dtype=torch.float16, device=device)
    return (torch.randn(size, generator=g, device=device) * 0.02).half()


def _shards(specs: list[tuple[str, tuple[int, ...], str]], limit: int
            ) -> Iterator[list[tuple[str, tuple[int, ...], str]]]:
    shard: list[tuple[str, tuple[int, ...], str]] = []
    size = 0
    for spec in specs:
        nbytes = math.prod(spec[1]) * _KIND_BYTES[spec[2]]
        if shard and size + nbytes > limit:
            yield shard
            shard, size = [], 0
        shard.append(spec)
        size += nbytes
    if shard:
        yield shard


def build_awq(path: Path, shape: ModelShape, device: str, seed: int = 0, shard_bytes: int = SHARD_BYTES) -> Built:
    """A random AutoAWQ GEMM checkpoint of `shape` (4-bit, groups of 128, zero points): each tensor generated on
    `device`, moved to the host and written with its shard (at most `shard_bytes` in host memory at a time)."""
    from safetensors.torch import save_file

    from tiers.checkpoints import save_tokenizer

    specs = awq_tensor_specs(shape)
    total = sum(math.prod(s) * _KIND_BYTES[k] for _, s, k in specs)
    marker = _marker(shape, "awq-gemm", seed)
    tmp, built = _reuse_or_start(path, marker, total)
    if built:
        return built
    start = time.perf_counter()
    tokenizer, config = _tokenizer_and_config(shape)
    config.save_pretrained(tmp)
    raw = json.loads((tmp / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": AWQ_GROUP_SIZE, "version": "gemm",
                                  "zero_point": True}
    raw["torch_dtype"] = "float16"
    raw["architectures"] = ["LlamaForCausalLM"]
    raw.pop("dtype", None)
    (tmp / "config.json").write_text(json.dumps(raw, indent=2))
    save_tokenizer(tmp, tokenizer)
    g = torch.Generator(device=device).manual_seed(seed)
    in_features = {f"{name}.scales": k for name, (k, _) in shape.projections.items()}
    groups = list(_shards(specs, shard_bytes))
    weight_map: dict[str, str] = {}
    for n, group in enumerate(groups, 1):
        file = f"model-{n:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for name, size, kind in group:
            k = in_features.get(name.split(".", 3)[-1], 0)
            tensors[name] = random_awq_tensor(kind, size, g, device, k).cpu()
            weight_map[name] = file
        save_file(tensors, str(tmp / file), metadata={"format": "pt"})
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return _finish(tmp, path, marker, start)
