"""The quality monitor: verifies a sample of low-tier answers on the reference tier and moves routing
thresholds when quality drops. It talks to tiers and storage only through the interfaces `aio` hands it."""
from quality_monitor.controller import ControllerSettings, ThresholdController
from quality_monitor.interfaces import Candidate, ReplayResult, ThresholdChange, Verdict
from quality_monitor.monitor import MonitorStats, QualityMonitor
from quality_monitor.sampling import Sampler
from quality_monitor.similarity import AnswerComparer, Comparison, structured_match

__all__ = ["AnswerComparer", "Candidate", "Comparison", "ControllerSettings", "MonitorStats", "QualityMonitor",
           "ReplayResult", "Sampler", "ThresholdChange", "ThresholdController", "Verdict", "structured_match"]
