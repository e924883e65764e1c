"""Where the SQL log's records go when the in-memory buffer is full (the database has been down for a while):
JSON lines in a local folder, read back once the buffer has room. Files of a process that died are adopted by
the next writer that starts on the same folder, so a crash during an outage loses nothing already spilled."""
from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from dataclasses import asdict, fields
from datetime import datetime
from pathlib import Path

from aio.db.records import RequestRecord
from aio.processes import pid_alive

logger = logging.getLogger(__name__)
_FIELDS = {f.name for f in fields(RequestRecord)}


def encode_record(record: RequestRecord) -> dict:
    data = asdict(record)
    data["created_at"] = record.created_at.isoformat()
    return data


def decode_record(data: dict) -> RequestRecord:
    data = {k: v for k, v in data.items() if k in _FIELDS}
    data["created_at"] = datetime.fromisoformat(data["created_at"])
    return RequestRecord(**data)


def _encode(record: RequestRecord) -> str:
    return json.dumps(encode_record(record), ensure_ascii=False)


def _decode(line: str) -> RequestRecord:
    return decode_record(json.loads(line))


class SpillFile:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"spill-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._lock = threading.Lock()
        self.num_records = 0  # in this writer's file now

    def append(self, record: RequestRecord) -> None:
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(_encode(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
            self.num_records += 1

    def take(self) -> list[RequestRecord]:
        """Everything spilled so far (this writer's file is emptied)."""
        with self._lock:
            if not self.path.exists():
                return []
            taking = self.path.with_suffix(".taking")
            self.path.rename(taking)
            self.num_records = 0
        records = self._read(taking)
        taking.unlink()
        return records

    def adopt_orphans(self) -> list[RequestRecord]:
        """Records spilled by writers whose process is gone."""
        records: list[RequestRecord] = []
        for path in sorted(self.folder.glob("spill-*.jsonl")) + sorted(self.folder.glob("spill-*.taking")):
            if path == self.path:
                continue
            try:
                pid = int(path.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if pid_alive(pid):
                continue
            records += self._read(path)
            path.unlink()
        if records:
            logger.warning("the SQL log adopted %d record(s) spilled by a process that stopped", len(records))
        return records

    @staticmethod
    def _read(path: Path) -> list[RequestRecord]:
        records = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(_decode(line))
            except (ValueError, TypeError, KeyError) as exc:  # a torn last line after a crash
                logger.error("skipping unreadable line %d of %s: %s", number, path, exc)
        return records
