"""Generated date and unit tasks: weekdays, months, time constants, conversions, date and clock arithmetic."""
from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta
from fractions import Fraction

from .templates import MONTHS, WEEKDAYS, _day, _distinct, _format, plural, template


_CONSTANTS = (("How many days are in a week?", timedelta(weeks=1) // timedelta(days=1)),
              ("How many hours are in a day?", timedelta(days=1) // timedelta(hours=1)),
              ("How many minutes are in an hour?", timedelta(hours=1) // timedelta(minutes=1)),
              ("How many seconds are in a minute?", timedelta(minutes=1) // timedelta(seconds=1)),
              ("How many months are in a year?", len(MONTHS)),
              ("How many days are in a year that is not a leap year?", (date(2024, 1, 1) - date(2023, 1, 1)).days))
# unit: (plural name, larger unit, how many units in one larger unit)
_UNITS = (("meters", "kilometers", 1000), ("grams", "kilograms", 1000), ("centimeters", "meters", 100),
          ("milliliters", "liters", 1000))
_DURATIONS = (("minutes", "hours", timedelta(hours=1) // timedelta(minutes=1)),
              ("hours", "days", timedelta(days=1) // timedelta(hours=1)),
              ("days", "weeks", timedelta(weeks=1) // timedelta(days=1)),
              ("seconds", "minutes", timedelta(minutes=1) // timedelta(seconds=1)))


@template("dates_units", 1)
def next_or_previous_day(rng):
    i, step = rng.randrange(7), rng.choice((1, -1))
    word = "after" if step == 1 else "before"
    return f"What day comes {word} {WEEKDAYS[i]}?", WEEKDAYS[(i + step) % 7], "text"


@template("dates_units", 1)
def next_month(rng):
    i = rng.randrange(12)
    return f"What month comes after {MONTHS[i]}?", MONTHS[(i + 1) % 12], "text"


@template("dates_units", 1)
def time_constant(rng):
    question, value = rng.choice(_CONSTANTS)
    return question, value, "number"


@template("dates_units", 1)
def days_in_month(rng):
    month = rng.choice([m for m in range(1, 13) if m != 2])  # February depends on the year
    return f"How many days are in {MONTHS[month - 1]}?", calendar.monthrange(2023, month)[1], "number"


@template("dates_units", 2)
def duration_conversion(rng):
    small, large, factor = rng.choice(_DURATIONS)
    n = rng.randint(2, 12)
    return f"How many {small} are in {n} {large}?", n * factor, "number"


@template("dates_units", 2)
def unit_conversion(rng):
    small, large, factor = rng.choice(_UNITS)
    n = rng.randint(2, 9)
    return f"How many {small} are in {n} {large}?", n * factor, "number"


@template("dates_units", 3)
def days_within_month(rng):
    month = rng.randint(1, 12)
    first, second = sorted(_distinct(rng, 1, 28, 2))
    a, b = date(2023, month, first), date(2023, month, second)
    return (f"How many days after {MONTHS[month - 1]} {first} is {MONTHS[month - 1]} {second}?",
            (b - a).days, "number")


@template("dates_units", 3)
def weekday_within_month(rng):
    year, month = rng.randint(2015, 2030), rng.randint(1, 12)
    reference, target = date(year, month, 1), date(year, month, rng.randint(8, 28))
    return (f"{_day(reference)} was a {WEEKDAYS[reference.weekday()]}. What day of the week was "
            f"{_day(target)}?", WEEKDAYS[target.weekday()], "text")


@template("dates_units", 3)
def decimal_unit_conversion(rng):
    small, large, factor = rng.choice(_UNITS)
    tenths = rng.choice([t for t in range(11, 100) if t % 10])
    amount = Fraction(tenths, 10)
    if rng.random() < 0.5:
        return f"How many {small} are in {_format(amount)} {large}?", amount * factor, "number"
    return f"How many {large} are {_format(amount * factor)} {small}?", amount, "number"


@template("dates_units", 3)
def hours_and_minutes(rng):
    hours, minutes = rng.randint(1, 5), rng.randint(5, 55)
    total = timedelta(hours=hours, minutes=minutes) // timedelta(minutes=1)
    return f"How many minutes are in {plural(hours, 'hour')} and {minutes} minutes?", total, "number"


@template("dates_units", 4)
def days_across_months(rng):
    year = rng.choice((2023, 2024))
    a = date(year, rng.randint(1, 10), rng.randint(1, 28))
    b = a + timedelta(days=rng.randint(20, 80))
    return f"How many days after {_day(a)} is {_day(b)}?", (b - a).days, "number"


@template("dates_units", 4)
def weekday_across_months(rng):
    year = rng.randint(2015, 2030)
    reference = date(year, rng.randint(1, 9), 1)
    target = reference + timedelta(days=rng.randint(35, 100))
    return (f"{_day(reference)} was a {WEEKDAYS[reference.weekday()]}. What day of the week was "
            f"{_day(target)}?", WEEKDAYS[target.weekday()], "text")


@template("dates_units", 4)
def date_after_days(rng):
    start = date(rng.choice((2023, 2024)), rng.randint(1, 11), rng.randint(1, 28))
    days = rng.randint(15, 60)
    return (f"What is the date {days} days after {_day(start)}? Write it as YYYY-MM-DD.",
            (start + timedelta(days=days)).isoformat(), "text")


@template("dates_units", 4)
def clock_arithmetic(rng):
    start = datetime(2024, 1, 1, rng.randint(8, 21), rng.choice(range(0, 60, 5)))
    hours, minutes = rng.randint(1, 3), rng.choice(range(5, 60, 5))
    end = start + timedelta(hours=hours, minutes=minutes)
    return (f"A movie starts at {start:%H:%M} and lasts {plural(hours, 'hour')} and {minutes} minutes. At what "
            f"time does it end? Write the time as HH:MM on a 24-hour clock.", f"{end:%H:%M}", "text")


@template("dates_units", 4)
def speed_conversion(rng):
    speed = rng.choice(range(36, 150, 6))
    per_minute = Fraction(speed * 1000, timedelta(hours=1) // timedelta(minutes=1))
    return (f"A car drives at {speed} kilometers per hour. How many meters does it drive in one minute?",
            per_minute, "number")
