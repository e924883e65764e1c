"""The probe measurements in the SQL database: one `probe_runs` row per tier fingerprint (its progress and status)
and one `probe_results` row per answered task. Writes are idempotent per (fingerprint, task), so a killed
measurement resumes where it stopped and two replicas probing the same model do not count a task twice."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from aio.db.models import ProbeResult, ProbeRun
from aio.db.records import utcnow

RUNNING, MEASURED, FAILED = "running", "measured", "failed"


@dataclass
class ProbeOutcome:
    """One tier's answer to one probe task, scored."""
    fingerprint: str
    tier: str
    task_id: str
    category: str
    difficulty: int
    prompt: str
    answer: str | None
    correct: bool
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_ms: float | None = None
    token_logprobs: list[float] | None = None
    token_margins: list[float] | None = None


@dataclass
class RunStatus:
    fingerprint: str
    tier: str
    model: str
    probe_set: str
    planned: int
    done: int
    correct: int
    status: str
    source: str
    started_at: datetime
    finished_at: datetime | None = None
    note: str | None = None

    @property
    def measured(self) -> bool:
        return self.status == MEASURED

    def as_dict(self) -> dict:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(self).items()}


@dataclass
class ProbeStore:
    engine: Engine
    _columns: tuple[str, ...] = field(default=tuple(ProbeOutcome.__dataclass_fields__), init=False)

    def begin(self, fingerprint: str, tier: str, model: str, probe_set: str, planned: int,
              source: str = "probe") -> None:
        """Starts (or resumes) the run of `fingerprint`: a finished run is left as it is."""
        with Session(self.engine) as session, session.begin():
            run = session.get(ProbeRun, fingerprint)
            if run is None:
                session.add(ProbeRun(fingerprint=fingerprint, tier=tier, model=model, probe_set=probe_set,
                                     planned=planned, status=RUNNING, source=source, started_at=utcnow()))
            elif run.status != MEASURED:
                run.tier, run.model, run.probe_set, run.planned, run.status, run.source = \
                    tier, model, probe_set, planned, RUNNING, source

    def add(self, outcome: ProbeOutcome) -> bool:
        """Stores one result; False when the task was already stored for this fingerprint."""
        try:
            with Session(self.engine) as session, session.begin():
                session.add(ProbeResult(**asdict(outcome)))
            return True
        except IntegrityError:
            return False

    def finish(self, fingerprint: str, status: str = MEASURED, note: str | None = None) -> None:
        with Session(self.engine) as session, session.begin():
            run = session.get(ProbeRun, fingerprint)
            if run is not None:
                run.status, run.finished_at, run.note = status, utcnow(), note

    def done_task_ids(self, fingerprint: str) -> set[str]:
        with Session(self.engine) as session:
            return set(session.scalars(sa.select(ProbeResult.task_id).where(ProbeResult.fingerprint == fingerprint)))

    def results(self, fingerprint: str) -> list[ProbeOutcome]:
        with Session(self.engine) as session:
            rows = session.scalars(sa.select(ProbeResult).where(ProbeResult.fingerprint == fingerprint)
                                   .order_by(ProbeResult.id))
            return [ProbeOutcome(**{c: getattr(r, c) for c in self._columns}) for r in rows]

    def status(self, fingerprint: str) -> RunStatus | None:
        with Session(self.engine) as session:
            run = session.get(ProbeRun, fingerprint)
            if run is None:
                return None
            done, correct = session.execute(
                sa.select(sa.func.count(), sa.func.sum(sa.case((ProbeResult.correct, 1), else_=0)))
                .where(ProbeResult.fingerprint == fingerprint)).one()
            return RunStatus(run.fingerprint, run.tier, run.model, run.probe_set, run.planned, done or 0,
                             int(correct or 0), run.status, run.source, run.started_at, run.finished_at, run.note)
