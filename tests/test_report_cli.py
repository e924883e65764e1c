"""`aio report cost`: the dashboard's KPI numbers in the terminal (table, CSV, JSON), checked against sums of the
seeded records."""
from __future__ import annotations

import csv
import io
import json
from datetime import date, timedelta

import pytest
from typer.testing import CliRunner

from aio.cli import app
from aio.db import migrate
from aio.db.database import make_engine
from tests.test_dashboard_api import START, cascade_sums, make_records, write


@pytest.fixture
def seeded_env(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'aio.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    records = make_records(250, 21, START, timedelta(days=5), "cli")
    write(engine, records)
    engine.dispose()
    for name in ("AIO_HOME", "AIO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIO_HOME", str(tmp_path))
    monkeypatch.setenv("AIO_DATABASE_URL", url)
    return [r for r in records if date(2025, 3, 2) <= r.created_at.date() <= date(2025, 3, 4)]


def served(records) -> list:
    """The requests a tier took; those refused before (no tier) are counted apart, as `rejected`."""
    return [r for r in records if r.tier is not None]


def expected(records) -> dict:
    cost = sum(r.cost_usd for r in records)
    baseline = sum(r.baseline_cost_usd for r in records)
    return {"requests": len(records), "tokens": sum(r.prompt_tokens + r.completion_tokens for r in records),
            "cost_usd": cost, "baseline_cost_usd": baseline, "savings_usd": baseline - cost,
            "errors": sum(r.status != "ok" for r in records)}


ARGS = ["report", "cost", "--since", "2025-03-02", "--until", "2025-03-04"]


def test_json_report_equals_the_seeded_sums(seeded_env):
    result = CliRunner().invoke(app, [*ARGS, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["range"]["source"] == "aggregates"
    for key, value in expected(served(seeded_env)).items():
        assert data["total"][key] == pytest.approx(value), key
    assert data["total"]["rejected"] == len(seeded_env) - len(served(seeded_env)) > 0
    for tier in ("small", "medium", "large"):
        mine = [r for r in seeded_env if r.tier == tier]
        assert data["tiers"][tier]["cost_usd"] == pytest.approx(sum(r.cost_usd for r in mine))
        assert data["tiers"][tier]["cascades"] == cascade_sums(mine)["cascades"]
    cascaded = cascade_sums(served(seeded_env))
    assert data["total"]["cascades"] == cascaded["cascades"] > 0
    assert data["total"]["cascade_cost_usd"] == pytest.approx(cascaded["cascade_cost_usd"])


def test_csv_report_has_a_row_per_tier_and_the_total(seeded_env):
    result = CliRunner().invoke(app, [*ARGS, "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = {row["tier"]: row for row in csv.DictReader(io.StringIO(result.stdout))}
    assert set(rows) == {"small", "medium", "large", "rejected", "total"}
    assert int(rows["rejected"]["requests"]) == len(seeded_env) - len(served(seeded_env))
    for key, value in {**expected(served(seeded_env)), **cascade_sums(served(seeded_env))}.items():
        assert float(rows["total"][key]) == pytest.approx(value), key


def test_table_report_and_relative_ranges(seeded_env):
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    total = expected(served(seeded_env))
    lines = result.stdout.splitlines()
    assert lines[0].startswith("cost report 2025-03-02T00:00:00Z → 2025-03-05T00:00:00Z")
    total_line = next(line for line in lines if line.startswith("total"))
    assert f"${total['cost_usd']:,.4f}" in total_line and f"{total['requests']:,}" in total_line
    cascaded = cascade_sums(served(seeded_env))
    assert lines[-1] == "quality vs always-large: not estimated (the tiers are not measured: aio calibrate)"
    assert lines[-2] == (f"cascaded: {cascaded['cascades']:,} requests answered again on a larger tier; their "
                         f"replaced answers cost ${cascaded['cascade_cost_usd']:,.4f} (part of the cost)")
    result = CliRunner().invoke(app, ["report", "cost", "--since", "7d", "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["total"]["requests"] == 0  # the seeds are older


@pytest.mark.parametrize("args, message", [
    (["--since", "soon"], "invalid start"),
    (["--since", "2025-03-05", "--until", "2025-03-01"], "must be before end"),
])
def test_bad_ranges_are_clear_errors(seeded_env, args, message):
    result = CliRunner().invoke(app, ["report", "cost", *args])
    assert result.exit_code == 1 and message in result.output
