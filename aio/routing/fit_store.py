"""The routing fits in the database (`routing_fits`): the active one is what every replica routes `auto` with."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from aio.db.models import RoutingFit as RoutingFitRow
from aio.routing.outcome_fit import RoutingFit


def save_active(engine: Engine, fit: RoutingFit, note: str) -> int:
    """Stores `fit` as the active one (the previous one stays, inactive); returns its id."""
    with Session(engine) as session, session.begin():
        session.execute(sa.update(RoutingFitRow).where(RoutingFitRow.active.is_(True)).values(active=False))
        row = RoutingFitRow(classifier_version=fit.classifier_version, fingerprints=fit.fingerprints,
                            fit=fit.to_dict(), active=True, note=note)
        session.add(row)
        session.flush()
        return row.id


def load_active(engine: Engine) -> tuple[int, RoutingFit] | None:
    with Session(engine) as session:
        row = session.scalars(sa.select(RoutingFitRow).where(RoutingFitRow.active.is_(True))
                              .order_by(RoutingFitRow.id.desc()).limit(1)).first()
        if row is None:
            return None
        try:
            return row.id, RoutingFit.from_dict(row.fit)
        except (KeyError, ValueError, TypeError):
            return None
