"""The GPU benchmark's parts. Each adds its rows to the report as it measures them; a row that fails is recorded
with its reason and the part goes on."""
from __future__ import annotations

import functools
from typing import Any, Callable

from benchmarks.engine import copy_bandwidth, make_workload, run_engine
from benchmarks.gpu.report import Row
from benchmarks.gpu.systems import (Bench, engine_decoder, engine_greedy, first_mismatch, free_memory,
                                    hf_greedy_with_logits, run_engine_tracking_kv)
from benchmarks.hf_baselines import hf_greedy, load_hf, run_hf_continuous

NEEDS_CUDA = "needs CUDA"
# The bf16 8B engine of decode8b's graphs row, throughput and correctness (kept loaded between them): half the
# GPU for weights + KV, so a transformers model fits beside it
SHARED_KV_FRACTION = 0.5
DECODE_KV_BYTES = 2 << 30  # other batch-1 engines: one 384-token sequence needs far less
AWQ_KV_FRACTION = 0.85  # 70B INT4: ~42 GB of weights; max_num_seqs 64 x 1024 tokens caps the pool at ~21 GB anyway
AWQ_MAX_SEQS = 64


def part_copy(bench: Bench) -> None:
    if not bench.cuda:
        bench.skip("copy", "-", "torch copy_", "copy GB/s", NEEDS_CUDA)
        return

    def measure() -> Row:
        size = bench.settings.copy_bytes
        bench.report.copy_gb_s = copy_bandwidth(size, repeats=10, device=bench.device) / 1e9
        return bench.report.add(Row("copy", "-", "torch copy_", "copy GB/s", bench.report.copy_gb_s, "GB/s",
                                    note=f"{size / 2**20:.0f} MiB, best of 10, read + write, device to device"))

    bench.guarded("copy", "-", "torch copy_", "copy GB/s", measure)


def _prompt(bench: Bench, vocab: int) -> list[int]:
    n = bench.settings.prompt_len
    return make_workload(1, 7, vocab, (n, n), (1, 1))[0][0]


def _engine_decode(bench: Bench, part: str, name: str, system: str, path, int4: bool = False,
                   repeats: int | None = None, **options: Any) -> Callable[[], Row]:
    def run() -> Row:
        engine, load_s, reused = bench.slot.get(path, **options)
        shape = bench.shape(name)
        note = "loaded earlier" if reused else f"load {load_s:.1f} s"
        return bench.decode_row(part, name, system, engine_decoder(engine, _prompt(bench, shape.vocab)),
                                bench.step_bytes(shape, int4=int4), note=note, repeats=repeats)
    return run


def shared_engine_options(bench: Bench) -> dict[str, Any]:
    """The bf16 8B engine with CUDA graphs (all default sizes) that decode8b, throughput and correctness share."""
    extra = dict(kv_cache_fraction=SHARED_KV_FRACTION) if bench.cuda else {}
    return bench.engine_options(eager=False, **extra)


def part_decode(bench: Bench, part: str, name: str) -> None:
    """Batch-1 decode of the bf16 model: the engine eager, the engine with CUDA graphs, transformers generate
    with a static cache (compiled)."""
    path = bench.checkpoint(part, name)
    decode_kv = dict(kv_cache_bytes=DECODE_KV_BYTES) if bench.cuda else {}
    bench.guarded(part, name, "engine eager", "decode tok/s", _engine_decode(
        bench, part, name, "engine eager", path, **bench.engine_options(eager=True, **decode_kv)))
    if bench.cuda:
        options = shared_engine_options(bench) if name == "llama-8b" else bench.engine_options(eager=False, **decode_kv)
        bench.guarded(part, name, "engine CUDA graphs", "decode tok/s",
                      _engine_decode(bench, part, name, "engine CUDA graphs", path, **options))
    else:
        bench.skip(part, name, "engine CUDA graphs", "decode tok/s", NEEDS_CUDA)
    if name != "llama-8b":
        bench.slot.release()
    if not bench.cuda:
        bench.skip(part, name, "transformers static cache", "decode tok/s", NEEDS_CUDA + " (torch.compile)")
        return

    def hf_static() -> Row:
        model = load_hf(path, bench.float_dtype, bench.device)
        try:
            prompt = _prompt(bench, bench.shape(name).vocab)
            decode = lambda n: hf_greedy(model, prompt, n, cache_implementation="static")  # noqa: E731
            # the longest call first: transformers keeps the largest static cache, so one compiled graph serves all
            return bench.decode_row(part, name, "transformers static cache", decode,
                                    bench.step_bytes(bench.shape(name)), warmup=(bench.settings.new_tokens, 8),
                                    note="first call compiles")
        finally:
            del model
            free_memory(compiled=True)

    bench.guarded(part, name, "transformers static cache", "decode tok/s", hf_static)


