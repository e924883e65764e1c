"""Key budgets: a cap on what one API key spends per UTC calendar period, read from the SQL request log.

A key's spend is the sum of its requests' `cost_usd` since its period's start (by arrival time), summed in SQL, so
every replica that shares the database sees the same figure. Periods follow UTC calendar
boundaries: `day` (midnight), `week` (Monday 00:00, ISO weeks), `month` (the 1st, 00:00) and `total` (never resets).
The admission rule that uses it is `aio.http.budget_guard`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aio.db.models import ApiKey, DailyUsage, Request

PERIODS = ("day", "week", "month", "total")


@dataclass(frozen=True)
class Budget:
    """A key's cap: `usd` per `period`; past `soft` × usd (a share, 0 < soft < 1) the key is flagged."""
    usd: float
    period: str = "month"
    soft: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.usd, bool) or not isinstance(self.usd, (int, float)) or not self.usd > 0 \
                or self.usd == float("inf"):
            raise ValueError(f"budget_usd must be a positive number of dollars, got {self.usd!r}")
        if self.period not in PERIODS:
            raise ValueError(f"budget_period must be one of {list(PERIODS)}, got {self.period!r}")
        if self.soft is not None and (isinstance(self.soft, bool) or not isinstance(self.soft, (int, float))
                                      or not 0 < self.soft < 1):
            raise ValueError(f"budget_soft is a share of the budget between 0 and 1 (e.g. 0.8), got {self.soft!r}")

    @classmethod
    def of(cls, key: Any) -> Budget | None:
        """The budget an ApiKeyInfo (or ApiKey row) carries, or None."""
        if key is None or key.budget_usd is None:
            return None
        return cls(key.budget_usd, key.budget_period or "month", key.budget_soft)


def _utc(now: datetime) -> datetime:
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)


def period_start(period: str, now: datetime) -> datetime | None:
    """When the period holding `now` began (UTC); None for `total`."""
    now = _utc(now)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    if period == "total":
        return None
    raise ValueError(f"unknown budget period {period!r}")


def next_reset(period: str, now: datetime) -> datetime | None:
    """When the period holding `now` ends and spend starts again from 0 (UTC); None for `total`."""
    start = period_start(period, now)
    if start is None:
        return None
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(days=7)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def spent(connection: Connection, key_id: int, period: str, now: datetime) -> tuple[float, float | None]:
    """The key's spend in the period holding `now`, and its largest request cost in the period's raw rows (None:
    none). Whole past days come from `daily_usage` (kept by the log writer in the rows' transaction, and kept when
    `aio db prune` deletes raw rows), today from `requests`: the figure survives retention, and stays one indexed
    range per table."""
    start = period_start(period, now)
    today = period_start("day", now)
    u = DailyUsage
    days = sa.select(sa.func.coalesce(sa.func.sum(u.cost_usd), 0.0)) \
        .where(u.dimension == "key", u.value == str(key_id), u.day < today.date())
    if start is not None:
        days = days.where(u.day >= start.date())
    raw = sa.select(sa.func.coalesce(sa.func.sum(Request.cost_usd), 0.0)) \
        .where(Request.key_id == key_id, Request.created_at >= today)
    largest = sa.select(sa.func.max(Request.cost_usd)).where(Request.key_id == key_id)
    if start is not None:
        largest = largest.where(Request.created_at >= start)
    past, current, big = connection.execute(sa.select(days.scalar_subquery(), raw.scalar_subquery(),
                                                      largest.scalar_subquery())).one()
    return float(past or 0.0) + float(current or 0.0), None if big is None else float(big)


@dataclass(frozen=True)
class BudgetState:
    budget_usd: float
    period: str
    spent_usd: float
    next_reset: datetime | None
    soft: float | None = None

    @property
    def left_usd(self) -> float:
        return max(0.0, self.budget_usd - self.spent_usd)

    @property
    def exceeded(self) -> bool:
        return self.spent_usd >= self.budget_usd

    @property
    def soft_exceeded(self) -> bool:
        return self.soft is not None and self.spent_usd >= self.soft * self.budget_usd

    def as_json(self) -> dict[str, Any]:
        return {"budget_usd": self.budget_usd, "period": self.period, "soft": self.soft, "spent_usd": self.spent_usd,
                "left_usd": self.left_usd, "next_reset": self.next_reset.isoformat() if self.next_reset else None,
                "exceeded": self.exceeded, "soft_exceeded": self.soft_exceeded}


def budget_state(connection: Connection, key: Any, now: datetime) -> BudgetState | None:
    """Spent, left and the next reset of a key (ApiKeyInfo or ApiKey row) that has a budget; None otherwise."""
    budget = Budget.of(key)
    if budget is None:
        return None
    total, _ = spent(connection, key.id, budget.period, now)
    return BudgetState(budget.usd, budget.period, total, next_reset(budget.period, now), budget.soft)


def budget_states(connection: Connection, now: datetime) -> dict[int, BudgetState]:
    """The budget state of every active key that has a budget, by key id."""
    rows = connection.execute(sa.select(ApiKey.id, ApiKey.budget_usd, ApiKey.budget_period, ApiKey.budget_soft)
                              .where(ApiKey.revoked_at.is_(None), ApiKey.budget_usd.is_not(None)))
    states = {}
    for row in rows:
        state = budget_state(connection, row, now)
        if state is not None:
            states[row.id] = state
    return states
