"""benchmarks.gpu without a GPU: the random AutoAWQ builder (at a tiny width, the 70B's 80 layers), the --smoke run
end to end on CPU, and the bandwidth arithmetic against hand computations."""
import json

import pytest
import torch

from benchmarks.gpu.checkpoints import MARKER, awq_tensor_specs, build_awq
from benchmarks.gpu.cli import main, parse_parts
from benchmarks.gpu.shapes import SHAPES, ModelShape, decode_step_bytes
from quant_helpers import prefill_logits
from tiers import Engine, SamplingParams
from tiers.quantization import QuantizedLinear

pytestmark = pytest.mark.usefixtures("one_thread")

# The 70B's depth and head layout at a CPU's width (in_features multiples of AWQ's groups of 128)
TINY_70B = ModelShape("llama-70b-awq", hidden=128, layers=80, heads=8, kv_heads=1, intermediate=256, vocab=512)


def test_the_awq_builder_writes_a_checkpoint_the_engine_loads_and_runs_finitely(tmp_path):
    path = tmp_path / "awq"
    built = build_awq(path, TINY_70B, "cpu", seed=0, shard_bytes=1 << 20)  # several shards: layers straddle them
    assert not built.reused and (path / MARKER).is_file()
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert sorted(index["weight_map"]) == sorted(name for name, _, _ in awq_tensor_specs(TINY_70B))
    qc = json.loads((path / "config.json").read_text())["quantization_config"]
    assert qc == {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}

    engine = Engine.from_pretrained(path, max_model_len=64)
    model = engine.runner.model
    layers = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    assert len(layers) == 4 * 80 and all(m.mode == "int4" and m.group_size == 128 for m in layers)
    prompt = list(range(10, 42))
    logits = prefill_logits(model, prompt)
    assert torch.isfinite(logits).all() and logits.std() > 0  # 80 layers of random codes stay finite
    out = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0]
    assert len(out.token_ids) == 8 and all(0 <= t < TINY_70B.vocab for t in out.token_ids)
    assert build_awq(path, TINY_70B, "cpu", seed=0).reused  # the marker matches: nothing rebuilt


def phases_of(result: dict, part: str, model: str, system: str) -> dict:
    return result["details"]["phases"][f"{part} {model} {system}"]


def test_the_smoke_run_completes_on_cpu_and_writes_the_json(tmp_path):
    out = tmp_path / "gpu.json"
    main(["--smoke", "--device", "cpu", "--json", str(out), "--work-dir", str(tmp_path / "checkpoints")])
    result = json.loads(out.read_text())
    assert set(result) >= {"env", "settings", "copy", "parts", "checkpoints", "rows", "details"}
    assert list(result["parts"]) == ["copy", "decode1b", "decode8b", "throughput", "correctness", "int4", "awq70b"]
    assert all(p["status"] == "done" for p in result["parts"].values()), result["parts"]
    assert set(result["checkpoints"]) == {"llama-1b", "llama-8b", "llama-70b-awq"}
    rows = {(r["part"], r["model"], r["system"], r["metric"]): r for r in result["rows"]}
    assert not [r for r in result["rows"] if r["error"]], [r for r in result["rows"] if r["error"]]
    for key in [("decode1b", "llama-1b", "engine eager", "decode tok/s"),
                ("decode8b", "llama-8b", "engine eager", "decode tok/s"),
                ("int4", "llama-8b", "engine INT4 eager", "decode tok/s"),
                ("throughput", "llama-8b", "engine, 6 requests", "throughput tok/s"),
                ("awq70b", "llama-70b-awq", "engine INT4 (AWQ)", "load s")]:
        assert rows[key]["value"] > 0, key
    skipped = [r for r in result["rows"] if r["skipped"]]
    assert {r["system"] for r in skipped} >= {"engine CUDA graphs", "transformers static cache", "torch copy_"}
    assert all("needs CUDA" in r["skipped"] for r in skipped)
    assert result["details"]["kv_usage_512"]["peak_blocks"] > 0
    # the many-request runs report prefill and decode apart (issue 40)
    for part, model, system in (("awq70b", "llama-70b-awq", "engine INT4 (AWQ), 4 requests"),
                                ("int4", "llama-8b", "engine INT4, 6 requests")):
        assert rows[(part, model, system, "throughput tok/s")]["value"] > 0
        prefill = rows[(part, model, f"{system}: prefill", "prefill tok/s")]
        decode = rows[(part, model, f"{system}: decode", "decode tok/s (batched)")]
        assert prefill["value"] > 0 and decode["value"] > 0 and " s, " in prefill["note"] and "steps" in decode["note"]
        assert 0 < phases_of(result, part, model, system)["decode_steps"] < phases_of(result, part, model, system)[
            "output_tokens"]
        phases = phases_of(result, part, model, system)
        assert phases["prefill_s"] + phases["decode_s"] <= phases["seconds"]
        assert phases["prefill_output_tokens"] + phases["decode_tokens"] == phases["output_tokens"]
    assert set(result["details"]["correctness"]) == {
        "engine vs transformers, bfloat16", "engine vs transformers, float32",
        "engine bfloat16 vs transformers float32 (rounding baseline)",
        "transformers bfloat16 vs transformers float32 (rounding baseline)"}


