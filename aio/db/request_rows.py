"""One batch of the SQL request log as one transaction: the new `requests` rows (ON CONFLICT (request_id) DO
NOTHING RETURNING request_id) and the daily roll-ups (`aio.db.rollups`) grown by the rows the insert returned, and
only by those. The log writer (`aio.db.log_writer`) queues, retries and accounts around it."""
from __future__ import annotations

import math
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from aio.db.models import Request
from aio.db.records import RequestRecord
from aio.db.rollups import rollup_upserts, rollup_values

_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
_INSERTS = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


class RequestRows:
    def __init__(self, engine: Engine) -> None:
        if engine.dialect.name not in _INSERTS:
            raise ValueError(f"the SQL log supports {sorted(_INSERTS)}, not {engine.dialect.name!r}")
        self.engine = engine
        self._insert = _insert_requests(_INSERTS[engine.dialect.name])
        self._upserts = rollup_upserts(_INSERTS[engine.dialect.name])

    def write(self, batch: list[RequestRecord]) -> int:
        """One transaction: the new rows and their aggregates. Returns how many rows were new."""
        rows = list({r.request_id: _row(r) for r in reversed(batch)}.values())  # the first of any duplicate ids
        with self.engine.begin() as connection:
            new_ids = set(connection.execute(self._insert, rows).scalars())
            if new_ids:
                new_rows = [row for row in rows if row["request_id"] in new_ids]
                for upsert, values in zip(self._upserts, rollup_values(new_rows)):
                    if values:
                        connection.execute(upsert, values)
        return len(new_ids)


def _insert_requests(insert: Any) -> sa.Insert:
    requests = Request.__table__
    return insert(requests).on_conflict_do_nothing(index_elements=[requests.c.request_id]) \
        .returning(requests.c.request_id)


def _row(record: RequestRecord) -> dict[str, Any]:
    """The record as a `requests` row, with what PostgreSQL would refuse made storable: NUL characters in text
    (a client can send "\\u0000") become U+FFFD, and NaN or infinite tier scores (invalid JSON) become null."""
    row = {name: getattr(record, name) for name in _RECORD_FIELDS}
    for name, value in row.items():
        if isinstance(value, str) and "\x00" in value:
            row[name] = value.replace("\x00", "\ufffd")
    if row["tier_scores"] is not None:
        row["tier_scores"] = [x if x is None or math.isfinite(x) else None for x in row["tier_scores"]]
    created_at: datetime = row["created_at"]
    row["created_at"] = created_at.replace(tzinfo=timezone.utc) if created_at.tzinfo is None \
        else created_at.astimezone(timezone.utc)
    return row
