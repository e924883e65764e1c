"""The embedded default: three small Llama-architecture tiers with RANDOM weights, built offline in $AIO_HOME/demo.

They show the whole product working (routing, engine, log, metrics) on a laptop with no downloads; their
answers are gibberish. Prices follow the design's figures: $0.0001 / $0.0005 / $0.003 per 1,000-token request.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from aio.settings import TierSettings

logger = logging.getLogger(__name__)

DEMO_SHAPES = {  # hidden, layers, heads, kv heads, intermediate
    "small": (128, 2, 4, 2, 352),
    "medium": (192, 3, 6, 2, 512),
    "large": (256, 4, 8, 4, 704),
}
DEMO_PRICES = {"small": 0.10, "medium": 0.50, "large": 3.00}  # USD per million tokens, input and output
DEMO_MAX_MODEL_LEN = 2048
DEMO_KV_CACHE_BYTES = 64 << 20


def demo_model_name(tier: str) -> str:
    return f"aio-demo-{tier}"


def ensure_demo_checkpoints(home: Path) -> dict[str, Path]:
    """Builds any missing demo checkpoint (seconds each) and returns the folders."""
    from tiers.checkpoints import create_random_checkpoint

    paths: dict[str, Path] = {}
    for seed, (tier, (hidden, layers, heads, kv_heads, inter)) in enumerate(DEMO_SHAPES.items()):
        path = home / "demo" / demo_model_name(tier)
        if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
            start = time.perf_counter()
            create_random_checkpoint(path, "llama", seed=seed, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                     num_kv_heads=kv_heads, intermediate_size=inter, vocab_size=512,
                                     max_position_embeddings=DEMO_MAX_MODEL_LEN)
            logger.info("built demo tier %s in %.1f s at %s", tier, time.perf_counter() - start, path)
        paths[tier] = path
    return paths


def demo_tier_settings(home: Path) -> dict[str, TierSettings]:
    paths = ensure_demo_checkpoints(home)
    return {tier: TierSettings(path=path, model=demo_model_name(tier), input_price_per_million=DEMO_PRICES[tier],
                               output_price_per_million=DEMO_PRICES[tier], kv_cache_bytes=DEMO_KV_CACHE_BYTES,
                               max_num_seqs=64)
            for tier, path in paths.items()}