def test_the_cuda_branches_run_end_to_end_when_a_cpu_pretends_to_be_a_gpu(tmp_path):
    """What only runs on the GPU (the copy, CUDA-graph engines, the shared bf16 engine, transformers' static cache,
    the 70B's load) cannot be debugged there: with Bench.cuda forced on, every such branch runs here on CPU tensors
    (bf16; the engine ignores enforce_eager off CUDA and transformers compiles nothing on CPU)."""
    from unittest import mock

    from benchmarks.gpu.systems import Bench

    out = tmp_path / "gpu.json"
    with mock.patch.object(Bench, "cuda", property(lambda self: True)):
        main(["--smoke", "--device", "cpu", "--json", str(out), "--work-dir", str(tmp_path / "checkpoints")])
    result = json.loads(out.read_text())
    assert not [r for r in result["rows"] if r["error"] or r["skipped"]]
    assert result["copy"]["gb_s"] > 0
    decode = [r for r in result["rows"] if r["metric"] == "decode tok/s"]
    assert len(decode) == 2 * 3 + 4 + 1 and all(r["value"] > 0 and r["hbm"] > 0 for r in decode)


def test_a_decode_step_reads_what_the_hand_computation_says():
    b8, b1 = SHAPES["llama-8b"], SHAPES["llama-1b"]
    # The published parameter counts of Llama-3-8B, Llama-3.2-1B and Llama-3-70B
    assert (b8.num_params, b1.num_params, SHAPES["llama-70b-awq"].num_params) == (
        8_030_261_248, 1_235_814_400, 70_553_706_496)
    kv_8b = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16: bytes per token
    # 8B bf16: every weight once, but one row of the untied 128256 x 4096 embedding
    assert decode_step_bytes(b8, 2, context=0) == (8_030_261_248 - 128_256 * 4096 + 4096) * 2 == 15_009_857_536
    assert decode_step_bytes(b8, 2, context=192) == 15_009_857_536 + 192 * kv_8b
    # 1B bf16, tied: the LM head reads the embedding whole, once
    assert decode_step_bytes(b1, 2, context=0) == 1_235_814_400 * 2
    # 8B INT4: projections at 4 bits plus a float32 scale and min per 128; norms, LM head and a row in bf16
    projections = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert decode_step_bytes(b8, 2, context=0, int4=True) == (
        projections // 2 + projections // 128 * 8 + (65 * 4096 + 128_256 * 4096 + 4096) * 2) == 4_977_082_368


def test_parts_run_in_a_fixed_order_with_the_copy_wherever_a_share_of_it_is_reported():
    assert parse_parts("awq70b,decode1b") == ["copy", "decode1b", "awq70b"]
    assert parse_parts("throughput") == ["throughput"]
    assert parse_parts("all")[0] == "copy" and len(parse_parts("all")) == 7
    with pytest.raises(SystemExit, match="unknown part"):
        parse_parts("decode70b")


def test_steps_split_into_prefill_and_decode():
    from benchmarks.gpu.systems import split_phases

    steps = [(True, 2.0, 0), (True, 1.0, 0), (False, 0.5, 6), (False, 0.5, 2)]  # (prefill?, seconds, decode rows)
    phases = split_phases(steps, prompt_tokens=3000, output_tokens=14)
    assert (phases["prefill_s"], phases["prefill_steps"], phases["prefill_tok_s"]) == (3.0, 2, 1000.0)
    assert (phases["decode_s"], phases["decode_steps"], phases["decode_tokens"]) == (1.0, 2, 8)
    assert (phases["decode_tok_s"], phases["mean_decode_batch"], phases["prefill_output_tokens"]) == (8.0, 4.0, 6)
    assert split_phases([], 10, 0)["prefill_tok_s"] is None


def test_a_missing_dependency_stops_the_run_before_any_checkpoint_is_built(tmp_path):
    """A GPU image lacked `referencing`: the 70B checkpoint was built (62 s) before every row failed on the import."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.modules['referencing'] = None\n"  # an import of it now raises ImportError
            "from benchmarks.gpu.cli import main\n"
            f"main(['--smoke', '--parts', 'awq70b', '--work-dir', {str(tmp_path / 'work')!r}, "
            f"'--json', {str(tmp_path / 'gpu.json')!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 1
    assert "referencing" in done.stderr and "install AIO's dependencies" in done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "gpu.json").exists()