def part_int4(bench: Bench) -> None:
    """Batch-1 decode of the engine with every projection quantized to INT4 at load time (round-to-nearest, groups
    of 128) from the bf16 checkpoints: eager (one run: the figure that matters is the graphs') and CUDA graphs; then
    the 8B's 128 requests on that CUDA-graph engine (its KV pool as the bf16 throughput engine's), split into
    prefill and decode."""
    for name in ("llama-1b", "llama-8b"):
        path = bench.checkpoint("int4", name)
        decode_kv = dict(kv_cache_bytes=DECODE_KV_BYTES) if bench.cuda else {}
        for eager in (True, False):
            system = "engine INT4 " + ("eager" if eager else "CUDA graphs")
            if not eager and not bench.cuda:
                bench.skip("int4", name, system, "decode tok/s", NEEDS_CUDA)
                continue
            kv = dict(kv_cache_fraction=SHARED_KV_FRACTION) if name == "llama-8b" and bench.cuda else decode_kv
            options = bench.engine_options(eager=eager, quantization="int4", **kv)
            bench.guarded("int4", name, system, "decode tok/s",
                          _engine_decode(bench, "int4", name, system, path, int4=True, repeats=1 if eager else None,
                                         **options))
        if name == "llama-8b":
            options = bench.engine_options(eager=not bench.cuda, quantization="int4", **(
                dict(kv_cache_fraction=SHARED_KV_FRACTION) if bench.cuda else {}))
            n = bench.settings.num_requests
            system = f"engine INT4, {n} requests"
            rows = functools.partial(_requests_rows, bench, "int4", name, system, path, options, n,
                                     compare=("throughput", f"engine, {n} requests"))
            bench.guarded("int4", name, system, "throughput tok/s", rows)
        bench.slot.release()


def _requests_rows(bench: Bench, part: str, model: str, system: str, path, options: dict[str, Any], n: int,
                   seed_offset: int = 2, compare: tuple[str, str] | None = None) -> Row:
    """n requests of the throughput workload on the engine (loaded with `options`, or the one already loaded), all
    at once: the output tokens/s in all, then prefill and decode apart (rows "prefill tok/s" and "decode tok/s
    (batched)", details under details.phases). compare: (part, system) of a row to state the ratio to."""
    engine, _, _ = bench.slot.get(path, **options)
    vocab = bench.shape(model).vocab
    _warm_prefill_paths(bench, engine, vocab)
    run_engine(engine, make_workload(4, bench.settings.seed + 99, vocab, (16, 48), (4, 8)))
    result = run_engine_tracking_kv(engine, _workload(bench, n, vocab, seed_offset=seed_offset))
    bench.report.details.setdefault("phases", {})[f"{part} {model} {system}"] = result
    note = f"KV peak {result['peak_usage']:.0%}, {result['preemptions']} preemptions"
    if compare:
        other = next((r for r in bench.report.rows if (r.part, r.system) == compare and r.value), None)
        if other:
            note += f"; {result['output_tokens'] / result['seconds'] / other.value:.2f}x {compare[1]} ({compare[0]})"
    row = _throughput_row(bench, part, model, system, result["seconds"], result["output_tokens"], note)
    phases = (("prefill", "prefill tok/s", result["prefill_tok_s"],
               (f"{result['prompt_tokens']:,} prompt tokens in {result['prefill_s']:.1f} s, "
                f"{result['prefill_steps']} steps (decode rows riding along: {result['prefill_output_tokens']:,} "
                "tokens)")),
              ("decode", "decode tok/s (batched)", result["decode_tok_s"],
               (f"{result['decode_tokens']:,} tokens in {result['decode_s']:.1f} s, {result['decode_steps']} "
                f"steps, {result['mean_decode_batch']:.1f} rows a step on average")))
    for phase, metric, value, phase_note in phases:
        bench.report.add(Row(part, model, f"{system}: {phase}", metric, value, "tok/s", note=phase_note))
    return row


