"""Which classifier routes `auto` requests: `load_classifier`.

In order: `classifier_path` from the settings (pinned: never switched at run time); else the version active in
the database (`aio retrain` / `aio classifier promote`); else the trained default shipped in the package
(registered as the active "builtin" version on first start); else the heuristic router.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from sqlalchemy.engine import Engine

from aio.routing import registry
from aio.routing.model_store import ModelStoreError, unpack
from aio.routing.router import Classifier

logger = logging.getLogger(__name__)


class ClassifierLoadError(RuntimeError):
    pass


def builtin_classifier() -> Classifier:
    """The shipped default if it is present and loads, else the heuristic."""
    import classifier

    try:
        return classifier.load_default()
    except Exception as exc:  # a broken install must not stop the server: the heuristic still routes
        logger.error("the shipped default classifier does not load (%s): routing with the heuristic", exc)
        return classifier.HeuristicClassifier()


def load_version(info: registry.VersionInfo, db: Engine | None = None, cache_dir: Path | None = None) -> Classifier:
    """The classifier of a registered version: the model stored in the database (unpacked into `cache_dir`),
    else its folder path (which must then be on storage this machine shares)."""
    import classifier

    if info.kind == registry.BUILTIN_KIND:
        for candidate in (builtin_classifier(), classifier.HeuristicClassifier()):
            if candidate.version == info.version:
                return candidate
        raise ClassifierLoadError(f"builtin classifier {info.version!r} is not in this installation")
    blob = registry.model_blob(db, info.version) if db is not None else None
    if blob is not None:
        try:
            folder = unpack(blob, info.version, cache_dir or Path(tempfile.gettempdir()) / "aio-classifiers")
        except ModelStoreError as exc:
            raise ClassifierLoadError(str(exc)) from exc
        return _load_folder(folder)
    if info.path is None:
        raise ClassifierLoadError(f"classifier version {info.version!r} has no stored model and no folder")
    return _load_folder(Path(info.path))


def _load_folder(path: Path) -> Classifier:
    import classifier

    if not path.is_dir():
        raise ClassifierLoadError(f"classifier folder {path} does not exist")
    try:
        return classifier.load_folder(path)
    except Exception as exc:
        raise ClassifierLoadError(f"cannot load the classifier in {path}: {exc}") from exc


def load_classifier(path: Path | None, db: Engine | None = None, cache_dir: Path | None = None) -> Classifier:
    """The classifier to route with: the folder `path` if given, else the database's active version (see the
    module docstring)."""
    if path is not None:
        return _load_folder(Path(path))
    if db is None:
        return builtin_classifier()
    active = registry.active_version(db)
    if active is not None:
        try:
            return load_version(active, db, cache_dir)
        except ClassifierLoadError as exc:
            logger.error("the active classifier %s does not load (%s): using the shipped default", active.version, exc)
            return builtin_classifier()
    clf = builtin_classifier()
    registry.register(db, version=clf.version, kind=registry.BUILTIN_KIND, path=None, status="active",
                      num_train_examples=getattr(clf, "num_train_examples", 0),
                      metrics=getattr(clf, "metrics", {}) or {}, notes="shipped with aio; registered at first start")
    logger.info("registered the shipped classifier %s as the active version", clf.version)
    return clf
