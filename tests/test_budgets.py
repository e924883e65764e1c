"""Key budgets: UTC calendar periods and their resets (an injected clock), the soft limit, the 429 a request gets
past its budget, `aio keys` and the admin API, the report's budget state, and two replicas on one PostgreSQL that
overrun a budget by no more than one request in flight."""
from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from aio.api.errors import APIError
from aio.cli import app as cli_app
from aio.db.budgets import Budget, budget_states, next_reset, period_start
from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.log_writer import LogWriter
from aio.db.migrate import upgrade
from aio.db.models import BudgetHold
from aio.db.records import RequestRecord
from aio.db.request_rows import RequestRows
from aio.http.budget_guard import RESET_HEADER, BudgetExceeded, BudgetGuard
from tests.inprocess import chat_app
from tests.test_chat_service import FakeTier

UTC = timezone.utc
HELLO = [{"role": "user", "content": "hello"}]


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize("period, now, start, reset", [
    ("day", at(2026, 11, 26, 18, 5), at(2026, 11, 26), at(2026, 11, 27)),
    ("day", at(2026, 12, 31, 23, 59, 59), at(2026, 12, 31), at(2027, 1, 1)),
    ("week", at(2026, 11, 26, 18, 5), at(2026, 11, 23), at(2026, 11, 30)),  # a Thursday: Monday to Monday
    ("week", at(2026, 11, 23), at(2026, 11, 23), at(2026, 11, 30)),
    ("month", at(2026, 11, 26, 18, 5), at(2026, 11, 1), at(2026, 12, 1)),
    ("month", at(2026, 12, 15), at(2026, 12, 1), at(2027, 1, 1)),
    ("month", at(2028, 2, 29, 12), at(2028, 2, 1), at(2028, 3, 1)),
    ("total", at(2026, 11, 26), None, None),
])
def test_periods_follow_utc_calendar_boundaries(period, now, start, reset):
    assert period_start(period, now) == start and next_reset(period, now) == reset
    east = now.astimezone(timezone(timedelta(hours=9)))  # the same moment in another zone: the same period
    assert period_start(period, east) == start


@pytest.mark.parametrize("usd, period, soft", [(0, "day", None), (-1, "day", None), (float("inf"), "day", None),
                                                (True, "day", None), (5, "year", None), (5, "day", 1.0),
                                                (5, "day", 0), (5, "day", 1.5)])
def test_an_invalid_budget_is_refused(usd, period, soft):
    with pytest.raises(ValueError):
        Budget(usd, period, soft)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture()
def engine(sqlite_engine):
    return sqlite_engine


def spend(engine, key_id: int, cost: float, when: datetime) -> str:
    request_id = uuid.uuid4().hex
    RequestRows(engine).write([RequestRecord(request_id=request_id, status="ok", created_at=when, key_id=key_id,
                                             tier="small", cost_usd=cost)])
    return request_id


def admit(guard: BudgetGuard, key, request_id: str | None = None) -> None:
    asyncio.run(guard.admit(key, request_id or uuid.uuid4().hex))


def clear_holds(engine) -> None:
    with engine.begin() as connection:
        connection.execute(BudgetHold.__table__.delete())


@pytest.mark.parametrize("period", ["day", "week", "month"])
def test_a_key_past_its_budget_is_refused_until_its_period_resets(engine, period):
    store = KeyStore(engine)
    info, _ = store.create("team", budget=Budget(1.0, period))
    clock = Clock(at(2026, 11, 26, 18))  # a Thursday, late in the month
    guard = BudgetGuard(engine, clock=clock, wait_s=0.2)
    admit(guard, info)  # nothing spent
    spend(engine, info.id, 0.6, clock.now - timedelta(hours=1))
    spend(engine, info.id, 0.5, clock.now - timedelta(minutes=1))
    spend(engine, info.id + 1, 5.0, clock.now)  # another key's spend is not this one's
    clear_holds(engine)
    with pytest.raises(BudgetExceeded) as refused:
        admit(guard, info)
    reset = next_reset(period, clock.now)
    assert refused.value.status_code == 429 and refused.value.code == "budget_exceeded"
    assert reset.isoformat() in refused.value.message and refused.value.budget_headers == {RESET_HEADER:
                                                                                        reset.isoformat()}
    clock.now = reset - timedelta(seconds=1)
    with pytest.raises(BudgetExceeded):
        admit(guard, info)
    clock.now = reset
    admit(guard, info)  # a new period: spend starts from 0


