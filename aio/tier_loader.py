"""Builds the tier pool from settings: local checkpoints on the shared engine, remote servers over HTTP."""
from __future__ import annotations

import logging
from dataclasses import replace

from aio.settings import TIER_ORDER, TierSettings
from tiers.llm_engine import Engine
from tiers.models.checkpoint import is_checkpoint
from tiers.pool import LocalTier, Tier, TierPool, load_local_tier
from tiers.remote import RemoteTier
from tiers.spec_decode.draft_model import DraftModelError

logger = logging.getLogger(__name__)


class TierLoadError(RuntimeError):
    """A configured tier cannot be started: the message names the tier and the cause."""


def build_tier(name: str, tier: TierSettings, is_demo: bool = False, draft: Engine | None = None) -> Tier:
    """draft: the engine of the tier named by tier.draft, whose model drafts for this one. Without it (a tier built
    alone, e.g. the quality monitor's reference) a tier configured to draft from another runs without speculation."""
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
        local: LocalTier = load_local_tier(name, tier.path, config, model=tier.model, is_demo=is_demo,
                                           draft=draft if config.speculative == "draft" else None)
    except DraftModelError as exc:
        raise TierLoadError(f"tier {name}: tier {tier.draft} cannot draft for it: {exc}") from exc
    return local


def build_pool(tiers: dict[str, TierSettings], is_demo: bool = False) -> TierPool:
    built: list[Tier] = []
    try:
        for name in sorted(tiers, key=TIER_ORDER.index):  # a draft tier is cheaper, so it is built first
            draft_name = tiers[name].draft
            draft = next((t.engine for t in built if t.name == draft_name and isinstance(t, LocalTier)), None)
            if draft_name is not None and draft is None:
                raise TierLoadError(f"tier {name}: its draft tier {draft_name} is not a local tier of this pool")
            try:
                built.append(build_tier(name, tiers[name], is_demo, draft))
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
