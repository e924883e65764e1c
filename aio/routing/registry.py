"""Classifier versions and router thresholds in the SQL database: what is active, promotion and rollback.

One version is active at a time; servers poll the active version and the router settings and switch without
a restart (see `aio.routing.watch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from aio.db.models import ClassifierVersion, RouterSettings, ThresholdChange
from aio.db.records import utcnow
from aio.routing.model_store import pack

ROUTER_SETTINGS_ID = 1
BUILTIN_KIND = "builtin"  # a classifier shipped in the package (no folder): the default or the heuristic


class RegistryError(ValueError):
    """A promotion or rollback that cannot be done: the message says why."""


@dataclass(frozen=True)
class VersionInfo:
    version: str
    created_at: datetime
    kind: str
    path: str | None
    status: str
    active: bool
    num_train_examples: int
    metrics: dict[str, Any]
    data_counts: dict[str, Any] | None
    parent_version: str | None
    promoted_at: datetime | None
    notes: str | None


def _info(row: ClassifierVersion) -> VersionInfo:
    return VersionInfo(row.version, row.created_at, row.kind, row.path, row.status, row.active,
                       row.num_train_examples, dict(row.metrics or {}), row.data_counts, row.parent_version,
                       row.promoted_at, row.notes)


def list_versions(engine: Engine) -> list[VersionInfo]:
    with Session(engine) as session:
        rows = session.scalars(sa.select(ClassifierVersion).order_by(ClassifierVersion.created_at.desc())).all()
        return [_info(r) for r in rows]


def model_blob(engine: Engine, version: str) -> bytes | None:
    """The version's stored model folder (tar.gz), if the database holds one."""
    with Session(engine) as session:
        return session.scalar(sa.select(ClassifierVersion.model_blob).where(ClassifierVersion.version == version))


def get_version(engine: Engine, version: str) -> VersionInfo | None:
    with Session(engine) as session:
        row = session.get(ClassifierVersion, version)
        return _info(row) if row is not None else None


def active_version(engine: Engine) -> VersionInfo | None:
    with Session(engine) as session:
        row = session.scalar(sa.select(ClassifierVersion).where(ClassifierVersion.active.is_(True)))
        return _info(row) if row is not None else None


def last_training(engine: Engine) -> datetime | None:
    """When a classifier was last trained here (`aio retrain`), promoted or not."""
    with Session(engine) as session:
        return session.scalar(sa.select(sa.func.max(ClassifierVersion.created_at))
                              .where(ClassifierVersion.kind != BUILTIN_KIND))


def register(engine: Engine, *, version: str, kind: str, path: str | None, status: str,
             num_train_examples: int = 0, metrics: dict[str, Any] | None = None,
             data_counts: dict[str, Any] | None = None, parent_version: str | None = None,
             notes: str | None = None, created_at: datetime | None = None) -> None:
    """Adds a version (a no-op if it is already there); status "active" also promotes it. The folder at `path` is
    stored in the database too (see `aio.routing.model_store`), so replicas on other machines can load it."""
    blob = pack(Path(path)) if path is not None and kind != BUILTIN_KIND and Path(path).is_dir() else None
    with Session(engine) as session, session.begin():
        if session.get(ClassifierVersion, version) is not None:
            return
        session.add(ClassifierVersion(version=version, kind=kind, path=path, model_blob=blob, status="candidate",
                                      active=False,
                                      num_train_examples=num_train_examples, metrics=metrics or {},
                                      data_counts=data_counts, parent_version=parent_version, notes=notes,
                                      created_at=created_at or utcnow()))
        session.flush()
        if status == "active":
            _activate(session, version)
        else:
            session.get(ClassifierVersion, version).status = status


def _activate(session: Session, version: str) -> None:
    for row in session.scalars(sa.select(ClassifierVersion).where(ClassifierVersion.active.is_(True))):
        row.active, row.status = False, "retired"
    row = session.get(ClassifierVersion, version)
    row.active, row.status, row.promoted_at = True, "active", utcnow()


def promote(engine: Engine, version: str) -> VersionInfo:
    with Session(engine) as session, session.begin():
        row = session.get(ClassifierVersion, version)
        if row is None:
            raise RegistryError(f"no classifier version {version!r} (see `aio classifier list`)")
        if row.path is None and row.model_blob is None and row.kind != BUILTIN_KIND:
            raise RegistryError(f"version {version!r} has no saved model to load")
        _activate(session, version)
    return get_version(engine, version)


