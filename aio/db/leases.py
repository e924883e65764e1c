"""Leases in the shared database (`leases`): one holder at a time per name, for `ttl_s` after each renewal.

The quality monitor's controller takes the "quality-monitor" lease, so a deployment of N replicas (plus, or
instead, `aio monitor`) moves thresholds from one place. A holder that dies stops renewing and another takes
over after `ttl_s`. Expiry uses the holders' clocks (Unix time): keep them in sync (NTP) to well under `ttl_s`.
"""
from __future__ import annotations

import os
import socket
import time
import uuid

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.models import Lease


def holder_name(prefix: str = "") -> str:
    """Unique per process: host, pid and a random part."""
    return f"{prefix or socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class SqlLease:
    def __init__(self, engine: Engine, name: str, holder: str, ttl_s: float = 15.0) -> None:
        self.engine, self.name, self.holder, self.ttl_s = engine, name, holder, ttl_s

    def hold(self) -> bool:
        now = time.time()
        table = Lease.__table__
        with self.engine.begin() as connection:
            renewed = connection.execute(
                table.update().where(table.c.name == self.name,
                                     sa.or_(table.c.holder == self.holder, table.c.expires_at_s < now))
                .values(holder=self.holder, expires_at_s=now + self.ttl_s)).rowcount
            if renewed:
                return True
            exists = connection.execute(sa.select(table.c.name).where(table.c.name == self.name)).first()
        if exists is not None:
            return False
        try:
            with self.engine.begin() as connection:
                connection.execute(table.insert().values(name=self.name, holder=self.holder,
                                                         expires_at_s=now + self.ttl_s))
            return True
        except sa.exc.IntegrityError:  # another process inserted it first
            return False

    def release(self) -> None:
        table = Lease.__table__
        with self.engine.begin() as connection:
            connection.execute(table.update().where(table.c.name == self.name, table.c.holder == self.holder)
                               .values(expires_at_s=0.0))

    def current_holder(self) -> str | None:
        table = Lease.__table__
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(table.c.holder, table.c.expires_at_s)
                                     .where(table.c.name == self.name)).first()
        return row.holder if row is not None and row.expires_at_s > time.time() else None
