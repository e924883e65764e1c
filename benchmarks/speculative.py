"""Speculative decoding benchmark: the target alone vs the target with a draft, same prompts, one run.

    python -m benchmarks.speculative [--quick] [--seed 0] [--threads N]   (= python -m benchmarks.engine --speculative)

The pair (built offline into .bench/spec-pair on first use, rebuilt if its recipe changes): a random Llama target
of 12 layers (hidden 768, GQA 12/4 heads, vocab 4096, 82M parameters, float32) whose last 11 layers write small
residuals (o_proj and down_proj scaled by 0.01), and as its draft the target's first layer with the same
embeddings, final norm and LM head (`tiers.checkpoints.create_draft_target_pair`). The target still computes
every layer; how often the draft's argmax agrees with the target's is measured here, not assumed.

Measured, greedy with ignore_eos, at batch 1 and batch 8 (the same 128-token random prompts): the target alone,
the target with the draft at adaptive k (the engine's default: k in 0..4 chosen every step from measured
acceptance and costs), and at a fixed k = 4 for reference. The draft is another Engine whose weights the target's
engine shares (as an AIO tier drafting for another). Each system is warmed up on other prompts of the same batch
size (the adaptive controller learns its costs there), then timed best of two, interleaved. Greedy tokens of every
speculative run are checked against the target alone's.

Reported: acceptance rate (accepted / draft tokens), Leviathan's alpha (accepted / (accepted + rejections)), mean
tokens per verification, per-position acceptance, the cost ratio c (a batch-1 decode step of the draft engine
alone / of the target alone), Leviathan's predicted speedup (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) for the
measured alpha, c and the mean k, and the measured speedups (target-alone time / speculative time).
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

PAIR_DIR = Path(".bench/spec-pair")
PAIR_RECIPE: dict[str, Any] = dict(draft_layers=1, extra_layers=11, residual_scale=0.01, seed=0, vocab_size=4096,
                                   hidden_size=768, num_heads=12, num_kv_heads=4, intermediate_size=2048,
                                   max_position_embeddings=2048)
MAX_K = 4
BATCH_SIZES = (1, 8)
ENGINE_ARGS = dict(max_model_len=1024, kv_cache_bytes=256 << 20, max_num_seqs=16)


@dataclass
class Run:
    system: str
    batch: int
    seconds: float
    tokens: list[list[int]]
    spec: Any = None  # SpecDecodeStats of the timed run
    verify_cost: float | None = None  # the engine's measured cost of its mean verification step / a plain step


def ensure_pair(root: Path = PAIR_DIR) -> tuple[Path, Path]:
    """Builds the (target, draft) pair unless root holds one made with PAIR_RECIPE."""
    from tiers.checkpoints import create_draft_target_pair

    recipe_file = root / "recipe.json"
    target, draft = root / "target", root / "draft"
    ok = recipe_file.is_file() and json.loads(recipe_file.read_text()) == PAIR_RECIPE and \
        (target / "config.json").is_file() and (draft / "config.json").is_file()
    if not ok:
        print(f"creating the draft/target pair in {root} ...")
        root.mkdir(parents=True, exist_ok=True)
        create_draft_target_pair(root, **PAIR_RECIPE)
        recipe_file.write_text(json.dumps(PAIR_RECIPE, indent=2) + "\n")
    return target, draft


def leviathan_speedup(alpha: float, k: float, c: float) -> float:
    """Expected walltime improvement of Leviathan et al. (2023), eq. (1) over (k c + 1)."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + 1)


def _generate(engine, prompts: list[list[int]], n: int) -> tuple[float, list[list[int]]]:
    from tiers import SamplingParams

    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return time.perf_counter() - start, [list(o.token_ids) for o in outs]


def decode_step_seconds(engine, prompt: list[int], n: int) -> float:
    """Seconds of one batch-1 decode step: (time(n) - time(1)) / (n - 1), best of three, so the prefill cancels."""
    best = {1: float("inf"), n: float("inf")}
    for _ in range(3):
        for m in (1, n):
            best[m] = min(best[m], _generate(engine, [prompt], m)[0])
    return (best[n] - best[1]) / (n - 1)


def verify_cost(engine, spec, batch: int) -> float | None:
    """Leviathan et al. take a verification of k + 1 tokens per sequence to cost one plain target step; on a CPU it
    costs more (more rows through every matmul). This is that ratio as the engine's own cost model measured it."""
    if spec is None or not spec.num_verifications:
        return None
    cost = engine.speculator.controller.target_cost
    mean_k = spec.num_draft_tokens / spec.num_verifications
    plain, verify = cost.estimate(batch), cost.estimate(round(batch * (1 + mean_k)))
    return verify / plain if plain and verify else None