def rollback(engine: Engine) -> VersionInfo:
    """Re-activates the version that was active before the current one."""
    with Session(engine) as session, session.begin():
        current = session.scalar(sa.select(ClassifierVersion).where(ClassifierVersion.active.is_(True)))
        if current is None:
            raise RegistryError("no classifier version is active: nothing to roll back")
        previous = session.scalar(
            sa.select(ClassifierVersion)
            .where(ClassifierVersion.promoted_at.is_not(None), ClassifierVersion.version != current.version,
                   ClassifierVersion.promoted_at <= current.promoted_at)
            .order_by(ClassifierVersion.promoted_at.desc()).limit(1))
        if previous is None:
            raise RegistryError(f"{current.version} is the only version ever promoted: nothing to roll back to")
        _activate(session, previous.version)
        current.status = "rolled-back"
        version = previous.version
    return get_version(engine, version)


# ---- router thresholds ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouterState:
    quality: float | None
    offsets: dict[str, float]
    updated_at: datetime | None
    updated_by: str | None
    retrain_due_at: datetime | None = None
    retrain_due_reason: str | None = None


def router_state(engine: Engine) -> RouterState:
    with Session(engine) as session:
        row = session.get(RouterSettings, ROUTER_SETTINGS_ID)
        if row is None:
            return RouterState(None, {}, None, None)
        return RouterState(row.quality, {k: float(v) for k, v in (row.offsets or {}).items()}, row.updated_at,
                           row.updated_by, row.retrain_due_at, row.retrain_due_reason)


def set_router_state(engine: Engine, *, updated_by: str, quality: float | None = None,
                     offsets: dict[str, float] | None = None, note: str | None = None,
                     retrain_due_reason: str | None = None) -> RouterState:
    """Sets the given fields (None leaves a field as it is); a retrain_due_reason marks a retrain due."""
    if quality is not None and not 0.0 <= quality <= 1.0:
        raise RegistryError(f"quality must be in [0, 1], got {quality}")
    with Session(engine) as session, session.begin():
        row = session.get(RouterSettings, ROUTER_SETTINGS_ID)
        if row is None:
            row = RouterSettings(id=ROUTER_SETTINGS_ID, offsets={}, updated_by=updated_by)
            session.add(row)
        if quality is not None:
            row.quality = quality
        if offsets is not None:
            row.offsets = dict(offsets)
        if retrain_due_reason is not None:
            row.retrain_due_at, row.retrain_due_reason = utcnow(), retrain_due_reason
        row.updated_at, row.updated_by, row.note = utcnow(), updated_by, note
        if quality is not None or offsets is not None:  # the history the dashboard shows
            session.add(ThresholdChange(changed_at=row.updated_at, quality=row.quality, offsets=dict(row.offsets or {}),
                                        updated_by=updated_by, note=note))
    return router_state(engine)


def shift_offset(engine: Engine, tier: str, delta: float, max_offset: float, *, updated_by: str, note: str,
                 retrain_due_reason: str | None = None) -> RouterState:
    """Adds `delta` to `tier`'s stored offset (kept in [0, max_offset]) in one transaction that locks the row, so
    concurrent writers and manual changes compose instead of overwriting each other."""
    with Session(engine) as session, session.begin():
        row = session.scalar(sa.select(RouterSettings).where(RouterSettings.id == ROUTER_SETTINGS_ID)
                             .with_for_update())
        if row is None:
            row = RouterSettings(id=ROUTER_SETTINGS_ID, offsets={}, updated_by=updated_by)
            session.add(row)
        offsets = {k: float(v) for k, v in (row.offsets or {}).items()}
        offsets[tier] = round(min(max_offset, max(0.0, offsets.get(tier, 0.0) + delta)), 6)
        row.offsets = offsets
        if retrain_due_reason is not None:
            row.retrain_due_at, row.retrain_due_reason = utcnow(), retrain_due_reason
        row.updated_at, row.updated_by, row.note = utcnow(), updated_by, note
        session.add(ThresholdChange(changed_at=row.updated_at, quality=row.quality, offsets=dict(offsets),
                                    updated_by=updated_by, note=note))
    return router_state(engine)


def clear_retrain_due(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        row = session.get(RouterSettings, ROUTER_SETTINGS_ID)
        if row is not None:
            row.retrain_due_at = row.retrain_due_reason = None