def test_earlier_days_of_the_period_count_from_the_daily_sums_and_survive_pruning(engine):
    from aio.db.retention import prune_raw_rows

    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "month"))
    now = at(2026, 11, 26, 18)
    spend(engine, info.id, 0.7, at(2026, 11, 3))
    spend(engine, info.id, 0.4, at(2026, 10, 31, 23, 59))  # last month: not counted
    spend(engine, info.id, 0.35, at(2026, 11, 26, 1))
    assert prune_raw_rows(engine, 2, now=now).requests == 2  # raw rows of the 3rd are gone, their sums stay
    with engine.connect() as connection:
        state = budget_states(connection, now)[info.id]
    assert state.spent_usd == pytest.approx(1.05) and state.exceeded and state.left_usd == 0
    assert state.next_reset == at(2026, 12, 1)
    with pytest.raises(BudgetExceeded):
        admit(BudgetGuard(engine, clock=Clock(now), wait_s=0.2), info)


def test_a_budget_that_cannot_be_checked_is_not_lifted(engine, tmp_path):
    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "day"))
    away = make_engine(f"sqlite:///{tmp_path / 'missing' / 'aio.db'}")  # no such folder: every query fails
    with pytest.raises(APIError) as refused:
        admit(BudgetGuard(away, wait_s=0.2), info)
    assert refused.value.status_code == 503 and refused.value.code == "database_unavailable"
    admit(BudgetGuard(away, wait_s=0.2), KeyStore(engine).create("free")[0])  # no budget: nothing to check
    away.dispose()


def test_a_total_budget_never_resets(engine):
    info, _ = KeyStore(engine).create("trial", budget=Budget(0.5, "total"))
    spend(engine, info.id, 0.5, at(2020, 1, 1))
    with pytest.raises(BudgetExceeded) as refused:
        admit(BudgetGuard(engine, clock=Clock(at(2030, 1, 1)), wait_s=0.2), info)
    assert refused.value.budget_headers == {} and refused.value.retry_after_s is None
    assert "does not reset" in refused.value.message


def test_the_soft_limit_warns_once_per_period_and_flags_the_key(engine, caplog):
    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "day", soft=0.8))
    clock = Clock(at(2026, 11, 26, 10))
    guard = BudgetGuard(engine, clock=clock, wait_s=0.2)
    spend(engine, info.id, 0.5, clock.now)
    with caplog.at_level(logging.WARNING, logger="aio.http.budget_guard"):
        admit(guard, info)
        assert not caplog.records
        spend(engine, info.id, 0.35, clock.now)
        clear_holds(engine)
        admit(guard, info)
    warnings = [r for r in caplog.records if "soft limit" in r.getMessage()]
    assert len(warnings) == 1 and "team" in warnings[0].getMessage()
    with engine.connect() as connection:
        state = budget_states(connection, clock.now)[info.id]
    assert state.soft_exceeded and not state.exceeded and state.left_usd == pytest.approx(0.15)
    caplog.clear()
    clock.now += timedelta(days=1)
    spend(engine, info.id, 0.9, clock.now)
    clear_holds(engine)
    with caplog.at_level(logging.WARNING, logger="aio.http.budget_guard"):
        admit(guard, info)
    assert len([r for r in caplog.records if "soft limit" in r.getMessage()]) == 1  # a new period warns again


def test_a_second_request_waits_while_the_first_may_use_what_is_left(engine):
    """The period's first paid request has no known cost: it may use all that is left, so another waits for it."""
    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "day"))
    clock = Clock(at(2026, 11, 26, 10))
    guard = BudgetGuard(engine, clock=clock, wait_s=0.3)
    admit(guard, info, "first")
    with pytest.raises(BudgetExceeded) as refused:
        admit(guard, info)
    assert "in flight" in refused.value.message
    spend_id = "first"
    RequestRows(engine).write([RequestRecord(request_id=spend_id, status="ok", created_at=clock.now,
                                             key_id=info.id, cost_usd=0.1)])
    admit(guard, info, "second")  # the first's row is written: its hold is gone, its cost known (0.1)
    admit(guard, info, "third")  # 0.1 spent + 0.1 held + 0.1 < 1
    with engine.connect() as connection:
        assert connection.scalar(BudgetHold.__table__.select().with_only_columns(
            BudgetHold.__table__.c.request_id).where(BudgetHold.__table__.c.request_id == "first")) is None


