"""The dashboard's time ranges: `24h`, `7d`, `30d` (any `<N>h` / `<N>d`) or `custom` with `start` and `end`.

Up to 48 hours a range is read from raw rows with its exact bounds, by the hour; longer ranges are read from the
daily aggregates and cover whole UTC days (the first day from midnight; the last day up to its end, or now).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from aio.api.errors import invalid_request

RAW_MAX_SPAN = timedelta(hours=48)
MAX_SPAN = timedelta(days=3660)
DEFAULT_RANGE = "7d"
_RELATIVE = re.compile(r"^(\d{1,5})([hd])$")


@dataclass(frozen=True)
class TimeRange:
    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC
    label: str  # what was asked: "24h", "7d", "custom", ...

    @property
    def source(self) -> str:
        """"raw" (requests rows) or "aggregates" (the daily tables)."""
        return "raw" if self.end - self.start <= RAW_MAX_SPAN else "aggregates"

    @property
    def granularity(self) -> str:
        return "hour" if self.source == "raw" else "day"

    @property
    def first_day(self) -> date:
        return self.start.date()

    @property
    def last_day(self) -> date:
        return (self.end - timedelta(microseconds=1)).date()

    def as_json(self) -> dict[str, str]:
        return {"range": self.label, "start": iso(self.start), "end": iso(self.end), "source": self.source,
                "granularity": self.granularity}


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


MIN_YEAR, MAX_YEAR = 1970, 9000  # moments outside cannot be widened to whole days or compared safely


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=timezone.utc)


def _parse_moment(text: str, param: str, is_end: bool) -> datetime:
    """An ISO 8601 date (an end date includes its whole day) or date-time (naive means UTC)."""
    value = text.strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            day = date.fromisoformat(value)
            if not MIN_YEAR <= day.year <= MAX_YEAR:
                raise ValueError("out of range")
            return _midnight(day + timedelta(days=1) if is_end else day)
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T"))
        if not MIN_YEAR <= moment.year <= MAX_YEAR:
            raise ValueError("out of range")
    except (ValueError, OverflowError):
        raise invalid_request(f"invalid {param} {text!r}: use an ISO 8601 date (2025-03-01) or date-time "
                              f"(2025-03-01T12:00:00Z) between the years {MIN_YEAR} and {MAX_YEAR}", param,
                              "invalid_value") from None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _widen_to_days(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Whole UTC days: from the first day's midnight to the last day's end."""
    return _midnight(start.date()), _midnight((end - timedelta(microseconds=1)).date()) + timedelta(days=1)


def parse_range(range_: str | None, start: str | None = None, end: str | None = None,
                now: datetime | None = None) -> TimeRange:
    """The range asked for in the query parameters; a 400 (OpenAI-shaped) when it makes no sense."""
    now = now or datetime.now(timezone.utc)
    label = (range_ or DEFAULT_RANGE).strip().lower()
    if label != "custom":
        if start is not None or end is not None:
            raise invalid_request("start and end go with range=custom", "range", "invalid_value")
        match = _RELATIVE.match(label)
        if match is None:
            raise invalid_request(f"invalid range {range_!r}: use 24h, 7d, 30d (or <N>h, <N>d) or custom",
                                  "range", "invalid_value")
        amount, unit = int(match.group(1)), match.group(2)
        span = timedelta(hours=amount) if unit == "h" else timedelta(days=amount)
        if amount < 1 or span > MAX_SPAN:
            raise invalid_request(f"invalid range {range_!r}: from 1 hour to {MAX_SPAN.days} days", "range",
                                  "invalid_value")
        if span <= RAW_MAX_SPAN:
            return TimeRange(now - span, now, label)
        first_day = (now - span + timedelta(days=1)).date() if unit == "d" else (now - span).date()
        return TimeRange(_midnight(first_day), now, label)
    if start is None:
        raise invalid_request("range=custom needs start (and optionally end; default now)", "start",
                              "missing_parameter")
    begin = _parse_moment(start, "start", is_end=False)
    finish = _parse_moment(end, "end", is_end=True) if end is not None else now
    if begin >= finish:
        raise invalid_request(f"start ({iso(begin)}) must be before end ({iso(finish)})", "start", "invalid_value")
    if finish - begin > MAX_SPAN:
        raise invalid_request(f"the range is longer than {MAX_SPAN.days} days", "start", "invalid_value")
    if finish - begin <= RAW_MAX_SPAN:
        return TimeRange(begin, finish, "custom")
    begin, finish = _widen_to_days(begin, finish)
    return TimeRange(begin, finish, "custom")
