"""Decode steps from CUDA graphs (tiers.engine.cuda_graphs). Without a GPU the graphs are not captured: the same
padded decode steps over the same static buffers run eagerly (capture=False), which checks everything around the
capture: size selection, padding, the buffers, the logits' rows. With a GPU the CUDA cases capture for real."""
import pytest
import torch

from conftest import TRITON_DEVICES
from tiers import Engine
from tiers.attention.backend import BatchLayout
from tiers.engine.config import EngineConfig
from tiers.engine.cuda_graphs import PAD_SLOT, default_graph_sizes, graph_size_for
from tiers.engine.input_batch import BatchPlan, model_input
from tiers.engine.sampling_params import SamplingParams

pytest.importorskip("triton")


def test_default_sizes_cover_every_batch_up_to_the_largest():
    assert default_graph_sizes(1) == (1,)
    assert default_graph_sizes(20) == (1, 2, 4, 8, 16, 20)
    sizes = default_graph_sizes(1000)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-1] == 256 and all(s % 16 == 0 for s in sizes[4:])
    for n in range(1, 257):
        size = graph_size_for(n, sizes)
        assert size >= n and not any(n <= s < size for s in sizes)
    assert graph_size_for(257, sizes) is None


def test_graph_sizes_are_validated():
    assert EngineConfig(cuda_graph_sizes=[8, 1, 8]).cuda_graph_sizes == (1, 8)
    for bad in ([], [0], [2, -1]):
        with pytest.raises(ValueError, match="cuda_graph_sizes"):
            EngineConfig(cuda_graph_sizes=bad)


def _engine(path, device: str, graphs: bool, sizes=(1, 2, 4)) -> Engine:
    engine = Engine.from_pretrained(path, device=device, dtype="float32", max_model_len=96, attention_backend="triton",
                                    cuda_graph_sizes=sizes, enforce_eager=not graphs)
    if graphs and device == "cpu":
        assert engine.runner.cuda_graphs is None  # no graphs off CUDA ...
        engine.runner.capture_cuda_graphs(engine.config, engine.max_model_len, capture=False)  # ... but padding
    return engine


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_graph_decode_gives_the_eager_tokens(llama_path, device):
    """Four requests finishing at different steps: the decode batch shrinks 4, 3 (padded to 4), 2, 1, with prefill
    chunks of later requests in between (those steps run eagerly)."""
    eager, graphs = _engine(llama_path, device, False), _engine(llama_path, device, True)
    assert eager.runner.cuda_graphs is None and graphs.runner.cuda_graphs is not None
    prompts = [[5 + i, 9, 17 + 3 * i] * (2 + i) for i in range(4)]
    params = [SamplingParams(max_tokens=6 + 5 * i, temperature=0.0, ignore_eos=True) for i in range(4)]
    outs = [[o.token_ids for o in engine.generate(prompts, params)] for engine in (eager, graphs)]
    assert outs[0] == outs[1]
    assert graphs.runner.cuda_graphs.num_replays >= 20


def _decode_plan(num_seqs: int, block_size: int) -> BatchPlan:
    """Sequence i: its first token (id 11 + i) at position 0 of block i + 1."""
    layout = BatchLayout([[i + 1] for i in range(num_seqs)], [1] * num_seqs, list(range(num_seqs + 1)),
                         [(i + 1) * block_size for i in range(num_seqs)], block_size)
    return BatchPlan([11 + i for i in range(num_seqs)], [0] * num_seqs, layout, list(range(num_seqs)),
                     list(range(num_seqs)))


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_padded_rows_write_no_kv_and_real_rows_match_eager(llama_path, device):
    engine = _engine(llama_path, device, True)
    runner = engine.runner
    plan = _decode_plan(3, runner.block_size)  # replays the graph of 4
    logits = runner.cuda_graphs.run(plan).clone()
    written = runner.kv_cache.k_cache.abs().sum(dim=(0, 3, 4)) != 0  # [blocks, block_size]
    assert written.nonzero().tolist() == [[1, 0], [2, 0], [3, 0]]
    assert PAD_SLOT in runner.cuda_graphs.buffers.slot_mapping.tolist()
    inputs = model_input(plan, runner.attention_backend, runner.kv_cache.layers, runner.device, runner.dtype)
    with torch.inference_mode():
        expected = runner.model.compute_logits(runner.model(inputs.input_ids, inputs.positions, inputs.attn_metadata))
    assert logits.shape == expected.shape
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_steps_a_graph_cannot_hold_run_eagerly(llama_path, device):
    graphs = _engine(llama_path, device, True, sizes=(1, 2)).runner.cuda_graphs
    assert graphs.can_run(_decode_plan(2, 16)) and not graphs.can_run(_decode_plan(3, 16))
    prefill = BatchPlan([1, 2, 3], [0, 1, 2], BatchLayout([[1]], [3], [0, 3], [16, 17, 18], 16), [0], [2])
    assert not graphs.can_run(prefill)
    too_long = _decode_plan(1, 16)
    too_long.layout.block_ids[0] = list(range(graphs.buffers.max_blocks_per_seq + 1))
    assert not graphs.can_run(too_long)


def test_no_graphs_with_the_torch_backend_or_enforce_eager(llama_path):
    engine = Engine.from_pretrained(llama_path, dtype="float32", max_model_len=64, attention_backend="torch")
    engine.runner.capture_cuda_graphs(engine.config, engine.max_model_len, capture=False)
    assert engine.runner.cuda_graphs is None  # the torch backend reads its metadata on the host


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_idle_buffers_write_no_kv(llama_path, device):
    """What the graphs' warm-up runs before any step: every row idle, nothing written to the cache."""
    engine = _engine(llama_path, device, True)
    runner = engine.runner
    for size in (4, 1):
        runner.cuda_graphs._forward(size)
    assert runner.kv_cache.k_cache.abs().sum() == 0 and runner.kv_cache.v_cache.abs().sum() == 0


def test_a_failed_capture_leaves_the_engine_eager(llama_path, monkeypatch, caplog):
    from tiers.engine import model_runner

    def fail(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(model_runner, "CUDAGraphRunner", fail)
    engine = Engine.from_pretrained(llama_path, dtype="float32", max_model_len=64, attention_backend="torch")
    engine.runner.attention_backend.supports_cuda_graphs = True  # as the Triton backend's
    with caplog.at_level("WARNING"):
        engine.runner.capture_cuda_graphs(engine.config, engine.max_model_len, capture=False)
    assert engine.runner.cuda_graphs is None and "runs eagerly" in caplog.text
    out = engine.generate([[11, 12, 13]], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    assert len(out[0].token_ids) == 3
