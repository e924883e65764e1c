"""The transformers baselines of the engine benchmark: static-batch `generate`, its continuous batching manager
(what `generate_batch` runs) and greedy single-sequence decoding."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

STATIC_BATCH = 16
ENGINE_BATCHED_TOKENS = 2048  # the engine's default max_num_batched_tokens: hf-batch gets the same token budget


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    import transformers

    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"  # 5.x renamed it
    model = AutoModelForCausalLM.from_pretrained(path, **{dtype_arg: torch.float32}).eval()
    model.generation_config.eos_token_id = None  # ignore_eos
    model.generation_config.pad_token_id = 0
    return model



@torch.inference_mode()
def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.inference_mode()
def run_hf_static(model, workload) -> tuple[float, int]:
    """Returns the seconds and the number of tokens generated in all (padding rows included)."""
    generated = 0
    start = time.perf_counter()
    for i in range(0, len(workload), STATIC_BATCH):
        batch = workload[i:i + STATIC_BATCH]
        width = max(len(p) for p, _ in batch)
        longest = max(n for _, n in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in batch])
        out = model.generate(ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
        generated += out[:, width:].numel()
    return time.perf_counter() - start, generated


def hf_batch_configs(kv_bytes_per_token: int, workload):
    """transformers' continuous batching settings: its defaults, except the KV cache (the engine's CPU budget,
    min(1 GiB, RAM / 8): without psutil transformers sizes it from the whole RAM) and the batch token budget (the
    engine's 2048)."""
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig

    page_size = ContinuousBatchingConfig().page_size
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    kv_budget = min(1 << 30, ram // 8)
    num_blocks = max(1, kv_budget // (page_size * kv_bytes_per_token))
    cb_config = ContinuousBatchingConfig(num_blocks=num_blocks, max_batch_tokens=ENGINE_BATCHED_TOKENS)
    gen_config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,  # -1: no eos (ignore_eos)
                                  max_new_tokens=max(n for _, n in workload))
    return gen_config, cb_config


def run_hf_continuous(model, kv_bytes_per_token: int, workload) -> tuple[float, list[list[int]]]:
    """What `generate_batch` does (same manager, same workload hints), but with per-request max_new_tokens."""
    import inspect

    gen_config, cb_config = hf_batch_configs(kv_bytes_per_token, workload)
    kwargs: dict[str, Any] = dict(generation_config=gen_config, block=True, timeout=5,
                                  continuous_batching_config=cb_config)
    if "workload_hints" in inspect.signature(model.continuous_batching_context_manager).parameters:
        from transformers.generation.continuous_batching.utils import WorkloadHints

        kwargs["workload_hints"] = WorkloadHints(max_prompt_length=max(len(p) for p, _ in workload),
                                                 max_generated_length=max(n for _, n in workload),
                                                 num_requests=len(workload))
    # Not under inference_mode: the manager's thread updates tensors made here in place.
    with model.continuous_batching_context_manager(**kwargs) as manager:
        start = time.perf_counter()  # its start-up (cache allocation, warm-up) is not counted
        ids = [manager.add_request(p, max_new_tokens=n, eos_token_id=-1) for p, n in workload]
        if None in ids:
            raise RuntimeError("transformers' continuous batching manager refused requests")
        tokens: dict[str, list[int]] = {}
        while len(tokens) < len(ids):
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' continuous batching thread stopped: "
                                       f"{getattr(manager.background_thread_status, 'fatal_error', None)}")
                continue
            if result.is_finished():
                if getattr(result, "error", None):
                    raise RuntimeError(f"request {result.request_id} failed: {result.error}")
                tokens[result.request_id] = list(result.generated_tokens)
        seconds = time.perf_counter() - start
    outputs = [tokens[i] for i in ids]
    got = [len(t) for t in outputs]
    if got != [n for _, n in workload]:
        raise RuntimeError(f"generate_batch generated {sum(got)} tokens, not the {sum(n for _, n in workload)} asked")
    return seconds, outputs
