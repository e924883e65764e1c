"""The SQL schema (SQLAlchemy 2.x typed ORM). `aio/db/migrations/` creates it; a test keeps the two from drifting."""
from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from aio.db.records import utcnow

# Named constraints: Alembic's batch mode (SQLite) can only alter or drop constraints that have a name.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp stored in UTC that always comes back tz-aware (UTC), on SQLite too.

    Naive datetimes are taken to be UTC already. PostgreSQL stores `timestamptz`; SQLite, which has no time zone
    type, stores the UTC wall time as text (which also sorts correctly).
    """
    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: sa.JSON(), list[float]: sa.JSON()}


class Request(Base):
    """One chat request, written once by the log writer (mirrors `aio.db.records.RequestRecord`)."""
    __tablename__ = "requests"
    __table_args__ = (sa.Index("ix_requests_key_id_created_at", "key_id", "created_at"),)  # a key's spend (budgets)

    request_id: Mapped[str] = mapped_column(sa.String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(index=True, default=utcnow)
    status: Mapped[str] = mapped_column(sa.String)  # ok | error | cancelled | rejected
    key_id: Mapped[int | None]
    user: Mapped[str | None] = mapped_column(sa.String)
    prompt: Mapped[str | None] = mapped_column(sa.Text)  # NULL: redacted (log_prompts = false)
    answer: Mapped[str | None] = mapped_column(sa.Text)
    tier: Mapped[str | None] = mapped_column(sa.String, index=True)
    model: Mapped[str | None] = mapped_column(sa.String)
    routing_reason: Mapped[str | None] = mapped_column(sa.String)
    classifier_version: Mapped[str | None] = mapped_column(sa.String)
    routing_score: Mapped[float | None]
    tier_scores: Mapped[list[float] | None]
    quality: Mapped[float | None]
    prompt_tokens: Mapped[int] = mapped_column(default=0)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    cost_usd: Mapped[float] = mapped_column(default=0.0)
    baseline_cost_usd: Mapped[float] = mapped_column(default=0.0)
    ttft_ms: Mapped[float | None]
    latency_ms: Mapped[float | None]
    itl_ms: Mapped[float | None]  # mean time between the first choice's output tokens
    queue_ms: Mapped[float | None]  # time waiting for the engine, when the tier reports it
    finish_reason: Mapped[str | None] = mapped_column(sa.String)
    stream: Mapped[bool] = mapped_column(default=False)
    num_choices: Mapped[int] = mapped_column(default=1)
    http_status: Mapped[int] = mapped_column(default=200)
    error: Mapped[str | None] = mapped_column(sa.Text)
    replica: Mapped[str | None] = mapped_column(sa.String)  # the server that answered (settings.replica)
    # the confidence cascade: the served answer's confidence (when judged); the replaced first answer's tier and
    # confidence, and what the replaced answers cost (part of cost_usd)
    confidence: Mapped[float | None]
    cascade_from_tier: Mapped[str | None] = mapped_column(sa.String)
    cascade_confidence: Mapped[float | None]
    cascade_cost_usd: Mapped[float | None]
    # answered from the exact answer cache (aio.answer_cache): no tokens billed; what the first answer cost
    cache_hit: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    cache_saved_usd: Mapped[float | None]


class AnswerCacheEntry(Base):
    """An answer in the SQL answer cache (`answer_cache = "sql"`), under the SHA-256 of its request's key (never the
    prompt). Deleted with the request log's raw rows past `raw_retention_days`."""
    __tablename__ = "answer_cache"

    key_hash: Mapped[str] = mapped_column(sa.String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    body: Mapped[str] = mapped_column(sa.Text)  # the first answer's response body (JSON)
    tier: Mapped[str] = mapped_column(sa.String)
    model: Mapped[str] = mapped_column(sa.String)
    cost_usd: Mapped[float]
    baseline_cost_usd: Mapped[float]
    request_id: Mapped[str] = mapped_column(sa.String)  # the request that produced it


class Verification(Base):
    """The quality monitor's verdict on one answer: replayed on a reference tier and compared."""
    __tablename__ = "verifications"

    id: Mapped[int] = mapped_column(primary_key=True)
    request_id: Mapped[str] = mapped_column(sa.ForeignKey("requests.request_id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    tier: Mapped[str] = mapped_column(sa.String)  # the verified tier
    reference_tier: Mapped[str] = mapped_column(sa.String)
    reference_model: Mapped[str | None] = mapped_column(sa.String)
    reference_answer: Mapped[str | None] = mapped_column(sa.Text)
    similarity: Mapped[float]
    passed: Mapped[bool]
    method: Mapped[str] = mapped_column(sa.String)
    detail: Mapped[dict[str, Any] | None]
    answer: Mapped[str | None] = mapped_column(sa.Text)  # the verified (low-tier) answer
    classifier_version: Mapped[str | None] = mapped_column(sa.String)
    routing_score: Mapped[float | None]
    judge_prompt_tokens: Mapped[int] = mapped_column(default=0, server_default="0")
    judge_completion_tokens: Mapped[int] = mapped_column(default=0, server_default="0")
    judge_cost_usd: Mapped[float] = mapped_column(default=0.0, server_default="0")  # never in user-facing cost
    # both answers came from the embedded demo tiers (one model, or random weights): never a training label
    demo_tiers: Mapped[bool] = mapped_column(default=False, server_default=sa.false())


class ClassifierVersion(Base):
    """A trained (or built-in) router classifier; at most one is `active`."""
    __tablename__ = "classifier_versions"

    version: Mapped[str] = mapped_column(sa.String, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(sa.String)  # heuristic | sklearn-head | finetuned
    path: Mapped[str | None] = mapped_column(sa.String)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    num_train_examples: Mapped[int] = mapped_column(default=0)
    active: Mapped[bool] = mapped_column(default=False)
    promoted_at: Mapped[datetime | None]
    notes: Mapped[str | None] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String, default="candidate",
                                        server_default="candidate")  # candidate | active | rejected | retired
    data_counts: Mapped[dict[str, Any] | None]  # training examples by source, held-out size
    parent_version: Mapped[str | None] = mapped_column(sa.String)  # the version it was evaluated against
    model_blob: Mapped[bytes | None] = mapped_column(sa.LargeBinary)  # the saved folder, tar.gz: any replica loads it


class RouterSettings(Base):
    """Routing thresholds set at run time (`aio router calibrate`, the quality monitor); one row, id 1. Servers
    poll it: `quality` (when set) replaces the settings' default, `offsets` raise per-tier thresholds."""
    __tablename__ = "router_settings"

    id: Mapped[int] = mapped_column(primary_key=True)
    quality: Mapped[float | None]
    offsets: Mapped[dict[str, Any] | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str] = mapped_column(sa.String)
    note: Mapped[str | None] = mapped_column(sa.Text)
    retrain_due_at: Mapped[datetime | None]  # set by the quality monitor; `aio retrain --if-due` clears it
    retrain_due_reason: Mapped[str | None] = mapped_column(sa.Text)


class UsageSums:
    """Requests, errors (status not "ok"), tokens and costs: the sums daily_aggregates and daily_usage both keep."""
    num_requests: Mapped[int] = mapped_column(default=0)
    num_errors: Mapped[int] = mapped_column(default=0)
    prompt_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(default=0.0)
    baseline_cost_usd: Mapped[float] = mapped_column(default=0.0)


class DailyAggregate(UsageSums, Base):
    """Per UTC day and tier sums over `requests`, kept by the log writer in the same transaction as the rows.

    Requests without a tier (rejected before routing) count under tier "none". `num_errors` counts requests whose
    status is not "ok". Means: sum_latency_ms / num_latency, sum_ttft_ms / num_ttft (NULLs are not counted).
    """
    __tablename__ = "daily_aggregates"

    day: Mapped[date] = mapped_column(primary_key=True)
    tier: Mapped[str] = mapped_column(sa.String, primary_key=True)
    sum_latency_ms: Mapped[float] = mapped_column(default=0.0)
    num_latency: Mapped[int] = mapped_column(default=0)
    sum_ttft_ms: Mapped[float] = mapped_column(default=0.0)
    num_ttft: Mapped[int] = mapped_column(default=0)
    num_escalations: Mapped[int] = mapped_column(default=0, server_default="0")  # routing_reason "escalation"
    num_fallbacks: Mapped[int] = mapped_column(default=0, server_default="0")  # routing_reason "fallback"
    # requests the confidence cascade answered again, counted under the tier that served the last answer, and what
    # their replaced answers cost (already part of cost_usd)
    num_cascades: Mapped[int] = mapped_column(default=0, server_default="0")
    cascade_cost_usd: Mapped[float] = mapped_column(default=0.0, server_default="0")


class DailyHistogram(Base):
    """Per UTC day, tier and metric, how many requests fell in each fixed bucket (`aio.db.histograms`): latency
    percentiles and the routing-score distribution over long ranges without reading raw rows. Kept by the log
    writer in the same transaction as the rows; NULL values are not counted."""
    __tablename__ = "daily_histograms"

    day: Mapped[date] = mapped_column(primary_key=True)
    tier: Mapped[str] = mapped_column(sa.String, primary_key=True)
    metric: Mapped[str] = mapped_column(sa.String, primary_key=True)  # a latency column, or routing_score
    bucket: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(sa.BigInteger, default=0)


class DailyUsage(UsageSums, Base):
    """Per UTC day, tier and one dimension's value (the API key id, the `user` or the model): requests, tokens and
    costs, for the dashboard's cost breakdowns. One row per value and dimension (not per combination), so the table
    stays small however many users there are. No value (no key, no user) is ''; `user` is cut to 200 characters."""
    __tablename__ = "daily_usage"

    day: Mapped[date] = mapped_column(primary_key=True)
    tier: Mapped[str] = mapped_column(sa.String, primary_key=True)
    dimension: Mapped[str] = mapped_column(sa.String, primary_key=True)  # key | user | model
    value: Mapped[str] = mapped_column(sa.String, primary_key=True)


class ThresholdChange(Base):
    """Every change of the router settings (the quality monitor, `aio router`): the dashboard's history."""
    __tablename__ = "threshold_changes"

    id: Mapped[int] = mapped_column(primary_key=True)
    changed_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    quality: Mapped[float | None]
    offsets: Mapped[dict[str, Any] | None]
    updated_by: Mapped[str] = mapped_column(sa.String)
    note: Mapped[str | None] = mapped_column(sa.Text)


class ApiKey(Base):
    """An API key: only its first characters (`prefix`, for lookup) and its SHA-256 are stored."""
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String)
    prefix: Mapped[str] = mapped_column(sa.String, index=True, unique=True)
    key_hash: Mapped[str] = mapped_column(sa.String)  # sha256 hex of the whole key
    role: Mapped[str] = mapped_column(sa.String, default="user")  # user | admin
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    rpm_limit: Mapped[int | None]  # requests per minute (per replica); None: no limit
    tpm_limit: Mapped[int | None]  # prompt + completion tokens per minute (per replica)
    max_streams: Mapped[int | None]  # requests in flight at once (per replica)
    # a spend cap (aio.db.budgets): USD per UTC day / ISO week / month, or in total; a soft share warns first
    budget_usd: Mapped[float | None]
    budget_period: Mapped[str | None] = mapped_column(sa.String)  # day | week | month | total
    budget_soft: Mapped[float | None]  # share of budget_usd (0 < x < 1) past which the key is flagged


class BudgetHold(Base):
    """A budgeted key's request that started and whose row is not in `requests` yet, with the cost it may reach
    (aio.http.budget_guard): every replica counts it against the key's budget until the row is written."""
    __tablename__ = "budget_holds"

    request_id: Mapped[str] = mapped_column(sa.String, primary_key=True)
    key_id: Mapped[int] = mapped_column(index=True)
    estimate_usd: Mapped[float]
    replica: Mapped[str | None] = mapped_column(sa.String)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]


class Lease(Base):
    """A named lease one process holds until `expires_at_s` (Unix time) unless it renews it: e.g. the one quality
    monitor controller of a deployment."""
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(sa.String, primary_key=True)
    holder: Mapped[str] = mapped_column(sa.String)
    expires_at_s: Mapped[float]


class DashboardSession(Base):
    """A dashboard sign-in: the browser holds a random token, the table only its SHA-256. A session ends at
    `expires_at`, at logout (`revoked_at`), or when the key it was opened with stops being a valid admin key: an
    admin-role API key (`key_id`) revoked, or the configured admin key changed (`admin_binding` no longer matches)."""
    __tablename__ = "dashboard_sessions"

    token_hash: Mapped[str] = mapped_column(sa.String, primary_key=True)
    key_id: Mapped[int | None] = mapped_column(sa.ForeignKey("api_keys.id"), index=True)
    admin_binding: Mapped[str | None] = mapped_column(sa.String)  # HMAC(admin key, token) for the configured key
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    revoked_at: Mapped[datetime | None]
    client: Mapped[str | None] = mapped_column(sa.String)  # the address it signed in from (for the operator)


class ProbeRun(Base):
    """One tier model's measurement by the built-in probe set (`aio calibrate`): keyed by the tier's fingerprint
    (model file hash plus the settings that change answers), so a changed model is measured again."""
    __tablename__ = "probe_runs"

    fingerprint: Mapped[str] = mapped_column(sa.String, primary_key=True)
    tier: Mapped[str] = mapped_column(sa.String)
    model: Mapped[str] = mapped_column(sa.String)
    probe_set: Mapped[str] = mapped_column(sa.String)  # the probe set's version
    planned: Mapped[int]  # tasks this tier is to answer (fewer for a slow or remote tier)
    status: Mapped[str] = mapped_column(sa.String)  # running | measured | failed
    source: Mapped[str] = mapped_column(sa.String)  # probe (measured here) | shipped (a demo's measurement)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    note: Mapped[str | None] = mapped_column(sa.Text)


class ProbeResult(Base):
    """A tier's answer to one probe task, scored against the task's computed truth: a labelled row (source `probe`)
    that routing learns from, beside the quality monitor's verdicts."""
    __tablename__ = "probe_results"
    __table_args__ = (sa.UniqueConstraint("fingerprint", "task_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    fingerprint: Mapped[str] = mapped_column(sa.String, index=True)
    tier: Mapped[str] = mapped_column(sa.String)
    task_id: Mapped[str] = mapped_column(sa.String)
    category: Mapped[str] = mapped_column(sa.String)
    difficulty: Mapped[int]
    prompt: Mapped[str] = mapped_column(sa.Text)
    answer: Mapped[str | None] = mapped_column(sa.Text)
    correct: Mapped[bool]
    finish_reason: Mapped[str | None] = mapped_column(sa.String)
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    cost_usd: Mapped[float]
    latency_ms: Mapped[float | None]
    token_logprobs: Mapped[list[float] | None]  # the chosen tokens' logprobs (the model's raw distribution)
    token_margins: Mapped[list[float] | None]  # per token: the best alternative's logprob below the chosen one's


class RoutingFit(Base):
    """Routing fitted to the tiers' outcomes (probe results and verdicts): per-tier calibration of the classifier's
    scores, the thresholds for the quality target and the answer scorer, as JSON. At most one is active."""
    __tablename__ = "routing_fits"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    classifier_version: Mapped[str] = mapped_column(sa.String)  # the scores it calibrates
    fingerprints: Mapped[dict[str, Any]]  # tier -> the fingerprint its outcomes came from
    fit: Mapped[dict[str, Any]]
    active: Mapped[bool] = mapped_column(default=False)
    note: Mapped[str | None] = mapped_column(sa.Text)
