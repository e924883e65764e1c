"""The shipped default quality: calibrated for the shipped classifier to send about 20% of the seed data's
held-out prompts to the large tier; its split agrees with the router's own rule; the settings use it unless
told otherwise, and `aio serve` / `aio router thresholds` say what it does."""
from __future__ import annotations

import numpy as np
import pytest

from aio.commands.thresholds_view import startup_routing_line
from aio.routing import Router
from aio.routing_default import shipped
from aio.settings import TIER_ORDER, load_settings


class Stub:
    version = "stub"


@pytest.fixture(scope="module")
def calibration():
    found = shipped()
    assert found is not None, "aio/routing_default.json is missing: python -m aio.routing.build_default_quality"
    return found


def test_the_calibration_is_for_the_shipped_classifier(calibration):
    import classifier

    assert calibration.classifier_version == classifier.load_default().version, \
        "classifier/default/ changed: run `python -m aio.routing.build_default_quality` again"


def test_the_default_sends_the_documented_share_to_large(calibration):
    split = calibration.split(calibration.quality)
    assert split["large"] == pytest.approx(calibration.large_share, abs=0.01)
    assert calibration.large_share == 0.2 and sum(split.values()) == pytest.approx(1.0)
    assert calibration.split(0.5)["small"] > 0.9  # what the old default (0.5) did: almost all to small


def test_the_split_follows_the_routers_own_rule(calibration):
    proba = np.array([[s, m - s, 1 - m] for s, m in zip(calibration.p_small, calibration.p_medium)])
    for tiers in (TIER_ORDER, ("small", "large"), ("medium", "large")):
        router = Router(Stub(), tiers, calibration.quality)
        counts = {t: 0 for t in tiers}
        for row in proba:
            counts[router.decide(row).tier] += 1
        expected = {t: c / len(proba) for t, c in counts.items()}
        assert calibration.split(calibration.quality, tuple(tiers)) == pytest.approx(expected)


def test_settings_use_the_default_unless_set_and_serve_prints_the_split(calibration, monkeypatch):
    monkeypatch.delenv("AIO_QUALITY", raising=False)
    settings = load_settings()
    assert settings.quality == calibration.quality
    line = startup_routing_line(settings)
    split = calibration.split(calibration.quality)
    assert f"quality {calibration.quality:.4f} (the shipped default" in line
    assert f"large {split['large']:.0%}" in line and calibration.classifier_version in line
    monkeypatch.setenv("AIO_QUALITY", "0.3")
    assert "quality 0.3000 (from the settings" in startup_routing_line(load_settings())
