"""The transformers baselines of the engine benchmark: static-batch `generate`, its continuous batching manager
(what `generate_batch` runs) and greedy single-sequence decoding."""
from __future__ import annotations

import inspect
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

STATIC_BATCH = 16
ENGINE_BATCHED_TOKENS = 2048  # the engine's default max_num_batched_tokens: hf-batch gets the same token budget


def load_hf(path: Path, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    from transformers import AutoModelForCausalLM

    import transformers

    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"  # 5.x renamed it
    kwargs = {dtype_arg: dtype}
    if device != "cpu":
        try:  # straight onto the device
            model = AutoModelForCausalLM.from_pretrained(path, device_map=device, **kwargs)
        except (ImportError, ValueError):  # a transformers that needs accelerate for device_map
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model.eval()
    model.generation_config.eos_token_id = None  # ignore_eos
    model.generation_config.pad_token_id = 0
    return model


@torch.inference_mode()
def hf_greedy(model, prompt: list[int], n: int, **generate_kwargs: Any) -> list[int]:
    """generate_kwargs: e.g. cache_implementation="static" (on a GPU, transformers then compiles the forward)."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0, **generate_kwargs)
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


def kv_page_size(cb_config) -> int:
    """Tokens per page of transformers' paged KV cache. Its config calls it page_size in newer releases (5.24 keeps
    block_size as a deprecated alias, None unless set), block_size in 5.17 and before (on GenerationConfig before
    ContinuousBatchingConfig existed, defaulting to 32 there)."""
    for name in ("page_size", "block_size"):
        value = getattr(cb_config, name, None)
        if value:
            return int(value)
    return 32


def hf_batch_configs(kv_bytes_per_token: int, workload, kv_budget: int | None = None):
    """transformers' continuous batching settings: its defaults, except the KV cache (kv_budget bytes, by default
    the engine's CPU budget, min(1 GiB, RAM / 8): without psutil transformers sizes it from the whole RAM) and the
    batch token budget (the engine's 2048). Returns (generation config, continuous batching config); the latter is
    None on a transformers without ContinuousBatchingConfig, whose generation config carries the settings."""
    from transformers import GenerationConfig

    try:
        from transformers.generation import ContinuousBatchingConfig
    except ImportError:  # transformers 4.x: the settings are GenerationConfig attributes
        ContinuousBatchingConfig = None
    page_size = kv_page_size(ContinuousBatchingConfig() if ContinuousBatchingConfig else GenerationConfig())
    if kv_budget is None:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        kv_budget = min(1 << 30, ram // 8)
    num_blocks = max(1, kv_budget // (page_size * kv_bytes_per_token))
    cache = dict(num_blocks=num_blocks, max_batch_tokens=ENGINE_BATCHED_TOKENS)
    gen_config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,  # -1: no eos (ignore_eos)
                                  max_new_tokens=max(n for _, n in workload),
                                  **({} if ContinuousBatchingConfig else dict(cache, block_size=page_size)))
    return gen_config, ContinuousBatchingConfig(**cache) if ContinuousBatchingConfig else None


def _accepts(fn, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kwargs that fn names (signatures differ across transformers versions)."""
    import inspect

    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params}


@contextmanager
def _cb_manager(model, gen_config, cb_config, workload):
    """transformers' continuous batching manager, started; stopped on exit."""
    if hasattr(model, "continuous_batching_context_manager"):
        kwargs: dict[str, Any] = dict(generation_config=gen_config, block=True, timeout=5,
                                      continuous_batching_config=cb_config)
        if "workload_hints" in inspect.signature(model.continuous_batching_context_manager).parameters:
            from transformers.generation.continuous_batching.utils import WorkloadHints

            kwargs["workload_hints"] = WorkloadHints(max_prompt_length=max(len(p) for p, _ in workload),
                                                     max_generated_length=max(n for _, n in workload),
                                                     num_requests=len(workload))
        with model.continuous_batching_context_manager(**_accepts(model.continuous_batching_context_manager,
                                                                  kwargs)) as manager:
            yield manager
    elif hasattr(model, "init_continuous_batching"):  # transformers 4.x: no context manager yet
        manager = model.init_continuous_batching(generation_config=gen_config)
        manager.start()
        try:
            yield manager
        finally:
            manager.stop(block=True, timeout=5)
    else:
        import transformers

        raise RuntimeError(f"transformers {transformers.__version__} has no continuous batching (generate_batch)")


def _finished(result) -> bool:
    if hasattr(result, "is_finished"):
        return result.is_finished()
    return getattr(result.status, "name", str(result.status)) == "FINISHED"  # transformers 4.x


def run_hf_continuous(model, kv_bytes_per_token: int, workload, kv_budget: int | None = None
                      ) -> tuple[float, list[list[int]]]:
    """What `generate_batch` does (same manager, same workload hints), but with per-request max_new_tokens.
    kv_budget: the KV cache's bytes (see hf_batch_configs)."""
    gen_config, cb_config = hf_batch_configs(kv_bytes_per_token, workload, kv_budget)
    # Not under inference_mode: the manager's thread updates tensors made here in place.
    with _cb_manager(model, gen_config, cb_config, workload) as manager:
        start = time.perf_counter()  # its start-up (cache allocation, warm-up) is not counted
        add = manager.add_request
        ids = [add(p, **_accepts(add, dict(max_new_tokens=n, eos_token_id=-1))) for p, n in workload]
        if None in ids:
            raise RuntimeError("transformers' continuous batching manager refused requests")
        tokens: dict[str, list[int]] = {}
        while len(tokens) < len(ids):
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    status = getattr(manager, "background_thread_status", None)
                    raise RuntimeError("transformers' continuous batching thread stopped: "
                                       f"{getattr(status, 'fatal_error', None)}")
                continue
            if _finished(result):
                if getattr(result, "error", None):
                    raise RuntimeError(f"request {result.request_id} failed: {result.error}")
                tokens[result.request_id] = list(result.generated_tokens)
        seconds = time.perf_counter() - start
    outputs = [tokens[i] for i in ids]
    got = [len(t) for t in outputs]
    if got != [n for _, n in workload]:
        raise RuntimeError(f"generate_batch generated {sum(got)} tokens, not the {sum(n for _, n in workload)} asked")
    return seconds, outputs
