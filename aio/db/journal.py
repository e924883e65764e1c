"""The SQL log's write-ahead journal: every request is on local disk before its first token and again when it
ends, until the database holds its row, so a crash (SIGKILL, OOM kill) loses no request.

One JSON-lines file per process in $AIO_HOME/log-spill (`journal-*.jsonl`, 0600), held under an exclusive
`flock` while the process lives. Entries: `begin` (the request as it starts generating), `end` (the finished
record) and `done` (the ids the database committed). A writer that starts on the same folder adopts the files no
live process holds: each request begun or ended there and not done is logged again (the finished record, or the
begun one as status "interrupted"); the insert ignores request ids already stored, so nothing is counted twice.
Files whose requests are all done are deleted as the journal rotates.

Entries are flushed to the OS at once (they survive the process being killed) but not fsynced per request.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Iterable

from aio.db.spill import decode_record, encode_record
from aio.db.records import RequestRecord

logger = logging.getLogger(__name__)

ROTATE_ENTRIES = 5000  # entries per file before a new one is started
INTERRUPTED_ERROR = "the server stopped (crashed or was killed) before the request finished"


def interrupted(record: RequestRecord) -> RequestRecord:
    """A begun record whose request never finished."""
    return dataclasses.replace(record, status="interrupted", http_status=500, error=INTERRUPTED_ERROR)


@dataclasses.dataclass
class _File:
    path: Path
    handle: IO[str]
    open_ids: set[str] = dataclasses.field(default_factory=set)  # begun or ended here, not yet done
    num_entries: int = 0


class Journal:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._files: list[_File] = []  # the current one last
        self._where: dict[str, list[_File]] = {}  # request id -> the files that mention it
        self._open_new_file()

    # ---- the writer's side --------------------------------------------------------------------------------

    def begin(self, record: RequestRecord) -> None:
        self._append("begin", record)

    def end(self, record: RequestRecord) -> None:
        self._append("end", record)

    def done(self, request_ids: Iterable[str]) -> None:
        """The database holds these requests: forget them, and delete files left with nothing open."""
        ids = list(request_ids)
        with self._lock:
            current = self._files[-1]
            self._write(current, {"op": "done", "ids": ids})
            for request_id in ids:
                for file in self._where.pop(request_id, []):
                    file.open_ids.discard(request_id)
            for file in self._files[:-1]:
                if not file.open_ids:
                    self._close(file, delete=True)
            self._files = [f for f in self._files if not f.handle.closed]

    def close(self, delete_if_done: bool = True) -> None:
        with self._lock:
            for file in self._files:
                self._close(file, delete=delete_if_done and not file.open_ids)
            self._files = []

    @property
    def num_open(self) -> int:
        with self._lock:
            return len(self._where)

    def _append(self, op: str, record: RequestRecord) -> None:
        with self._lock:
            file = self._files[-1]
            if file.num_entries >= ROTATE_ENTRIES:
                file = self._open_new_file()
            self._write(file, {"op": op, "record": encode_record(record)})
            file.open_ids.add(record.request_id)
            files = self._where.setdefault(record.request_id, [])
            if file not in files:
                files.append(file)

    def _write(self, file: _File, entry: dict) -> None:
        file.handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        file.handle.flush()
        file.num_entries += 1

    def _open_new_file(self) -> _File:
        path = self.folder / f"journal-{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"  # sorts by age
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        file = _File(path, os.fdopen(fd, "a", encoding="utf-8"))
        self._files.append(file)
        return file

    @staticmethod
    def _close(file: _File, delete: bool) -> None:
        if delete:
            file.path.unlink(missing_ok=True)
        file.handle.close()  # releases the lock

    # ---- recovery -----------------------------------------------------------------------------------------

    def adopt_orphans(self) -> list[RequestRecord]:
        """The requests in files no live process holds that the database may not have: their finished records,
        or their begun records marked interrupted. They are re-journaled here before the files are deleted."""
        mine = {f.path for f in self._files}
        records: dict[str, RequestRecord] = {}
        adopted = []
        for path in sorted(self.folder.glob("journal-*.jsonl")):
            if path in mine:
                continue
            handle = _lock_if_orphan(path)
            if handle is None:
                continue
            adopted.append((path, handle))
            _replay(path, records)
        for record in records.values():
            self.end(record)
        for path, handle in adopted:
            path.unlink(missing_ok=True)
            handle.close()
        if records:
            num_cut = sum(r.status == "interrupted" and r.error == INTERRUPTED_ERROR for r in records.values())
            logger.warning("the SQL log recovered %d request(s) from the journal of a process that stopped "
                           "(%d of them interrupted)", len(records), num_cut)
        return list(records.values())


def _lock_if_orphan(path: Path) -> IO[str] | None:
    """The file opened and locked if no live process holds it, else None."""
    try:
        handle = open(path, "r", encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _replay(path: Path, records: dict[str, RequestRecord]) -> None:
    """Applies the file's entries to `records` (request id -> what to log)."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if entry["op"] == "done":
                for request_id in entry["ids"]:
                    records.pop(request_id, None)
                continue
            record = decode_record(entry["record"])
        except (ValueError, TypeError, KeyError) as exc:  # a torn last line after a crash
            logger.error("skipping unreadable line %d of %s: %s", number, path, exc)
            continue
        if entry["op"] == "end":
            records[record.request_id] = record
        elif record.request_id not in records:
            records[record.request_id] = interrupted(record)
