"""`aio retrain`, classifier versions (promote / rollback / hot swap) and `aio router calibrate` on a real SQL
database (SQLite and PostgreSQL), with small stand-in classifiers so the tests stay fast."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from aio.db.database import make_engine
from aio.routing.probe_examples import SEED_HALF, probe_examples
from aio.db.migrate import upgrade
from aio.db.models import Request, Verification
from aio.db.records import utcnow
from aio.routing import Router, RouterWatcher, registry
from aio.routing.calibrate import CalibrationError, calibrate_large_share
from aio.routing.retrain import RetrainError, log_examples, parse_since, retrain
from classifier import HeuristicClassifier
from classifier.seed import is_holdout


@pytest.fixture()
def engine(database_url):
    db = make_engine(database_url)
    upgrade(db)
    yield db
    db.dispose()


class LookupClassifier:
    """Knows the label of some texts (probability `confidence`), uniform elsewhere."""

    def __init__(self, version: str, known: dict[str, int], confidence: float = 0.9, n_tiers: int = 3):
        self.version, self.known, self.confidence, self.n_tiers = version, known, confidence, n_tiers
        self.kind = "lookup"
        self.metrics = {"trained_on": len(known)}

    def predict_proba(self, texts):
        out = np.full((len(texts), self.n_tiers), 1.0 / self.n_tiers)
        for i, text in enumerate(texts):
            if text in self.known:
                out[i] = (1 - self.confidence) / (self.n_tiers - 1)
                out[i, self.known[text]] = self.confidence
        return out

    def save(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "lookup.json").write_text(json.dumps(self.known))


def math_text(i: int) -> str:
    return f"Prove step by step that the sum of the first {i} odd numbers is a square, and explain why."


def chat_text(i: int) -> str:
    return f"hi there number {i}"


def add_verified(engine, request_id: str, text: str, tier: str, passed: bool, days_ago: float = 0.0,
                 prompt_logged: bool = True, demo_tiers: bool = False) -> None:
    when = utcnow() - timedelta(days=days_ago)
    with Session(engine) as session, session.begin():
        session.add(Request(request_id=request_id, status="ok", created_at=when, tier=tier, routing_reason="classifier",
                            prompt=json.dumps([{"role": "user", "content": text}]) if prompt_logged else None))
        session.flush()
        session.add(Verification(request_id=request_id, created_at=when, tier=tier, reference_tier="large",
                                 similarity=0.9 if passed else 0.2, passed=passed, method="test",
                                 demo_tiers=demo_tiers))


def seed_csv(path: Path, n: int = 40) -> Path:
    lines = ["text,label,source"] + [f'"{chat_text(i)}",0,seed' for i in range(n)] + \
            [f'"{math_text(i)}",2,seed' for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


class RuleClassifier(LookupClassifier):
    """Label 2 for texts that ask for a proof, else 0, with probability `confidence`."""

    def predict_proba(self, texts):
        self.known = {t: (2 if "Prove" in t else 0) for t in texts}
        return super().predict_proba(texts)


def oracle_trainer(confidence: float, seen: list | None = None):
    def train(texts, labels, n_tiers, sample_weight):
        if seen is not None:
            seen.append((list(texts), np.asarray(sample_weight)))
        return RuleClassifier(f"cand-{confidence}", {}, confidence, n_tiers)
    return train


def test_seed_rows_train_at_the_shipped_default_weights(engine, tmp_path, monkeypatch):
    """Hand-labelled chat seed rows count as the shipped default counts them: by their label, rows at weight 0 are
    neither trained on nor held out; benchmark seed rows and the monitor's verdicts count 1."""
    import classifier.seed as seed_module
    from classifier.seed import CHAT_SOURCE

    monkeypatch.setattr(seed_module, "CHAT_EASY_WEIGHT", 7.0)
    monkeypatch.setattr(seed_module, "CHAT_HARD_WEIGHT", 0.0)
    seed = tmp_path / "seed.csv"
    seed.write_text("text,label,source\n"
                    + "".join(f'"{chat_text(i)}",{2 * (i % 2)},{CHAT_SOURCE}writing\n' for i in range(60))
                    + "".join(f'"{math_text(i)}",2,routellm:gsm8k\n' for i in range(30)))
    for i in range(10):
        add_verified(engine, f"w{i}", math_text(200 + i), "small", passed=False)
    seen: list = []
    report = retrain(engine, LookupClassifier("uniform", {}), tmp_path / "c", seed_path=seed,
                     train=oracle_trainer(0.9, seen), dry_run=True)
    (texts, weights), = seen
    factor = SEED_HALF / (SEED_HALF + 10)  # the seed's weight falls as the deployment's own outcomes (10) grow
    chat = {chat_text(i): 7.0 * factor if i % 2 == 0 else None for i in range(60)}
    math = {math_text(i): factor for i in range(30)}
    assert all(chat.get(t, math.get(t, 1.0)) == pytest.approx(w) for t, w in zip(texts, weights))  # no hard chat
    assert sum(w == pytest.approx(7.0 * factor) for w in weights) > 20  # most easy chat rows train, not held out
    counts = report.data_counts
    assert counts["train"] + counts["holdout"] == 30 + 30 + 10  # the 30 hard chat rows are left out


