"""A control for the retrain: the same `aio retrain` on a copy of the log without its verdicts, so the candidate
learns from the seed data alone. What the retrained classifier gains over this control is what the verdicts
taught it; what the control gains over the shipped classifier is the trainer's, not the verdicts'."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from benchmarks.workload import Task


def seed_only_scores(log: Path, home: Path, tasks: list[Task]) -> tuple[np.ndarray, dict]:
    """The per-tier scores on `tasks` of the candidate `aio retrain` trains from a copy of `log` (a SQLite file)
    whose verdicts are deleted (promoted or not: it is scored either way), and the retrain's report. Raises
    RuntimeError when the retrain fails."""
    from aio.routing import load_classifier
    from benchmarks.live_server import aio_command, server_env
    from classifier.features import messages_to_text

    control = home / "control.db"
    shutil.copyfile(log, control)
    url = f"sqlite:///{control}"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("DELETE FROM verifications"))
        done = subprocess.run(aio_command("retrain", "--json"), env=server_env(home, url, ""), capture_output=True,
                              text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"the control retrain failed:\n{done.stdout}{done.stderr}"[-3000:])
        report = json.loads(done.stdout[done.stdout.index("{"):])
        classifier = load_classifier(Path(report["path"]))
        texts = [messages_to_text([{"role": "user", "content": t.prompt}]) for t in tasks]
        return np.asarray(classifier.predict_proba(texts), dtype=float), report
    finally:
        engine.dispose()
