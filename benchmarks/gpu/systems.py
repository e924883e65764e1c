"""What the GPU benchmark's parts share: the run's context (device, settings, checkpoints, the report, the time
left), one engine kept loaded between rows that ask for the same options, and guarded rows (a failure is recorded
and the run goes on: nobody is there to debug it)."""
from __future__ import annotations

import gc
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.engine import batch1
from benchmarks.gpu.checkpoints import Built, build_awq, build_llama
from benchmarks.gpu.report import Report, Row
from benchmarks.gpu.shapes import ModelShape, Settings, decode_step_bytes


def free_memory(compiled: bool = False) -> None:
    """compiled: also drop torch.compile's caches (a compiled model's CUDA graphs hold its weights)."""
    if compiled and hasattr(torch, "compiler"):
        torch.compiler.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class EngineSlot:
    """At most one loaded engine; the next request with the same checkpoint and options reuses it."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.engine: Any = None
        self.load_s = 0.0

    def get(self, path: Path, **options: Any) -> tuple[Any, float, bool]:
        """(engine, seconds its Engine.from_pretrained took, whether it was already loaded)."""
        from tiers import Engine

        key = (str(path), tuple(sorted((k, repr(v)) for k, v in options.items())))
        if key == self.key:
            return self.engine, self.load_s, True
        self.release()
        start = time.perf_counter()
        self.engine = Engine.from_pretrained(path, **options)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.key, self.load_s = key, time.perf_counter() - start
        return self.engine, self.load_s, False

    def release(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.key = None, None
        free_memory()


@dataclass
class Bench:
    device: str  # "cuda" or "cpu" (--smoke without a GPU)
    settings: Settings
    work_dir: Path
    report: Report
    deadline: float | None = None  # time.perf_counter() value past which rows are skipped
    slot: EngineSlot = field(default_factory=EngineSlot)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def float_dtype(self) -> torch.dtype:
        """The checkpoints' and the timed systems' float type: bf16 on a GPU, float32 on CPU (--smoke)."""
        return torch.bfloat16 if self.cuda else torch.float32

    def shape(self, name: str) -> ModelShape:
        return self.settings.shapes[name]

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def checkpoint(self, part: str, name: str) -> Path:
        """The model's checkpoint, built (or found) under work_dir; the build is a row of `part`."""
        shape = self.shape(name)
        path = self.work_dir / name
        if name.endswith("-awq"):
            built = build_awq(path, shape, self.device, self.settings.seed)
        else:
            built = build_llama(path, shape, self.device, self.float_dtype, self.settings.seed)
        self._record_build(part, name, built)
        return built.path

    def _record_build(self, part: str, name: str, built: Built) -> None:
        if built.reused and name in self.report.checkpoints:
            return  # built (or found) by an earlier part of this run, and said so there
        self.report.checkpoints[name] = {"path": built.path.name, "gb": round(built.bytes / 1e9, 2),
                                         "build_s": round(built.seconds, 1), "reused": built.reused}
        self.report.add(Row(part, name, "checkpoint", "build s", round(built.seconds, 1), "s",
                            note=f"{built.bytes / 1e9:.1f} GB on disk" + (", already built" if built.reused else "")))

    def engine_options(self, eager: bool = False, **extra: Any) -> dict[str, Any]:
        """Engine.from_pretrained options: on the GPU bf16 and eager or CUDA graphs; on CPU the engine's defaults
        (enforce_eager is not passed: there are no graphs off CUDA)."""
        options: dict[str, Any] = dict(device=self.device, max_model_len=self.settings.max_model_len,
                                       seed=self.settings.seed)
        if self.cuda:
            options.update(dtype="bfloat16", enforce_eager=eager)
        options.update(extra)
        return options

    def guarded(self, part: str, model: str, system: str, metric: str, fn: Callable[[], Row | None]) -> Row | None:
        """Runs fn (which adds its own rows, returns the main one); a failure becomes a row with its reason."""
        if self.out_of_time():
            return self.report.add(Row(part, model, system, metric, skipped="out of --budget-s"))
        try:
            return fn()
        except Exception as exc:  # recorded, and the run goes on
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            self.report.details.setdefault("errors", []).append(
                {"part": part, "model": model, "system": system, "traceback": traceback.format_exc()[-4000:]})
        # out of the except block: the traceback's frames (a half-built engine, a model) are gone, their memory
        # can be freed
        free_memory()
        return self.report.add(Row(part, model, system, metric, error=message))

    def skip(self, part: str, model: str, system: str, metric: str, reason: str) -> Row:
        return self.report.add(Row(part, model, system, metric, skipped=reason))

    # ---------------------------------------------------------------------------------------------- decode rows

    def step_bytes(self, shape: ModelShape, int4: bool = False) -> int:
        s = self.settings
        return decode_step_bytes(shape, self.float_dtype.itemsize, s.prompt_len + s.new_tokens / 2, int4=int4)

    def decode_row(self, part: str, model: str, system: str, decode: Callable[[int], Any], step_bytes: int,
                   warmup: tuple[int, ...] = (8,), note: str = "", repeats: int | None = None) -> Row:
        """Batch-1 decode tokens/s (benchmarks.engine.batch1: the prefill cancels out; best of `repeats`, default
        the settings') and the share of the copy bandwidth that reading step_bytes per token takes."""
        s = self.settings
        rate = batch1({system: decode}, s.prompt_len, s.new_tokens, repeats=repeats or s.repeats,
                      warmup=warmup)[system]
        copy = self.report.copy_gb_s
        hbm = step_bytes * rate / (copy * 1e9) if copy else None
        notes = [f"{1e3 / rate:.2f} ms/step", f"{step_bytes / 1e9:.2f} GB/step", note]
        return self.report.add(Row(part, model, system, "decode tok/s", rate, "tok/s", hbm,
                                   ", ".join(n for n in notes if n)))


