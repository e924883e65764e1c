"""The budget rule at a request's start. A key whose spend in its period (`aio.db.budgets`: the request log's sum,
in SQL) has reached its budget gets 429 `budget_exceeded`, with the reset time in the message and in
`x-aio-budget-reset`. Requests in flight may finish.

Replicas sharing one database also keep their requests in flight from overrunning the budget together: each
budgeted request that starts leaves a hold in `budget_holds` (its request id and the cost it may reach: the key's
largest request cost this period) until its row is in the request log. Admission runs in one transaction per key
(PostgreSQL: the key's row locked FOR UPDATE; one process on SQLite: a lock per key), and a request starts when

- spent < budget, and
- no hold is open for the key, or spent + the open holds + its own estimate stay below the budget;

otherwise it waits (polling) for a hold to clear, and gets 429 after `wait_s`. A key's first request of a period
(no cost known yet) starts only with no other hold open. So the budget is overrun by at most the one request that
started alone, plus what any request costs beyond the largest seen earlier in the period: no more than one request
in flight per replica. The soft limit logs one warning per key and period. While the database cannot be reached,
a budgeted key's requests get 503 (the cap is not lifted); keys without a budget are not affected.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aio.api.errors import APIError
from aio.db.budgets import Budget, next_reset, period_start, spent as key_spend
from aio.db.keys import ApiKeyInfo
from aio.db.models import ApiKey, BudgetHold, Request
from aio.db.records import utcnow

logger = logging.getLogger(__name__)

RESET_HEADER = "x-aio-budget-reset"
DEFAULT_WAIT_S = 30.0
POLL_S = 0.05
HOLD_TTL = timedelta(minutes=30)  # a hold whose row never came (a replica died without its journal) lapses


class BudgetExceeded(APIError):
    def __init__(self, message: str, reset: datetime | None, now: datetime) -> None:
        retry_after = None if reset is None else max(1.0, (reset - now).total_seconds())
        super().__init__(429, message, code="budget_exceeded", retry_after_s=retry_after)
        self.reset = reset
        self.budget_headers = {RESET_HEADER: reset.isoformat()} if reset is not None else {}


def usd(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.6f}".rstrip("0").rstrip(".").replace("$.", "$0.")


@dataclass(frozen=True)
class _Decision:
    started: bool
    spent: float
    held: float = 0.0
    holds: int = 0


class BudgetGuard:
    """One per replica: `admit(key, request_id)` before a request starts."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow, wait_s: float = DEFAULT_WAIT_S,
                 replica: str | None = None) -> None:
        self._engine = engine
        self._clock = clock
        self.wait_s = wait_s
        self.replica = replica
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._warned: set[tuple[int, datetime | None]] = set()  # (key, period start): soft-limit warnings logged

    async def admit(self, key: ApiKeyInfo | None, request_id: str) -> None:
        """Returns once the request may start; raises BudgetExceeded (429). No-op for a key without a budget."""
        budget = Budget.of(key)
        if budget is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            now = self._clock()
            try:
                decision = await asyncio.to_thread(self._try_start, key.id, budget, request_id, now)
            except sa.exc.SQLAlchemyError as exc:  # a cap that cannot be checked is not lifted: fail closed
                logger.warning("budget check for API key %d failed: %s", key.id, exc)
                raise APIError(503, "cannot check this API key's budget right now; retry later",
                               code="database_unavailable", retry_after_s=5) from exc
            self._warn_soft(key, budget, decision.spent, period_start(budget.period, now))
            reset = next_reset(budget.period, now)
            if decision.started:
                return
            if decision.spent >= budget.usd:
                raise BudgetExceeded(self._message(key, budget, decision.spent, reset), reset, now)
            if loop.time() >= deadline:
                raise BudgetExceeded(
                    f"API key {key.name!r} has {usd(budget.usd - decision.spent)} of its {budget.period} budget "
                    f"left, which its {decision.holds} request(s) in flight may use up; retry when they finish",
                    None, now)
            await asyncio.sleep(POLL_S)

    def _lock(self, key_id: int) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key_id, threading.Lock())

    def _try_start(self, key_id: int, budget: Budget, request_id: str, now: datetime) -> _Decision:
        with self._lock(key_id), self._engine.begin() as connection:
            if connection.dialect.name == "postgresql":  # serialises admissions of this key across replicas
                connection.execute(sa.select(ApiKey.id).where(ApiKey.id == key_id).with_for_update())
            _clear_holds(connection, key_id, now)
            spent, largest = key_spend(connection, key_id, budget.period, now)
            held, holds = connection.execute(
                sa.select(sa.func.coalesce(sa.func.sum(BudgetHold.estimate_usd), 0.0), sa.func.count())
                .where(BudgetHold.key_id == key_id)).one()
            held = float(held or 0.0)
            if spent >= budget.usd:
                return _Decision(False, spent, held, holds)
            known = largest is not None and largest > 0
            if holds and (not known or spent + held + largest >= budget.usd):
                return _Decision(False, spent, held, holds)
            # unknown cost (the period's first paid request): it may use what is left
            estimate = largest if known else budget.usd - spent
            connection.execute(sa.insert(BudgetHold).values(
                request_id=request_id, key_id=key_id, estimate_usd=estimate, replica=self.replica, created_at=now,
                expires_at=now + HOLD_TTL))
            return _Decision(True, spent, held, holds)

    def _warn_soft(self, key: ApiKeyInfo, budget: Budget, spent: float, start: datetime | None) -> None:
        if budget.soft is None or spent < budget.soft * budget.usd or (key.id, start) in self._warned:
            return
        self._warned.add((key.id, start))
        logger.warning("API key %d %r has spent %s of its %s budget of %s (soft limit %g%%)", key.id, key.name,
                       usd(spent), budget.period, usd(budget.usd), budget.soft * 100)

    @staticmethod
    def _message(key: ApiKeyInfo, budget: Budget, spent: float, reset: datetime | None) -> str:
        when = f"it resets at {reset.isoformat()}" if reset is not None else \
            "a total budget does not reset: raise it with `aio keys update --budget-usd`"
        return f"API key {key.name!r} has spent {usd(spent)} of its {budget.period} budget of {usd(budget.usd)}; {when}"


def _clear_holds(connection: Connection, key_id: int, now: datetime) -> None:
    """The key's holds whose rows are in the log (their cost counts there now), and lapsed ones, go."""
    written = sa.select(Request.request_id).where(Request.request_id == BudgetHold.request_id).exists()
    connection.execute(sa.delete(BudgetHold).where(BudgetHold.key_id == key_id,
                                                   sa.or_(written, BudgetHold.expires_at < now)))