def test_parse_since_and_holdout_split():
    assert parse_since("7d") == timedelta(days=7) and parse_since("36h") == timedelta(hours=36)
    assert parse_since("2w") == timedelta(weeks=2)
    with pytest.raises(RetrainError, match="7d"):
        parse_since("last week")
    share = np.mean([is_holdout(f"text {i}") for i in range(4000)])
    assert 0.12 < share < 0.18 and is_holdout("abc") == is_holdout("abc")


def test_log_verdicts_become_labels(engine):
    add_verified(engine, "r1", "easy one", "small", passed=True)
    add_verified(engine, "r2", "hard one", "small", passed=False)
    add_verified(engine, "r3", "mid one", "medium", passed=True)
    add_verified(engine, "r4", "secret", "small", passed=True, prompt_logged=False)
    add_verified(engine, "r5", "old one", "small", passed=True, days_ago=30)
    add_verified(engine, "r6", "demo answer", "small", passed=False, demo_tiers=True)
    examples, stats = log_examples(engine)
    assert dict(zip(examples.texts, examples.labels)) == {"easy one": 0, "hard one": 2, "mid one": 1, "old one": 0}
    assert stats["redacted"] == 1 and stats["passed"] == 3 and stats["failed"] == 1
    assert stats["demo_tiers"] == 1  # verdicts on the demo tiers' answers are never labels
    recent, _ = log_examples(engine, since=timedelta(days=7))
    assert "old one" not in recent.texts


def test_a_better_candidate_is_promoted_and_recorded(engine, tmp_path):
    current = LookupClassifier("uniform", {})
    registry.register(engine, version=current.version, kind=registry.BUILTIN_KIND, path=None, status="active")
    for i in range(30):
        add_verified(engine, f"m{i}", math_text(100 + i), "small", passed=False)
    report = retrain(engine, current, tmp_path / "classifiers", seed_path=seed_csv(tmp_path / "seed.csv"),
                     train=oracle_trainer(0.99))
    assert report.status == "promoted", report.reason
    assert report.candidate_metrics["log_loss"] < report.current_metrics["log_loss"]
    assert report.data_counts["train_log"] + report.data_counts.get("holdout_log", 0) == 30
    assert report.data_counts["train"] + report.data_counts["holdout"] == 110
    active = registry.active_version(engine)
    assert active.version == report.candidate_version and active.parent_version == current.version
    assert Path(active.path, "lookup.json").is_file()
    assert active.metrics["holdout"]["log_loss"] == pytest.approx(report.candidate_metrics["log_loss"])
    assert active.data_counts == report.data_counts
    assert registry.get_version(engine, current.version).status == "retired"