def test_the_429_is_openai_shaped_with_the_reset_time(engine):
    info, _ = KeyStore(engine).create("team", budget=Budget(0.001, "day"))
    tier = FakeTier("small")
    app, _, log = chat_app([tier], {"k": info})
    clock = Clock(at(2026, 11, 26, 10))
    app.state.aio.budgets = BudgetGuard(engine, clock=clock, wait_s=0.2)
    spend(engine, info.id, 0.002, clock.now)
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json={"model": "small", "messages": HELLO},
                               headers={"authorization": "Bearer k"})
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "budget_exceeded" and error["type"] == "rate_limit_error"
    assert "2026-11-27T00:00:00+00:00" in error["message"]
    assert response.headers[RESET_HEADER] == "2026-11-27T00:00:00+00:00"
    assert int(response.headers["retry-after"]) == 14 * 3600
    assert [(r.status, r.http_status) for r in log.records] == [("rejected", 429)]
    assert not tier.calls


def test_the_admin_api_sets_and_changes_a_budget(admin_client):
    created = admin_client.post("/admin/keys", json={"name": "team", "budget_usd": 25, "budget_period": "week",
                                                     "budget_soft": 0.8, "rpm_limit": 60})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["budget_usd"], body["budget_period"], body["budget_soft"], body["rpm_limit"]) == (25, "week", 0.8, 60)
    changed = admin_client.patch(f"/admin/keys/{body['id']}", json={"budget_usd": 40.5})
    assert changed.status_code == 200 and changed.json()["budget_usd"] == 40.5
    assert changed.json()["budget_period"] == "week" and changed.json()["rpm_limit"] == 60  # the rest stays
    removed = admin_client.patch(f"/admin/keys/{body['id']}", json={"budget_usd": None})
    assert removed.json()["budget_usd"] is None and removed.json()["budget_period"] is None
    default = admin_client.post("/admin/keys", json={"name": "other", "budget_usd": 1}).json()
    assert default["budget_period"] == "month"


@pytest.mark.parametrize("body", [{"budget_usd": 0}, {"budget_usd": -1}, {"budget_usd": "5"},
                                  {"budget_usd": 5, "budget_period": "year"}, {"budget_usd": 5, "budget_soft": 1},
                                  {"budget_period": "day"}, {"budget_usd": 5, "budget_cap": 1}, {}])
def test_the_admin_api_refuses_an_invalid_budget(admin_client, body):
    key_id = admin_client.post("/admin/keys", json={"name": "team"}).json()["id"]
    response = admin_client.patch(f"/admin/keys/{key_id}", json=body)
    assert response.status_code == 400, response.text
    if body:
        assert admin_client.post("/admin/keys", json={"name": "new", **body}).status_code == 400
    assert admin_client.get("/admin/keys").json()["data"][0]["budget_usd"] is None


