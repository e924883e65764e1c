"""Builds the tier pool from settings: local checkpoints on the shared engine, remote servers over HTTP.

A .gguf file that several tiers serve (e.g. at different `quantization`s, as the embedded demo tiers do) is read
once for all of them and dropped when the last of them is built.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from aio.settings import TIER_ORDER, TierSettings
from tiers.engine.llm_engine import Engine
from tiers.models.checkpoint import is_checkpoint
from tiers.models.gguf import GGUFCheckpoint, load_gguf
from tiers.serving.pool import LocalTier, Tier, TierPool, load_local_tier
from tiers.serving.remote import RemoteTier
from tiers.engine.spec_decode.draft_model import DraftModelError

logger = logging.getLogger(__name__)


class TierLoadError(RuntimeError):
    """A configured tier cannot be started: the message names the tier and the cause."""


def build_tier(name: str, tier: TierSettings, is_demo: bool = False, draft: Engine | None = None,
               gguf: GGUFCheckpoint | None = None) -> Tier:
    """draft: the engine of the tier named by tier.draft, whose model drafts for this one. Without it (a tier built
    alone, e.g. the quality monitor's reference) a tier configured to draft from another runs without speculation.
    gguf: tier.path (a .gguf file) already read, shared with other tiers."""
    if tier.is_remote:
        remote = RemoteTier.connect(name, tier.base_url, model=tier.model, max_model_len=tier.max_model_len,
                                    api_key=tier.api_key, timeout_s=tier.request_timeout_s)
        remote.is_demo = is_demo
        return remote
    if not is_checkpoint(tier.path):
        raise TierLoadError(f"tier {name}: {tier.path} is neither a checkpoint folder (no config.json) nor a .gguf "
                            "file")
    config = tier.engine
    if config.speculative == "draft" and draft is None:
        logger.info("tier %s: built without its draft tier %s, so without speculative decoding", name, tier.draft)
        config = replace(config, speculative=None)
    try:
        local: LocalTier = load_local_tier(name, gguf if gguf is not None else tier.path, config,
                                           model=tier.model or _model_name(tier.path), is_demo=is_demo,
                                           draft=draft if config.speculative == "draft" else None)
    except DraftModelError as exc:
        raise TierLoadError(f"tier {name}: tier {tier.draft} cannot draft for it: {exc}") from exc
    return local


def _model_name(path: Path) -> str:
    return path.stem if path.suffix.lower() == ".gguf" else path.name


def _gguf_key(tier: TierSettings) -> Path | None:
    if tier.is_remote or tier.path.suffix.lower() != ".gguf" or not tier.path.is_file():
        return None
    return tier.path.resolve()


class _SharedGGUF:
    """Reads a .gguf file served by several tiers once, and lets it go after the last of them."""

    def __init__(self, tiers: dict[str, TierSettings]) -> None:
        self.users = Counter(key for tier in tiers.values() if (key := _gguf_key(tier)) is not None)
        self.shared = {key for key, users in self.users.items() if users >= 2}  # users counts down as tiers are built
        self.parsed: dict[Path, GGUFCheckpoint] = {}

    def get(self, tier: TierSettings) -> GGUFCheckpoint | None:
        key = _gguf_key(tier)
        if key not in self.shared:
            return None
        if key not in self.parsed:
            start = time.perf_counter()
            self.parsed[key] = load_gguf(key)
            logger.info("read %s once for %d tiers in %.1f s", key.name, self.users[key], time.perf_counter() - start)
        return self.parsed[key]

    def built(self, tier: TierSettings) -> None:
        key = _gguf_key(tier)
        if key is not None:
            self.users[key] -= 1
            if self.users[key] <= 0:
                self.parsed.pop(key, None)


def build_pool(tiers: dict[str, TierSettings], is_demo: bool = False) -> TierPool:
    built: list[Tier] = []
    shared = _SharedGGUF(tiers)
    try:
        for name in sorted(tiers, key=TIER_ORDER.index):  # a draft tier is cheaper, so it is built first
            draft_name = tiers[name].draft
            draft = next((t.engine for t in built if t.name == draft_name and isinstance(t, LocalTier)), None)
            if draft_name is not None and draft is None:
                raise TierLoadError(f"tier {name}: its draft tier {draft_name} is not a local tier of this pool")
            try:
                built.append(build_tier(name, tiers[name], is_demo, draft, shared.get(tiers[name])))
                shared.built(tiers[name])
            except TierLoadError:
                raise
            except Exception as exc:
                raise TierLoadError(f"tier {name} failed to start: {type(exc).__name__}: {exc}") from exc
            logger.info("tier %s ready: %s (max_model_len %d)", name, built[-1].model, built[-1].max_model_len)
    except BaseException:
        for tier in built:
            if isinstance(tier, LocalTier):
                tier.engine.close()
        raise
    return TierPool(built)


def configured_tiers(settings) -> tuple[dict[str, TierSettings], object | None]:
    """The configured tiers, or the embedded demo tiers and what they are (aio.demo.EmbeddedDefault)."""
    if settings.tiers:
        return dict(settings.tiers), None
    from aio.demo import embedded_default

    demo = embedded_default(settings.home, settings.demo_model)
    return demo.tiers, demo