# Prompt lengths run alone before a timed run of many requests, so that every matmul path a prefill step takes is
# compiled before the clock starts (Triton compiles a kernel config on its first call): the INT4 tl.dot's
# 128-row and larger tiles (65-128 and 129-256 rows: decode graphs stop at max_num_seqs rows) and the dense path
# (over 256 rows).
PREFILL_WARM_LENGTHS = (96, 192, 600)


def _warm_prefill_paths(bench: Bench, engine: Any, vocab: int) -> None:
    limit = engine.max_model_len - 8
    for i, length in enumerate(PREFILL_WARM_LENGTHS):
        run_engine(engine, make_workload(1, bench.settings.seed + 90 + i, vocab, (min(length, limit),) * 2, (2, 2)))


def _throughput_row(bench: Bench, part: str, model: str, system: str, seconds: float, tokens: int,
                    note: str = "") -> Row:
    return bench.report.add(Row(part, model, system, "throughput tok/s", tokens / seconds, "tok/s",
                                note=f"{tokens:,} tokens in {seconds:.1f} s" + (f", {note}" if note else "")))


def _workload(bench: Bench, n: int, vocab: int, seed_offset: int = 0) -> list[tuple[list[int], int]]:
    s = bench.settings
    return make_workload(n, s.seed + seed_offset, vocab, s.prompt_range, s.output_range)


def part_throughput(bench: Bench) -> None:
    """128 requests on the 8B shape, the engine vs transformers' continuous batching (generate_batch) with the
    same KV budget; then 512 requests on the engine with its KV cache's peak usage."""
    name = "llama-8b"
    path = bench.checkpoint("throughput", name)
    vocab = bench.shape(name).vocab
    s = bench.settings
    workload, warm = _workload(bench, s.num_requests, vocab), make_workload(4, s.seed + 99, vocab, (16, 48), (4, 8))
    state: dict[str, Any] = {}

    def engine_rows() -> Row:
        engine, load_s, reused = bench.slot.get(path, **shared_engine_options(bench))
        state["kv_budget"] = engine.runner.num_blocks * engine.runner.kv_bytes_per_block
        _warm_prefill_paths(bench, engine, vocab)
        run_engine(engine, warm)
        seconds, _ = run_engine(engine, workload)
        state["engine_tok_s"] = sum(n for _, n in workload) / seconds
        return _throughput_row(bench, "throughput", name, f"engine, {len(workload)} requests", seconds,
                               sum(n for _, n in workload), "loaded earlier" if reused else f"load {load_s:.1f} s")

    def many_rows() -> Row:
        engine, _, _ = bench.slot.get(path, **shared_engine_options(bench))
        result = run_engine_tracking_kv(engine, _workload(bench, s.many_requests, vocab, seed_offset=1))
        bench.report.details["kv_usage_512"] = result
        note = (f"KV peak {result['peak_blocks']:,} of {result['num_blocks']:,} blocks ({result['peak_usage']:.0%}), "
                f"{result['preemptions']} preemptions")
        return _throughput_row(bench, "throughput", name, f"engine, {s.many_requests} requests", result["seconds"],
                               result["output_tokens"], note)

    def hf_rows() -> Row:
        bench.slot.release()
        model = load_hf(path, bench.float_dtype, bench.device)
        try:
            kv_token = bench.shape(name).kv_bytes_per_token(bench.float_dtype.itemsize)
            budget = state.get("kv_budget")
            run_hf_continuous(model, kv_token, warm, budget)
            seconds, _ = run_hf_continuous(model, kv_token, workload, budget)
        finally:
            del model
            free_memory(compiled=True)
        tokens = sum(n for _, n in workload)
        ratio = state.get("engine_tok_s", 0) / (tokens / seconds)
        kv = f"KV {budget / 1e9:.1f} GB as the engine's" if budget else "KV budget: its CPU default"
        return _throughput_row(bench, "throughput", name, f"transformers generate_batch, {len(workload)} req",
                               seconds, tokens, kv + (f"; engine {ratio:.2f}x" if ratio else ""))

    bench.guarded("throughput", name, f"engine, {len(workload)} requests", "throughput tok/s", engine_rows)
    bench.guarded("throughput", name, f"engine, {s.many_requests} requests", "throughput tok/s", many_rows)
    bench.guarded("throughput", name, f"transformers generate_batch, {len(workload)} req", "throughput tok/s",
                  hf_rows)