def test_a_worse_candidate_is_recorded_but_not_promoted_and_dry_run_stores_nothing(engine, tmp_path):
    seed = seed_csv(tmp_path / "seed.csv")
    current = LookupClassifier("current", {}, 0.9)
    # "current" knows every held-out text well; the candidate is unsure of everything
    known = {chat_text(i): 0 for i in range(40)} | {math_text(i): 2 for i in range(40)}
    current.known = known
    report = retrain(engine, current, tmp_path / "c", seed_path=seed, train=oracle_trainer(0.34))
    assert report.status == "rejected"
    assert registry.active_version(engine) is None
    assert registry.get_version(engine, report.candidate_version).status == "rejected"
    promoted = retrain(engine, current, tmp_path / "c", seed_path=seed, train=oracle_trainer(0.34), margin=5.0)
    assert promoted.status == "promoted"
    versions_before = len(registry.list_versions(engine))
    dry = retrain(engine, current, tmp_path / "dry", seed_path=seed, train=oracle_trainer(0.99), dry_run=True)
    assert dry.status == "dry-run" and dry.path is None and not (tmp_path / "dry").exists()
    assert len(registry.list_versions(engine)) == versions_before


def test_if_due_and_bad_training_sets(engine, tmp_path):
    current = HeuristicClassifier()
    seed = seed_csv(tmp_path / "seed.csv")
    retrain(engine, current, tmp_path / "c", seed_path=seed, train=oracle_trainer(0.9))
    skipped = retrain(engine, current, tmp_path / "c", seed_path=seed, train=oracle_trainer(0.9), if_due=True)
    assert skipped.status == "skipped" and "not due" in skipped.reason
    later = retrain(engine, current, tmp_path / "c", seed_path=seed, train=oracle_trainer(0.9), if_due=True,
                    now=utcnow() + timedelta(days=8))
    assert later.status in ("promoted", "rejected")
    with pytest.raises(RetrainError, match="training examples"):
        retrain(engine, current, tmp_path / "c", use_seed=False, train=oracle_trainer(0.9))
    one_class = tmp_path / "one.csv"
    one_class.write_text("text,label\n" + "".join(f"q{i},1\n" for i in range(50)))
    with pytest.raises(RetrainError, match="two classes"):
        retrain(engine, current, tmp_path / "c", seed_path=one_class, train=oracle_trainer(0.9))


def test_promote_and_rollback(engine):
    for name in ("v1", "v2", "v3"):
        registry.register(engine, version=name, kind="lookup", path=f"/models/{name}", status="candidate")
    with pytest.raises(registry.RegistryError, match="nothing to roll back"):
        registry.rollback(engine)
    registry.promote(engine, "v1")
    registry.promote(engine, "v3")
    assert registry.active_version(engine).version == "v3"
    assert registry.rollback(engine).version == "v1"
    assert [v.version for v in registry.list_versions(engine) if v.active] == ["v1"]
    with pytest.raises(registry.RegistryError, match="no classifier version"):
        registry.promote(engine, "v9")


def test_calibrate_sends_the_asked_share_to_large(engine):
    rng = np.random.default_rng(0)
    with Session(engine) as session, session.begin():
        for i in range(200):
            p = rng.dirichlet([2.0, 1.0, 1.0])
            session.add(Request(request_id=f"c{i}", status="ok", tier="small", routing_reason="classifier",
                                tier_scores=[float(x) for x in p]))
    router = Router(HeuristicClassifier(), ["small", "medium", "large"], quality=0.5)
    report = calibrate_large_share(engine, router, 0.2, timedelta(days=1))
    assert report.num_requests == 200 and report.num_rescored == 0
    assert report.shares["large"] == pytest.approx(0.2, abs=0.01)
    assert registry.router_state(engine).quality == pytest.approx(report.quality)
    low = calibrate_large_share(engine, router, 0.05, timedelta(days=1), apply=False)
    assert low.shares["large"] == pytest.approx(0.05, abs=0.01) and low.quality < report.quality
    assert registry.router_state(engine).quality == pytest.approx(report.quality)  # apply=False stored nothing
    with pytest.raises(CalibrationError, match="routed requests"):
        calibrate_large_share(engine, router, 0.2, timedelta(seconds=0))


