"""Auto-promotion: per tier, the failure rate over the last N verdicts moves that tier's routing threshold.

Above `max_failure_rate` (default 15%), the tier's offset rises by `step` (bounded by `max_offset`), so the
router sends more traffic to larger tiers, and a retrain is marked due. Below `recover_rate` the offset falls by
half a step. After each change the tier waits `cooldown` new verdicts before the next one, so one bad stretch
moves the threshold once per cooldown, not once per verdict.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from quality_monitor.interfaces import ThresholdChange


@dataclass
class ControllerSettings:
    window: int = 100
    min_verdicts: int = 20
    max_failure_rate: float = 0.15
    recover_rate: float = 0.08
    step: float = 0.05
    max_offset: float = 0.3
    cooldown: int = 25


class ThresholdController:
    def __init__(self, settings: ControllerSettings | None = None, offsets: dict[str, float] | None = None) -> None:
        self.settings = settings or ControllerSettings()
        self.offsets = dict(offsets or {})
        self._outcomes: dict[str, deque[bool]] = {}
        self._since_change: dict[str, int] = {}

    def reset(self) -> None:
        """Forget every verdict (offsets stay)."""
        self._outcomes.clear()
        self._since_change.clear()

    def warm_start(self, tier: str, outcomes: list[bool]) -> None:
        """Past verdicts, oldest first (from the log), so a restart does not forget the window."""
        window = self._window(tier)
        window.extend(outcomes[-self.settings.window:])
        self._since_change[tier] = len(window)

    def _window(self, tier: str) -> deque[bool]:
        return self._outcomes.setdefault(tier, deque(maxlen=self.settings.window))

    def failure_rate(self, tier: str) -> float | None:
        window = self._outcomes.get(tier)
        if not window:
            return None
        return 1.0 - sum(window) / len(window)

    def record(self, tier: str, passed: bool) -> ThresholdChange | None:
        self._window(tier).append(passed)
        self._since_change[tier] = self._since_change.get(tier, 0) + 1
        return self.decide(tier)

    def decide(self, tier: str) -> ThresholdChange | None:
        """The change the tier's current window calls for (once enough verdicts since the last), if any."""
        s = self.settings
        window = self._window(tier)
        if len(window) < s.min_verdicts or self._since_change[tier] < s.cooldown:
            return None
        rate = self.failure_rate(tier)
        old = self.offsets.get(tier, 0.0)
        if rate > s.max_failure_rate and old < s.max_offset:
            new, retrain = min(s.max_offset, old + s.step), True
            reason = (f"{tier}: {rate:.0%} of the last {len(window)} verified answers failed (> "
                      f"{s.max_failure_rate:.0%}): threshold offset {old:+.2f} -> {new:+.2f}, retrain due")
        elif rate < s.recover_rate and old > 0.0:
            new, retrain = max(0.0, old - s.step / 2), False
            reason = (f"{tier}: failure rate recovered to {rate:.0%} over {len(window)} verdicts: threshold offset "
                      f"{old:+.2f} -> {new:+.2f}")
        else:
            return None
        self.offsets[tier] = round(new, 6)
        self._since_change[tier] = 0
        return ThresholdChange(tier, old, self.offsets[tier], rate, len(window), reason, retrain)
