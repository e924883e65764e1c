"""Speculative decoding in AIO's tier config: a tier drafts with a cheaper tier's already-loaded engine (weights
shared), answers exactly as without speculation (greedy), refuses a draft of another vocabulary at start, and
reports its acceptance to the metrics."""
import asyncio

import pytest
from prometheus_client import generate_latest

from aio.metrics import Metrics
from aio.settings import ConfigError, load_settings
from aio.tier_loader import TierLoadError, build_pool
from conftest import INIT_RANGE
from tiers import SamplingParams
from tiers.checkpoints import create_random_checkpoint


pytestmark = pytest.mark.usefixtures("one_thread")


def tier(path, **extra) -> dict:
    return {"path": str(path), "max_model_len": 256, "kv_cache_bytes": 8 << 20, **extra}


async def answer(local_tier, text: str, max_tokens: int = 16) -> str:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    chunks = [c.delta_text async for c in local_tier.stream_chat([{"role": "user", "content": text}], params,
                                                                 request_id=f"r-{text}")]
    return "".join(chunks)


def test_large_tier_drafts_with_the_small_tiers_engine(pair):
    target, draft = pair
    settings = load_settings(tiers={"small": tier(draft), "large": tier(target, draft="small",
                                                                         num_speculative_tokens=3)})
    assert settings.tiers["large"].speculative == "draft"
    pool = build_pool(settings.tiers)
    small, large = pool.tiers
    plain = build_pool(load_settings(tiers={"large": tier(target)}).tiers).tiers[0]
    try:
        spec = large.engine.speculator
        assert spec is not None and spec.proposer.runner.model is small.engine.runner.model  # no second copy
        assert spec.controller.max_k == 3
        prompts = ["hello there", "what is the capital of France?", "a b c d e f g"]

        async def run_all() -> tuple[list[str], list[str]]:
            return ([await answer(large, p) for p in prompts], [await answer(plain, p) for p in prompts])

        got, expected = asyncio.run(run_all())
        assert got == expected
        stats = large.load().speculative
        assert stats is not None and stats.num_draft_tokens > 0

        metrics = Metrics(lambda: [(t.name, t.model, t.load()) for t in pool])
        text = generate_latest(metrics.registry).decode()
        line = next(ln for ln in text.splitlines()
                    if ln.startswith("vllm:spec_decode_draft_acceptance_rate{") and 'tier="large"' in ln)
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(stats.acceptance_rate)
        assert 'vllm:spec_decode_num_draft_tokens_total{model_name="target",tier="large"}' in text
        assert 'tier="small"' not in "".join(ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode"))
    finally:
        for t in [*pool, plain]:
            t.engine.close()


def test_ngram_tier_needs_no_draft(pair):
    target, _ = pair
    pool = build_pool(load_settings(tiers={"medium": tier(target, speculative="ngram")}).tiers)
    try:
        assert pool.tiers[0].engine.speculator.method == "ngram"
    finally:
        pool.tiers[0].engine.close()


def test_draft_of_another_vocabulary_fails_at_start(pair, tmp_path):
    target, _ = pair
    other = create_random_checkpoint(tmp_path / "other-vocab", "llama", vocab_size=640, num_layers=1)
    settings = load_settings(tiers={"small": tier(other), "large": tier(target, draft="small")})
    with pytest.raises(TierLoadError, match=r"tier large: tier small cannot draft for it: .*640 tokens.*512"):
        build_pool(settings.tiers)


@pytest.mark.parametrize("tiers, message", [
    ({"small": {"path": "/s"}, "large": {"path": "/l", "draft": "medium"}}, "not configured"),
    ({"small": {"path": "/s", "draft": "large"}, "large": {"path": "/l"}}, "a draft must be a cheaper tier"),
    ({"small": {"base_url": "http://x/v1"}, "large": {"path": "/l", "draft": "small"}}, "remote tier"),
    ({"large": {"path": "/l", "speculative": "draft"}}, "needs `draft`"),
    ({"small": {"path": "/s"}, "large": {"path": "/l", "draft": "small", "speculative": "ngram"}}, "remove `draft`"),
    ({"large": {"base_url": "http://x/v1", "speculative": "ngram"}}, "remote tier cannot"),
    ({"large": {"path": "/l", "speculative": "medusa"}}, "speculative"),
])
def test_speculation_settings_are_checked(tiers, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(tiers=tiers)
