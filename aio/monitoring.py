"""Wires the quality monitor to the product: replays on a tier of the pool, verdicts and thresholds in SQL,
metrics on /metrics. Used inside `aio serve` (monitor_mode = "serve") and by `aio monitor` (its own process)."""
from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Callable

import sqlalchemy as sa
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from aio.db.leases import SqlLease, holder_name
from aio.db.models import Request, Verification
from aio.db.records import utcnow
from aio.routing import registry
from aio.settings import MONITORED_TIERS, Prices, Settings
from quality_monitor import (AnswerComparer, Candidate, ControllerSettings, QualityMonitor, ReplayResult, Sampler,
                             ThresholdChange, ThresholdController, Verdict)
from tiers.engine.sampling_params import SamplingParams
from tiers.serving.pool import Tier

logger = logging.getLogger(__name__)



class TierReplayer:
    """Replays a request on the reference tier at low priority: live traffic is always scheduled first."""

    def __init__(self, tier: Tier, prices: Prices, priority: int = 10, max_tokens: int = 1024) -> None:
        self.tier, self.prices, self.priority, self.max_tokens = tier, prices, priority, max_tokens

    async def __call__(self, candidate: Candidate) -> ReplayResult:
        params = SamplingParams(max_tokens=max(1, min(candidate.max_tokens, self.max_tokens)), temperature=0.0)
        text, completion, prompt = [], 0, 0
        async for chunk in self.tier.stream_chat(candidate.messages, params, f"verify-{candidate.request_id}",
                                                 priority=self.priority):
            text.append(chunk.delta_text)
            completion += chunk.num_new_tokens
            prompt = chunk.num_prompt_tokens or prompt
        return ReplayResult("".join(text), self.tier.model, prompt, completion, self.prices.cost(prompt, completion))


class SqlVerdictStore:
    def __init__(self, engine: Engine, flush_log: Callable[[float], bool] | None = None, *,
                 store_text: bool = True, demo_tiers: bool = False) -> None:
        self.engine = engine
        self.flush_log = flush_log  # the request row must be written before its verification (foreign key)
        self.store_text = store_text  # log_prompts = false: both answers stay out of the database
        self.demo_tiers = demo_tiers  # the embedded demo tiers answered: the verdict is never a training label

    def save(self, verdict: Verdict) -> None:
        c, r = verdict.candidate, verdict.replay
        row = dict(request_id=c.request_id, tier=c.tier, reference_tier=verdict.reference_tier,
                   reference_model=r.model, reference_answer=r.text if self.store_text else None,
                   similarity=verdict.similarity, passed=verdict.passed, method=verdict.method,
                   detail=verdict.detail or None, answer=c.answer if self.store_text else None,
                   classifier_version=c.classifier_version, routing_score=c.routing_score,
                   judge_prompt_tokens=r.prompt_tokens, judge_completion_tokens=r.completion_tokens,
                   judge_cost_usd=r.cost_usd, demo_tiers=self.demo_tiers)
        for attempt in range(20):
            if self.flush_log is not None:
                self.flush_log(10.0)
            try:
                with Session(self.engine) as session, session.begin():
                    session.add(Verification(**row))
                return
            except IntegrityError:
                time.sleep(0.5)  # the log writer has not stored the request yet (database outage)
        raise RuntimeError(f"request {c.request_id} never reached the log: its verdict is dropped")

    def recent_outcomes(self, tier: str, limit: int) -> list[bool]:
        with Session(self.engine) as session:
            rows = session.scalars(sa.select(Verification.passed).where(Verification.tier == tier)
                                   .order_by(Verification.created_at.desc(), Verification.id.desc()).limit(limit))
            return list(reversed(list(rows)))

    def offsets(self) -> dict[str, float]:
        return registry.router_state(self.engine).offsets

    def shift(self, change: ThresholdChange, max_offset: float) -> dict[str, float]:
        state = registry.shift_offset(self.engine, change.tier, change.new_offset - change.old_offset, max_offset,
                                      updated_by="quality monitor", note=change.reason,
                                      retrain_due_reason=change.reason if change.retrain_due else None)
        return state.offsets

    def verdicts_after(self, cursor: int | None, limit: int = 1000) -> tuple[list[tuple[str, bool]], int | None]:
        with Session(self.engine) as session:
            if cursor is None:
                return [], session.scalar(sa.select(sa.func.max(Verification.id))) or 0
            rows = session.execute(sa.select(Verification.id, Verification.tier, Verification.passed)
                                   .where(Verification.id > cursor).order_by(Verification.id).limit(limit)).all()
        return [(row.tier, bool(row.passed)) for row in rows], (rows[-1].id if rows else cursor)


