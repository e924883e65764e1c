"""Which classifier routes `auto` requests: a saved one from `classifier_path`, else the heuristic router."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from aio.routing import Classifier

logger = logging.getLogger(__name__)


class ClassifierLoadError(RuntimeError):
    pass


def load_classifier(path: Path | None, db=None) -> Classifier:
    from classifier import HeuristicClassifier

    if path is None:
        classifier: Classifier = HeuristicClassifier()
    else:
        path = Path(path)
        if not path.is_dir():
            raise ClassifierLoadError(f"classifier_path {path} is not a folder")
        try:
            classifier = HeuristicClassifier.load(path)
        except Exception as exc:
            raise ClassifierLoadError(f"cannot load the classifier in {path}: {exc}") from exc
    if db is not None:
        register_version(db, classifier, path)
    return classifier


def register_version(db, classifier: Classifier, path: Path | None) -> None:
    """Records the classifier version in `classifier_versions` (once) so the log's versions resolve."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from aio.db.models import ClassifierVersion

    with Session(db) as session, session.begin():
        if session.scalar(select(ClassifierVersion).where(ClassifierVersion.version == classifier.version)) is None:
            session.add(ClassifierVersion(version=classifier.version, kind=type(classifier).__name__,
                                          path=str(path) if path else None, metrics={}, num_train_examples=0,
                                          active=True, notes="registered at server start"))
            logger.info("registered classifier version %s", classifier.version)