def engine_decoder(engine: Any, prompt: list[int]) -> Callable[[int], Any]:
    from tiers import SamplingParams

    return lambda n: engine.generate([prompt], SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))


def engine_greedy(engine: Any, prompts: list[list[int]], n: int) -> list[list[int]]:
    from tiers import SamplingParams

    outs = engine.generate(prompts, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    return [list(o.token_ids) for o in outs]


def run_engine_tracking_kv(engine: Any, workload: list[tuple[list[int], int]]) -> dict[str, Any]:
    """Every request at once, stepping the engine here so that its KV blocks in use can be read (Engine.stats)
    after every step: the peak is a lower bound by at most the blocks of the sequences finishing in that step.

    Each step is timed and put in one of two phases (split_phases): prefill, a step that begins with prompt tokens
    still to compute (the first, and any while Scheduler.num_pending_prefill_tokens() > 0: decode rows of other
    requests may ride along), and decode, every other step, which samples one token for each running sequence (no
    speculation here)."""
    from tiers import SamplingParams

    generated: dict[str, int] = {}
    errors: list[str] = []

    def collect(out: Any) -> None:
        if out.finished:
            generated[out.request_id] = len(out.token_ids)
            if out.finish_reason == "error":
                errors.append(out.error or "unknown error")

    start = time.perf_counter()
    for prompt, n in workload:
        engine.add_request(prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True), on_output=collect)
    peak = 0
    stats = engine.stats()
    scheduler = engine.scheduler
    steps: list[tuple[bool, float, int]] = []  # (prefill, seconds, decode rows)
    while engine.has_unfinished_requests():
        prefill = not steps or scheduler.num_pending_prefill_tokens() > 0
        rows = 0 if prefill else len(scheduler.running)
        step_start = time.perf_counter()
        engine.step()
        steps.append((prefill, time.perf_counter() - step_start, rows))
        stats = engine.stats()
        peak = max(peak, stats.num_used_blocks)
    seconds = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    want = sum(n for _, n in workload)
    if sum(generated.values()) != want:
        raise RuntimeError(f"the engine generated {sum(generated.values())} tokens, not the {want} asked")
    return {"seconds": seconds, "output_tokens": want, "peak_blocks": peak, "num_blocks": stats.num_blocks,
            "peak_usage": peak / stats.num_blocks, "preemptions": stats.num_preemptions,
            **split_phases(steps, sum(len(p) for p, _ in workload), want)}


def split_phases(steps: list[tuple[bool, float, int]], prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """Prefill and decode figures from timed steps (prefill?, seconds, decode rows): the seconds and steps of each,
    prompt tokens / prefill seconds, and the decode steps' tokens (a token per row) / decode seconds; the tokens the
    prefill steps sampled (every request's first among them) are the rest of output_tokens."""
    prefill_s = sum(t for p, t, _ in steps if p)
    decode_s = sum(t for p, t, _ in steps if not p)
    decode_tokens = sum(n for p, _, n in steps if not p)
    decode_steps = sum(1 for p, _, _ in steps if not p)
    return {"prefill_s": prefill_s, "prefill_steps": len(steps) - decode_steps, "prompt_tokens": prompt_tokens,
            "prefill_tok_s": prompt_tokens / prefill_s if prefill_s else None,
            "prefill_output_tokens": output_tokens - decode_tokens,
            "decode_s": decode_s, "decode_steps": decode_steps, "decode_tokens": decode_tokens,
            "decode_tok_s": decode_tokens / decode_s if decode_s else None,
            "mean_decode_batch": decode_tokens / max(1, decode_steps)}


@torch.inference_mode()
def hf_greedy_with_logits(model: Any, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy tokens and the logits each was picked from ([n, vocab], float32, on the host)."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.stack([step[0].float() for step in out.logits]).cpu()


def first_mismatch(got: list[int], reference: list[int], logits: torch.Tensor) -> dict[str, Any]:
    """Where `got` first leaves the reference's greedy tokens, and the reference's logit margin (top1 - top2)
    there; with no mismatch, the smallest margin over the tokens compared."""
    top2 = logits.topk(2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1]).tolist()
    at = next((i for i, (a, b) in enumerate(zip(got, reference)) if a != b), None)
    if at is None and len(got) != len(reference):
        at = min(len(got), len(reference))
    return {"tokens": len(reference), "first_mismatch": at,
            "margin_at_mismatch": None if at is None or at >= len(margins) else margins[at],
            "min_margin": min(margins) if margins else None}
