"""Prometheus metrics. Names follow vLLM's (`vllm:*`) where vLLM has the metric, so its dashboards work;
AIO's own (routing, cost) are `aio:*`. Every series carries the tier (and model_name as vLLM does)."""
from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tiers.serving.pool import TierLoad

TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0)


class _TierLoadCollector(Collector):
    """Queue depth and KV-cache usage, read from the tiers at scrape time."""

    def __init__(self, loads: Callable[[], Iterable[tuple[str, str, TierLoad]]]) -> None:
        self._loads = loads

    def collect(self):
        running = GaugeMetricFamily("vllm:num_requests_running", "Requests in model execution batches.",
                                    labels=["tier", "model_name"])
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting to be processed.",
                                    labels=["tier", "model_name"])
        kv = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                               labels=["tier", "model_name"])
        # Speculative decoding, as vLLM names it (v1's counters, v0's acceptance-rate gauge).
        acceptance = GaugeMetricFamily("vllm:spec_decode_draft_acceptance_rate",
                                       "Accepted draft tokens / proposed draft tokens.", labels=["tier", "model_name"])
        drafts = CounterMetricFamily("vllm:spec_decode_num_drafts", "Verifications of draft tokens.",
                                     labels=["tier", "model_name"])
        draft_tokens = CounterMetricFamily("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.",
                                           labels=["tier", "model_name"])
        accepted = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.",
                                       labels=["tier", "model_name"])
        for tier, model, load in self._loads():
            running.add_metric([tier, model], load.num_running)
            waiting.add_metric([tier, model], load.num_waiting)
            if load.kv_cache_usage is not None:
                kv.add_metric([tier, model], load.kv_cache_usage)
            spec = load.speculative
            if spec is not None:
                acceptance.add_metric([tier, model], spec.acceptance_rate)
                drafts.add_metric([tier, model], spec.num_verifications)
                draft_tokens.add_metric([tier, model], spec.num_draft_tokens)
                accepted.add_metric([tier, model], spec.num_accepted_tokens)
        yield from (running, waiting, kv, acceptance, drafts, draft_tokens, accepted)


class Metrics:
    def __init__(self, loads: Callable[[], Iterable[tuple[str, str, TierLoad]]] | None = None) -> None:
        self.registry = CollectorRegistry()
        labels = ["tier", "model_name"]
        r = self.registry
        self.requests = Counter("aio:requests", "Chat requests by tier, routing reason and status.",
                                ["tier", "reason", "status"], registry=r)
        self.request_success = Counter("vllm:request_success", "Finished requests by finish reason.",
                                       labels + ["finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generation tokens produced.", labels, registry=r)
        self.cost = Counter("aio:cost_usd", "What the answers cost, in USD.", ["tier"], registry=r)
        self.baseline_cost = Counter("aio:baseline_cost_usd", "What the large tier would have cost, in USD.",
                                     ["tier"], registry=r)
        self.cascades = Counter("aio:cascades", "Answers the confidence cascade replaced with a larger tier's, by the "
                                "tier that answered and the tier that answered again.", ["from_tier", "to_tier"],
                                registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", labels,
                              buckets=TTFT_BUCKETS, registry=r)
        self.inter_token = Histogram("vllm:inter_token_latency_seconds", "Time between output tokens.", labels,
                                     buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", labels,
                             buckets=E2E_BUCKETS, registry=r)
        self.queue_time = Histogram("vllm:request_queue_time_seconds", "Time in the engine's waiting queue.", labels,
                                    buckets=TTFT_BUCKETS, registry=r)
        if loads is not None:
            r.register(_TierLoadCollector(loads))