def part_correctness(bench: Bench) -> None:
    """Greedy tokens of the engine vs transformers on the 8B shape, in bf16 (the shared engine, CUDA graphs) and
    in float32 (eager): per prompt, the first mismatch and the reference's logit margin (top1 - top2) there.

    Is a bf16 mismatch more than rounding? Against transformers in float32 (the closest to exact), the engine's
    bf16 tokens and transformers' own bf16 tokens are compared too: if the engine follows the float32 reference
    about as far as transformers' bf16 does, its disagreement with transformers' bf16 is bf16 rounding."""
    import torch

    name = "llama-8b"
    path = bench.checkpoint("correctness", name)
    s = bench.settings
    prompts = [p for p, _ in make_workload(s.check_prompts, s.seed + 5, bench.shape(name).vocab, (32, 64), (1, 1))]
    tokens: dict[str, list[list[int]]] = {}  # "engine bfloat16", "transformers bfloat16", ...
    for dtype in (torch.bfloat16, torch.float32):
        label = str(dtype).removeprefix("torch.")

        def compare(dtype: torch.dtype = dtype, label: str = label) -> Row:
            if dtype == torch.bfloat16:
                options = shared_engine_options(bench) if bench.cuda else bench.engine_options(dtype="bfloat16")
            else:
                kv = dict(kv_cache_bytes=DECODE_KV_BYTES) if bench.cuda else {}
                options = bench.engine_options(eager=True, **kv) | dict(dtype="float32")
            engine, _, _ = bench.slot.get(path, **options)
            tokens[f"engine {label}"] = got = engine_greedy(engine, prompts, s.check_tokens)
            bench.slot.release()
            model = load_hf(path, dtype, bench.device)
            try:
                refs = [hf_greedy_with_logits(model, p, s.check_tokens) for p in prompts]
            finally:
                del model
                free_memory()
            tokens[f"transformers {label}"] = [t for t, _ in refs]
            row = _mismatch_row(bench, name, f"engine vs transformers, {label}", got, refs)
            if dtype == torch.float32:
                for other in ("engine bfloat16", "transformers bfloat16"):
                    if other in tokens:
                        _mismatch_row(bench, name, f"{other} vs transformers float32 (rounding baseline)",
                                      tokens[other], refs)
            return row

        bench.guarded("correctness", name, f"engine vs transformers, {label}", "greedy tokens equal", compare)