def run(quick: bool = False, seed: int = 0, pair_dir: Path = PAIR_DIR) -> dict:
    from tiers import Engine

    target_path, draft_path = ensure_pair(pair_dir)
    prompt_len, new_tokens, repeats = (64, 32, 1) if quick else (128, 128, 2)
    rng = random.Random(seed)
    vocab = PAIR_RECIPE["vocab_size"]

    def prompts(n: int) -> list[list[int]]:
        return [[rng.randrange(10, vocab) for _ in range(prompt_len)] for _ in range(n)]

    target = Engine.from_pretrained(target_path, **ENGINE_ARGS)
    draft = Engine.from_pretrained(draft_path, **ENGINE_ARGS)
    systems = {
        "target alone": target,
        f"speculative, adaptive k <= {MAX_K}": Engine.from_pretrained(
            target_path, draft=draft, num_speculative_tokens=MAX_K, **ENGINE_ARGS),
        f"speculative, fixed k = {MAX_K}": Engine.from_pretrained(
            target_path, draft=draft, num_speculative_tokens=MAX_K, speculative_adaptive=False, **ENGINE_ARGS),
    }
    n_params = sum(p.numel() for p in target.runner.model.parameters())
    n_draft = sum(p.numel() for p in draft.runner.model.parameters())
    print(f"target {target_path}: {n_params / 1e6:.1f}M parameters, {target.model_config.num_layers} layers; draft "
          f"{draft_path}: {n_draft / 1e6:.1f}M parameters, {draft.model_config.num_layers} layer(s) (its weights are "
          f"shared with the speculative engines); float32, CPU, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print(f"workload: prompts of {prompt_len} random tokens (seed {seed}), {new_tokens} new tokens each, greedy, "
          f"ignore_eos; batch sizes {', '.join(map(str, BATCH_SIZES))}")

    c_prompt = prompts(1)[0]
    step_target = decode_step_seconds(target, c_prompt, new_tokens // 2)
    step_draft = decode_step_seconds(draft, c_prompt, new_tokens // 2)
    c = step_draft / step_target
    print(f"batch-1 decode step: target {step_target * 1e3:.2f} ms, draft {step_draft * 1e3:.2f} ms: "
          f"c = {c:.3f}")

    runs: list[Run] = []
    for batch in BATCH_SIZES:
        timed = prompts(batch)
        for engine in systems.values():  # warm-up on other prompts of this batch size
            _generate(engine, prompts(batch), new_tokens // 2)
        best: dict[str, Run] = {}
        for _ in range(repeats):
            for name, engine in systems.items():
                if engine.speculator is not None:
                    engine.speculator.reset_metrics()
                seconds, tokens = _generate(engine, timed, new_tokens)
                spec = engine.stats().speculative
                if name not in best or seconds < best[name].seconds:
                    best[name] = Run(name, batch, seconds, tokens, spec, verify_cost(engine, spec, batch))
        runs.extend(best.values())
        reference = best["target alone"].tokens
        for r in best.values():
            if r.tokens != reference:
                raise RuntimeError(f"{r.system} at batch {batch}: greedy tokens differ from the target alone's")
        print(f"batch {batch}: greedy tokens of the speculative runs equal the target alone's "
              f"({batch * new_tokens} tokens each)")

    summary: dict[str, Any] = {"quick": quick, "threads": torch.get_num_threads(), "c": round(c, 4),
                               "target_ms_per_step": round(step_target * 1e3, 2),
                               "draft_ms_per_step": round(step_draft * 1e3, 2), "runs": []}
    print(f"\n{'system':<32} {'batch':>5} {'tok/s':>8} {'speedup':>8} {'accept':>7} {'alpha':>6} {'mean k':>6} "
          f"{'tok/verif':>9} {'predicted':>9} {'verify':>6} {'pred. v':>7}  per-position acceptance")
    for r in runs:
        base = next(b for b in runs if b.batch == r.batch and b.system == "target alone")
        tok_s = r.batch * new_tokens / r.seconds
        speedup = base.seconds / r.seconds
        row: dict[str, Any] = {"system": r.system, "batch": r.batch, "seconds": round(r.seconds, 3),
                               "tok_s": round(tok_s, 1), "speedup": round(speedup, 3)}
        line = f"{r.system:<32} {r.batch:>5} {tok_s:>8.1f} {speedup:>7.2f}x"
        s = r.spec
        if s is not None:
            mean_k = s.num_draft_tokens / s.num_verifications if s.num_verifications else 0.0
            predicted = leviathan_speedup(s.alpha, mean_k, c) if s.num_verifications else 1.0
            v = r.verify_cost or 1.0
            predicted_v = predicted * (mean_k * c + 1) / (mean_k * c + v)
            row.update(acceptance_rate=round(s.acceptance_rate, 3), alpha=round(s.alpha, 3),
                       mean_k=round(mean_k, 2),
                       tokens_per_verification=round(s.mean_tokens_per_verification, 2),
                       per_position_acceptance=[round(a, 3) for a in s.per_position_acceptance],
                       plain_decodes=s.num_plain_decodes, verifications=s.num_verifications,
                       predicted_speedup=round(predicted, 3), verify_cost=round(v, 3),
                       predicted_with_verify_cost=round(predicted_v, 3))
            positions = " ".join(f"{a:.2f}" if n else "-" for a, n in zip(s.per_position_acceptance,
                                                                        s.num_proposed_per_position))
            line += (f" {s.acceptance_rate:>7.3f} {s.alpha:>6.3f} {mean_k:>6.2f} "
                     f"{s.mean_tokens_per_verification:>9.2f} {predicted:>8.2f}x {v:>6.2f} {predicted_v:>6.2f}x  {positions}"
                     f"  ({s.num_plain_decodes} plain decodes, {s.num_verifications} verifications)")
        print(line)
        summary["runs"].append(row)
    print("\nspeedup: target-alone time / this system's time, same prompts and tokens; predicted: Leviathan's "
          "(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) at the measured alpha, c and mean k; verify: the measured "
          "cost of a verification step / a plain step (Leviathan: 1); pred. v: the prediction with it, "
          "(1 - alpha^(k+1)) / ((1 - alpha)(k c + verify))")
    print("\nJSON " + json.dumps(summary))
    for engine in [*systems.values(), draft]:
        engine.close()
    return summary


__all__ = ["PAIR_RECIPE", "ensure_pair", "leviathan_speedup", "run"]


if __name__ == "__main__":
    import sys

    from benchmarks.engine import main

    main(["--speculative", *sys.argv[1:]])
