"""The SQL request log: the server hands records over without waiting; one background thread writes them in batches.

Each batch is one transaction: the `requests` rows are inserted with ON CONFLICT (request_id) DO NOTHING RETURNING
request_id, and the daily roll-ups (`aio.db.rollups`) grow by the rows that the insert returned, and only by those.
A batch retried after an ambiguous commit (the connection died while committing) therefore stores and counts every
request once.

While the database is unreachable the records stay queued (in memory up to `max_buffer`, then in the spill file)
and the batch is retried with exponential backoff; nothing is dropped. The one exception is a record refused for
its own content (a constraint or data error that it raises alone): isolated from its batch, it is logged with its
request id and dropped, so that one bad record cannot stop the log.

With a journal (`aio.db.journal`) every request is also on local disk from its start (`begin`) until the database
holds it, so a crash loses nothing.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.database import safe_url
from aio.db.journal import Journal
from aio.db.records import RequestRecord
from aio.db.request_rows import RequestRows
from aio.db.spill import SpillFile

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogWriterStats:
    written: int  # rows inserted
    duplicates: int  # records whose request_id was already stored
    pending: int  # submitted, not yet committed
    failures: int  # failed write attempts (each retried)
    dropped: int  # records the database refused (see the module docstring)
    in_outage: bool  # the last write attempt failed
    spilled: int = 0  # records waiting in the spill file (the buffer was full)


class LogWriter:
    """Writes `RequestRecord`s to `requests` and the daily roll-ups on a background thread.

    `submit` never blocks and never touches the database; `flush` and `close` block, so call them off the event
    loop (`await asyncio.to_thread(writer.flush, 5)`).
    """

    def __init__(self, engine: Engine, batch_size: int = 256, flush_interval_s: float = 0.5, *,
                 retry_initial_s: float = 0.1, retry_max_s: float = 5.0, max_buffer: int = 10_000,
                 spill_dir: Path | None = None, journal: bool = False, replica: str | None = None) -> None:
        self._rows = RequestRows(engine)  # ValueError for a dialect the log does not support
        if batch_size < 1 or flush_interval_s <= 0:
            raise ValueError("batch_size must be >= 1 and flush_interval_s > 0")
        self._engine = engine
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s

        self._cond = threading.Condition()
        self._queue: deque[RequestRecord] = deque()
        self._inflight = 0  # records the worker has taken and not yet finished
        self._submitted = 0
        self._finished = 0  # committed, found already stored, or dropped: flush() waits on this
        self._written = self._duplicates = self._failures = self._dropped = 0
        self._flush_waiters = 0
        self._stopping = False
        self._abandon = threading.Event()  # close() timed out: the worker stops retrying
        self._outage_since: float | None = None
        self._last_write_ok = False  # no write tried yet: the database is not known to be up
        self._thread: threading.Thread | None = None
        self._max_buffer = max_buffer  # records kept in memory; beyond, they go to the spill file (if any)
        self._spill = SpillFile(spill_dir) if spill_dir is not None else None
        self._num_spilled = 0  # records in the spill file, counted as pending
        self.replica = replica  # stamped on records that do not name one
        if self._spill is not None:
            self._queue.extend(self._spill.adopt_orphans())
        self._journal = Journal(spill_dir) if journal and spill_dir is not None else None
        if self._journal is not None:
            recovered = self._journal.adopt_orphans()
            self._queue.extend(recovered)
            self._submitted += len(recovered)

    # --- the caller's side ------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="aio-log-writer", daemon=True)
                self._thread.start()

    def begin(self, record: RequestRecord) -> None:
        """Journal a request that starts generating (no-op without a journal): if the process dies before it is
        submitted, the next writer on this folder logs it as interrupted."""
        if self._journal is not None:
            self._journal.begin(self._stamped(record))

    def submit(self, record: RequestRecord) -> None:
        """Queue `record` for writing. Thread-safe; returns at once. RuntimeError once `close()` was called."""
        record = self._stamped(record)
        with self._cond:
            if self._stopping:
                raise RuntimeError(f"the log writer is closed; request {record.request_id} cannot be logged")
            if self._journal is not None:
                self._journal.end(record)
            self._submitted += 1
            if self._spill is not None and len(self._queue) >= self._max_buffer:
                self._spill.append(record)  # the database has been away long: keep memory bounded
                self._num_spilled += 1
                return
            self._queue.append(record)
            if len(self._queue) == 1 or len(self._queue) == self._batch_size:
                self._cond.notify_all()  # start the flush-interval clock, or a full batch is ready

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record submitted so far is written (or found already stored, or dropped as refused);
        False if `timeout` ran out first."""
        with self._cond:
            target = self._submitted
            self._flush_waiters += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._finished >= target, timeout)
            finally:
                self._flush_waiters -= 1

    def close(self, timeout: float = 30.0) -> bool:
        """Write what is pending, then stop. Records still unwritten after `timeout` are reported and lost."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.pending:
            self.start()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                self._abandon.set()
                thread.join(1.0)
        lost = self.pending
        if self._journal is not None:
            self._journal.close()  # a file with unwritten requests stays for the next start
        if lost:
            kept = " (kept in the journal for the next start)" if self._journal is not None else "; they are lost"
            logger.error("the SQL log could not write %d request record(s) to %s within %g s%s",
                         lost, safe_url(self._engine.url), timeout, kept)
        return lost == 0

    def _stamped(self, record: RequestRecord) -> RequestRecord:
        if record.replica is None and self.replica is not None:
            record.replica = self.replica
        return record

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._inflight + self._num_spilled

    def stats(self) -> LogWriterStats:
        with self._cond:
            return LogWriterStats(written=self._written, duplicates=self._duplicates,
                                  pending=len(self._queue) + self._inflight + self._num_spilled,
                                  failures=self._failures, dropped=self._dropped,
                                  in_outage=self._outage_since is not None, spilled=self._num_spilled)

    # --- the worker -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            if not self._write_until_done(batch):
                return  # abandoned by close()

    def _next_batch(self) -> list[RequestRecord] | None:
        """Wait for a full batch, the flush interval, a flush() or close(); None when closed and drained."""
        with self._cond:
            deadline: float | None = None
            while True:
                if not self._queue and self._num_spilled:
                    self._unspill(force=True)
                if self._queue:
                    if len(self._queue) >= self._batch_size or self._flush_waiters or self._stopping:
                        break
                    now = time.monotonic()
                    deadline = deadline or now + self._flush_interval_s
                    if now >= deadline:
                        break
                    self._cond.wait(deadline - now)
                elif self._stopping:
                    return None
                else:
                    self._cond.wait()
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._batch_size))]
            self._inflight = len(batch)
            self._unspill()
            return batch

    def _unspill(self, force: bool = False) -> None:
        """Spilled records back into memory once the database has taken a write again and there is room (the
        caller holds the lock); `force` when nothing else is queued."""
        if self._num_spilled and (force or (len(self._queue) <= self._max_buffer // 2 and self._last_write_ok)):
            records = self._spill.take()
            self._num_spilled -= len(records)
            self._queue.extend(records)

    def _write_until_done(self, batch: list[RequestRecord]) -> bool:
        """Write `batch`, retrying through outages; False if close() gave up on it."""
        delay = self._retry_initial_s
        while not self._abandon.is_set():
            try:
                inserted = self._rows.write(batch)
            except Exception as exc:  # noqa: BLE001 - classified below; the worker must not die
                if _refused(exc):
                    return self._isolate(batch, exc)
                self._on_failure(exc)
                if self._abandon.wait(delay):
                    break
                delay = min(delay * 2, self._retry_max_s)
                continue
            if self._journal is not None:
                self._journal.done([record.request_id for record in batch])
            self._on_success(len(batch), inserted)
            return True
        return False

    def _isolate(self, batch: list[RequestRecord], exc: Exception) -> bool:
        """The database refused the batch: write its records one by one, dropping only those refused alone."""
        if len(batch) > 1:
            for record in batch:
                if not self._write_until_done([record]):
                    return False
            return True
        logger.error("the SQL log dropped request %s, which the database refuses: %s", batch[0].request_id, exc)
        if self._journal is not None:
            self._journal.done([batch[0].request_id])
        with self._cond:
            self._dropped += 1
            self._finish(1)
        return True

    def _on_failure(self, exc: Exception) -> None:
        with self._cond:
            self._failures += 1
            self._last_write_ok = False
            first = self._outage_since is None
            if first:
                self._outage_since = time.monotonic()
            waiting = len(self._queue) + self._inflight
        if first:
            logger.warning("the SQL log cannot write to %s (%s: %s); keeping %d record(s) and retrying",
                           safe_url(self._engine.url), type(exc).__name__, _reason(exc), waiting)

    def _on_success(self, num_records: int, inserted: int) -> None:
        with self._cond:
            self._written += inserted
            self._duplicates += num_records - inserted
            self._finish(num_records)
            self._last_write_ok = True
            since, self._outage_since = self._outage_since, None
            waiting = len(self._queue) + self._inflight
        if since is not None:
            logger.info("the SQL log is writing to %s again after %.1f s; %d record(s) still queued",
                        safe_url(self._engine.url), time.monotonic() - since, waiting)

    def _finish(self, num_records: int) -> None:
        """Account for finished records; the caller holds the lock."""
        self._inflight -= num_records
        self._finished += num_records
        self._cond.notify_all()


def _refused(exc: Exception) -> bool:
    """True when the data itself is rejected (by the database, the driver or our code); other errors (connection
    lost, database locked, missing table, read-only replica, pool timeout) are retried: they hit every record."""
    if isinstance(exc, (sa.exc.IntegrityError, sa.exc.DataError)):
        return True
    if isinstance(exc, sa.exc.DBAPIError):
        return False
    return isinstance(exc, sa.exc.StatementError) or not isinstance(exc, sa.exc.SQLAlchemyError)


def _reason(exc: Exception) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
