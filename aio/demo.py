"""The embedded default: three small Llama-architecture tiers with RANDOM weights, built offline in $AIO_HOME/demo.

They show the whole product working (routing, engine, log, metrics) on a laptop with no downloads; their
answers are gibberish. Prices follow the design's figures: $0.0001 / $0.0005 / $0.003 per 1,000-token request.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from aio.settings import TIER_ORDER, TierSettings

logger = logging.getLogger(__name__)

DEMO_SHAPES = dict(zip(TIER_ORDER, (  # hidden, layers, heads, kv heads, intermediate
    (128, 2, 4, 2, 352),
    (192, 3, 6, 2, 512),
    (256, 4, 8, 4, 704),
)))
DEMO_PRICES = dict(zip(TIER_ORDER, (0.10, 0.50, 3.00)))  # USD per million tokens, input and output
DEMO_MAX_MODEL_LEN = 2048
DEMO_KV_CACHE_BYTES = 64 << 20


def demo_model_name(tier: str) -> str:
    return f"aio-demo-{tier}"


def demo_checkpoint_dir(home: Path, tier: str) -> Path:
    return home / "demo" / demo_model_name(tier)


def demo_checkpoint_is_built(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def ensure_demo_checkpoint(home: Path, tier: str) -> Path:
    """Builds the demo checkpoint of `tier` if it is missing (seconds) and returns its folder."""
    from tiers.checkpoints import create_random_checkpoint

    path = demo_checkpoint_dir(home, tier)
    if not demo_checkpoint_is_built(path):
        hidden, layers, heads, kv_heads, inter = DEMO_SHAPES[tier]
        start = time.perf_counter()
        create_random_checkpoint(path, "llama", seed=TIER_ORDER.index(tier), hidden_size=hidden, num_layers=layers,
                                 num_heads=heads, num_kv_heads=kv_heads, intermediate_size=inter, vocab_size=512,
                                 max_position_embeddings=DEMO_MAX_MODEL_LEN)
        logger.info("built demo tier %s in %.1f s at %s", tier, time.perf_counter() - start, path)
    return path


def ensure_demo_checkpoints(home: Path) -> dict[str, Path]:
    """Builds any missing demo checkpoint (seconds each) and returns the folders."""
    return {tier: ensure_demo_checkpoint(home, tier) for tier in DEMO_SHAPES}


def demo_tier_settings(home: Path) -> dict[str, TierSettings]:
    paths = ensure_demo_checkpoints(home)
    return {tier: TierSettings(path=path, model=demo_model_name(tier), input_price_per_million=DEMO_PRICES[tier],
                               output_price_per_million=DEMO_PRICES[tier], kv_cache_bytes=DEMO_KV_CACHE_BYTES,
                               max_num_seqs=64)
            for tier, path in paths.items()}