class MonitorCollector(Collector):
    """The monitor's figures on /metrics."""

    def __init__(self, monitor: QualityMonitor) -> None:
        self.monitor = monitor

    def collect(self):
        m, stats = self.monitor, self.monitor.stats
        samples = CounterMetricFamily("aio:quality_samples", "Answers queued for verification.", labels=["tier"])
        for tier, n in stats.sampled.items():
            samples.add_metric([tier], n)
        verdicts = CounterMetricFamily("aio:quality_verdicts", "Verification verdicts.", labels=["tier", "verdict"])
        for (tier, passed), n in stats.verdicts.items():
            verdicts.add_metric([tier, "pass" if passed else "fail"], n)
        dropped = CounterMetricFamily("aio:quality_dropped", "Sampled answers not verified (queue full, budget).",
                                      labels=["reason"])
        for reason, n in stats.dropped.items():
            dropped.add_metric([reason], n)
        failure = GaugeMetricFamily("aio:quality_failure_rate", "Failed share of the last N verdicts.",
                                    labels=["tier"])
        offset = GaugeMetricFamily("aio:routing_threshold_offset", "Per-tier threshold offset set by the monitor.",
                                   labels=["tier"])
        for tier in m.sampler.tiers:
            rate = m.controller.failure_rate(tier)
            if rate is not None:
                failure.add_metric([tier], rate)
            offset.add_metric([tier], m.controller.offsets.get(tier, 0.0))
        depth = GaugeMetricFamily("aio:quality_replay_queue_depth", "Answers waiting for a replay.")
        depth.add_metric([], m.queue.qsize())
        cost = CounterMetricFamily("aio:judge_cost_usd", "What the replays cost (not user traffic), in USD.")
        cost.add_metric([], stats.judge_cost_usd)
        tokens = CounterMetricFamily("aio:judge_tokens", "Tokens the replays used (not user traffic).")
        tokens.add_metric([], stats.judge_tokens)
        yield from (samples, verdicts, dropped, failure, offset, depth, cost, tokens)


MONITOR_LEASE = "quality-monitor"


def build_monitor(settings: Settings, reference: Tier, prices: Prices, store: SqlVerdictStore,
                  on_change=None, holder: str | None = None) -> QualityMonitor:
    """The monitor; it moves thresholds only while it holds the deployment's "quality-monitor" lease."""
    controller = ThresholdController(ControllerSettings(
        window=settings.quality_window, min_verdicts=settings.quality_min_verdicts,
        max_failure_rate=settings.quality_max_failure_rate, recover_rate=settings.quality_recover_rate,
        step=settings.quality_step, max_offset=settings.quality_max_offset, cooldown=settings.quality_cooldown))
    return QualityMonitor(
        TierReplayer(reference, prices, settings.quality_replay_priority, settings.quality_replay_max_tokens), store,
        reference_tier=reference.name, sampler=Sampler(settings.quality_sample_rate, MONITORED_TIERS),
        comparer=AnswerComparer(), controller=controller, pass_threshold=settings.quality_pass_threshold,
        queue_size=settings.quality_queue_size, budget_tokens_per_hour=settings.quality_budget_tokens_per_hour,
        max_concurrent=settings.quality_max_concurrent, on_change=on_change,
        leadership=SqlLease(store.engine, MONITOR_LEASE, holder or holder_name(settings.replica),
                            settings.quality_lease_ttl_s),
        control_interval_s=settings.quality_control_interval_s)


def unverified_candidates(engine: Engine, lookback: timedelta, quality: float,
                          offsets: dict[str, float]) -> list[Candidate]:
    """Finished low-tier answers of the last `lookback` without a verdict (for `aio monitor`)."""
    verified = sa.select(Verification.request_id)
    query = (sa.select(Request).where(Request.created_at >= utcnow() - lookback, Request.status == "ok",
                                      Request.tier.in_(MONITORED_TIERS), Request.prompt.is_not(None),
                                      Request.answer.is_not(None), Request.request_id.not_in(verified))
             .order_by(Request.created_at))
    out = []
    with Session(engine) as session:
        for row in session.scalars(query):
            try:
                messages = json.loads(row.prompt)
            except ValueError:
                continue
            threshold = (row.quality if row.quality is not None else quality) + offsets.get(row.tier, 0.0)
            # The request's max_tokens is not logged: an answer cut by it gets the same length, others room.
            max_tokens = row.completion_tokens if row.finish_reason == "length" else max(16, 2 * row.completion_tokens)
            out.append(Candidate(row.request_id, row.tier, messages, row.answer, max(1, max_tokens),
                                 row.routing_score, threshold, row.classifier_version))
    return out