def test_the_router_follows_the_database_without_restart(engine, tmp_path):
    router = Router(HeuristicClassifier(), ["small", "medium", "large"], quality=0.5)
    watcher = RouterWatcher(router, engine, default_quality=0.5)
    stricter = HeuristicClassifier(version="heuristic-strict", thetas=[1.0, 2.0])
    stricter.save(tmp_path / "strict")
    registry.register(engine, version=stricter.version, kind="heuristic", path=str(tmp_path / "strict"),
                      status="active")
    registry.set_router_state(engine, quality=0.8, offsets={"small": 0.1}, updated_by="test")
    watcher.poll_once()
    assert router.classifier.version == "heuristic-strict" and router.quality == 0.8
    assert router.offsets == {"small": 0.1}
    (tmp_path / "broken").mkdir()
    registry.register(engine, version="broken", kind="lookup", path=str(tmp_path / "broken"), status="active")
    watcher.poll_once()  # cannot load: the working classifier stays in service
    assert router.classifier.version == "heuristic-strict"


def test_cli_classifier_and_router_commands(database_url, tmp_path):
    from aio.cli import app

    env = {"AIO_DATABASE_URL": database_url, "AIO_HOME": str(tmp_path)}
    runner = CliRunner()

    def run(*args, code=0):
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == code, result.output
        return result.output

    run("db", "upgrade")
    db = make_engine(database_url)
    try:
        for name in ("a1", "a2"):
            registry.register(db, version=name, kind="lookup", path=f"/x/{name}", status="candidate")
    finally:
        db.dispose()
    assert "a1" in run("classifier", "list")
    assert "a2 is active" in run("classifier", "promote", "a2")
    assert "no classifier version 'zz'" in run("classifier", "promote", "zz", code=1)
    run("classifier", "promote", "a1")
    assert "a2 is active" in run("classifier", "rollback")
    assert "routed requests" in run("router", "calibrate", "--large-share", "0.2", code=1)
    assert "offsets: none" in run("router", "thresholds")
    shown = run("router", "thresholds", "--small", "0.1", "--quality", "0.6")
    assert "quality in force: 0.6000, set in the database by aio router thresholds" in shown
    assert "small   0.7000 = quality 0.6000 + offset +0.1000" in shown and "offsets: small +0.1000" in shown
    assert "last change:" in shown and "set by hand" in shown and "database: " in shown
    db = make_engine(database_url)
    try:
        assert registry.router_state(db).offsets == {"small": 0.1}
    finally:
        db.dispose()
    assert "offsets: none" in run("router", "thresholds", "--reset")
    assert "stays in service" in run("retrain", "--no-seed", code=1)


def test_probe_outcomes_become_training_rows_labelled_by_the_cheapest_right_tier(engine):
    from aio.probing.store import ProbeOutcome, ProbeStore

    store = ProbeStore(engine)
    right = {"t-small": (True, True, True), "t-medium": (False, True, True), "t-large": (False, False, True),
             "t-none": (False, False, False), "t-only-two": (True, True, None)}
    for tier, fingerprint in (("small", "fp-s"), ("medium", "fp-m"), ("large", "fp-l"), ("large", "fp-old")):
        store.begin(fingerprint, tier, tier, "probe-v1", 5)
        for task, outcomes in right.items():
            index = ("small", "medium", "large").index(tier)
            if outcomes[index] is not None and fingerprint != "fp-old":
                store.add(ProbeOutcome(fingerprint, tier, task, "arithmetic", 1, f"prompt of {task}", "a",
                                       outcomes[index], "stop", 10, 3, 0.0))
        store.finish(fingerprint)
    store.finish("fp-l")  # the latest measurement of large
    labels = {text.removeprefix("prompt of "): label for text, label in probe_examples(engine)}
    assert labels == {"t-small": 0, "t-medium": 1, "t-large": 2, "t-none": 0}  # t-only-two: large never answered