def test_the_cli_sets_budgets_and_the_report_shows_their_state(tmp_path):
    env = {"AIO_HOME": str(tmp_path), "AIO_DATABASE_URL": f"sqlite:///{tmp_path / 'aio.db'}"}
    runner = CliRunner()
    created = runner.invoke(cli_app, ["keys", "create", "--name", "team", "--budget-usd", "2", "--budget-period",
                                      "day", "--budget-soft", "0.5"], env=env)
    assert created.exit_code == 0, created.output
    assert "budget $2/day (soft 0.5)" in created.stderr
    refused = runner.invoke(cli_app, ["keys", "create", "--name", "x", "--budget-usd", "2", "--budget-period",
                                      "year"], env=env)
    assert refused.exit_code != 0 and "budget_period" in refused.stderr
    updated = runner.invoke(cli_app, ["keys", "update", "team", "--budget-usd", "3"], env=env)
    assert updated.exit_code == 0 and "budget $3/day (soft 0.5)" in updated.stdout, updated.output
    engine = make_engine(env["AIO_DATABASE_URL"])
    key = KeyStore(engine).find_active("team")
    spend(engine, key.id, 1.75, datetime.now(UTC))
    engine.dispose()
    report = runner.invoke(cli_app, ["report", "keys", "--format", "json"], env=env)
    assert report.exit_code == 0, report.output
    import json

    (row,) = json.loads(report.stdout)["keys"]
    assert row["budget"]["spent_usd"] == pytest.approx(1.75) and row["budget"]["left_usd"] == pytest.approx(1.25)
    assert row["budget"]["soft_exceeded"] and not row["budget"]["exceeded"] and row["budget"]["next_reset"]
    table = runner.invoke(cli_app, ["report", "keys"], env=env)
    assert "$3/day" in table.stdout and "soft limit" in table.stdout
    removed = runner.invoke(cli_app, ["keys", "update", "team", "--budget-usd", "0"], env=env)
    assert removed.exit_code == 0 and "budget" not in removed.stdout


def test_the_dashboard_breakdown_carries_each_keys_budget(engine):
    from aio.reports import service
    from aio.reports.ranges import parse_range

    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "day", soft=0.5))
    spend(engine, info.id, 0.6, datetime.now(UTC))
    with engine.connect() as connection:
        data = service.breakdown(connection, parse_range("24h"), ("key",), 10)
    (row,) = data["breakdowns"]["key"]["rows"]
    assert row["budget"]["spent_usd"] == pytest.approx(0.6) and row["budget"]["soft_exceeded"]


# ---- two replicas on one PostgreSQL ------------------------------------------------------------------------------

class SlowTier(FakeTier):
    async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
        async for chunk in super().stream_chat(messages, params, request_id, priority, options, tenant):
            await asyncio.sleep(0.01)
            yield chunk


def test_two_replicas_on_postgres_overrun_a_budget_by_at_most_one_request_in_flight_each(postgres_database_factory):
    url = postgres_database_factory("budget_replicas")
    engine = make_engine(url)
    upgrade(engine)
    info, _ = KeyStore(engine).create("team", budget=Budget(1.0, "day"))
    per_request = 1e-6 * 1 + 2e-6 * 3  # chat_app's prices: "hello" is 1 prompt token, 3 completion tokens
    budget = 20 * per_request
    KeyStore(engine).update_limits(info.id, {"budget_usd": budget})
    info = KeyStore(engine).find_active(info.id)
    replicas = []
    for name in ("a", "b"):
        app, service, _ = chat_app([SlowTier("small")], {"k": info})
        writer = LogWriter(make_engine(url), flush_interval_s=0.05, replica=name)
        writer.start()
        service.accounting.log = writer
        app.state.aio.budgets = BudgetGuard(engine, wait_s=10, replica=name)
        replicas.append((app, writer))

    async def client(app, outcomes: list) -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://aio") as http:
            while True:
                response = await http.post("/v1/chat/completions", headers={"authorization": "Bearer k"},
                                           json={"model": "small", "messages": HELLO, "max_tokens": 3})
                outcomes.append(response.status_code)
                if response.status_code != 200:
                    assert response.json()["error"]["code"] == "budget_exceeded", response.text
                    return

    async def main() -> list:
        outcomes: list = []
        await asyncio.gather(*[client(app, outcomes) for app, _ in replicas for _ in range(6)])
        return outcomes

    outcomes = asyncio.run(main())
    for _, writer in replicas:
        assert writer.flush(10)
        writer.close()
    with engine.connect() as connection:
        spent = budget_states(connection, datetime.now(UTC))[info.id].spent_usd
    served = outcomes.count(200)
    print(f"served {served} requests, spent {spent / per_request:.2f} requests of a "
          f"{budget / per_request:.0f}-request budget")
    assert served * per_request == pytest.approx(spent)
    assert budget <= spent <= budget + 2 * per_request + 1e-12, (served, spent / per_request)
    assert outcomes.count(429) == 12  # every client was refused in the end
    engine.dispose()