def _mismatch_row(bench: Bench, name: str, system: str, got: list[list[int]],
                  refs: list[tuple[list[int], Any]]) -> Row:
    results = [first_mismatch(g, tokens, logits) for g, (tokens, logits) in zip(got, refs)]
    bench.report.details.setdefault("correctness", {})[system] = results
    equal = sum(r["first_mismatch"] if r["first_mismatch"] is not None else r["tokens"] for r in results)
    first = [(i, r) for i, r in enumerate(results) if r["first_mismatch"] is not None]
    note = "all equal" if not first else "; ".join(
        f"prompt {i}: token {r['first_mismatch']} (margin {r['margin_at_mismatch']:.4f})"
        if r["margin_at_mismatch"] is not None else f"prompt {i}: length differs" for i, r in first)
    margin = min(r["min_margin"] for r in results if r["min_margin"] is not None)
    return bench.report.add(Row("correctness", name, system, "greedy tokens equal", equal,
                                f"/{sum(r['tokens'] for r in results)}",
                                note=f"{note}; smallest reference margin {margin:.4f}"))


def part_awq70b(bench: Bench) -> None:
    """The 70B-shaped AutoAWQ INT4 checkpoint: Engine.from_pretrained's wall time, batch-1 decode, and 64
    requests. CUDA graphs, or eager when the graphs fail to start (said in the note)."""
    name = "llama-70b-awq"
    bench.slot.release()
    path = bench.checkpoint("awq70b", name)
    s = bench.settings
    extra = dict(kv_cache_fraction=AWQ_KV_FRACTION) if bench.cuda else {}
    options = bench.engine_options(eager=False, max_num_seqs=AWQ_MAX_SEQS, **extra)
    state: dict[str, Any] = {}

    def load() -> Row:
        note = ""
        try:
            _, load_s, _ = bench.slot.get(path, **options)
            state["options"] = options
        except Exception as exc:
            if not bench.cuda:
                raise
            note = f"eager: with CUDA graphs it failed ({type(exc).__name__}: {str(exc)[:120]})"
        if "options" not in state:  # out of the except block, so that the failed engine's memory can be freed
            free_memory()
            _, load_s, _ = bench.slot.get(path, **dict(options, enforce_eager=True))
            state["options"] = dict(options, enforce_eager=True)
        runner = bench.slot.engine.runner
        kv_gb = runner.num_blocks * runner.kv_bytes_per_block / 1e9
        return bench.report.add(Row("awq70b", name, "engine INT4 (AWQ)", "load s", load_s, "s",
                                    note=f"Engine.from_pretrained wall time; KV pool {kv_gb:.1f} GB"
                                    + (f"; {note}" if note else "")))

    def decode() -> Row:
        engine, _, _ = bench.slot.get(path, **state["options"])
        shape = bench.shape(name)
        eager = "eager" if state["options"].get("enforce_eager") else "CUDA graphs" if bench.cuda else "CPU"
        return bench.decode_row("awq70b", name, f"engine INT4 (AWQ), {eager}",
                                engine_decoder(engine, _prompt(bench, shape.vocab)),
                                bench.step_bytes(shape, int4=True))

    def throughput() -> Row:
        return _requests_rows(bench, "awq70b", name, f"engine INT4 (AWQ), {s.awq_requests} requests", path,
                              state["options"], s.awq_requests)

    bench.guarded("awq70b", name, "engine INT4 (AWQ)", "load s", load)
    if "options" in state:
        bench.guarded("awq70b", name, "engine INT4 (AWQ)", "decode tok/s", decode)
        bench.guarded("awq70b", name, f"engine INT4 (AWQ), {s.awq_requests} requests", "throughput tok/s",
                      throughput)
    bench.slot.release()


PARTS: dict[str, Callable[[Bench], None]] = {
    "copy": part_copy,
    "decode1b": lambda bench: part_decode(bench, "decode1b", "llama-1b"),
    "decode8b": lambda bench: part_decode(bench, "decode8b", "llama-8b"),
    "int4": part_int4,
    "throughput": part_throughput,
    "correctness": part_correctness,
    "awq70b": part_awq70b,
}
