"""`/schedule <when> <prompt>`: the small grammar of <when> (pure), as crontab fields in the workspace's time zone.

    daily 09:00          every day at 09:00
    weekdays 18:30       Monday to Friday at 18:30
    weekends 10:00       Saturday and Sunday at 10:00
    mon 10:00            one weekday (mon tue wed thu fri sat sun), or several: mon,wed,fri 10:00
    every 2h             at minute 0 of every 2nd hour from midnight (1-23 hours)
    every 30m            every 30th minute from the top of the hour (1-59 minutes)
    0 9 * * 1-5          a cron string: minute hour day-of-month month day-of-week (5 fields)

Times are HH:MM, 24-hour. Whatever follows <when> is the prompt; it must not be empty.

A cron string is accepted only when both Celery (what beat runs) and django-celery-beat's validators (what the
admin's crontab form accepts) take it: one beat refuses later would raise on every tick, or on its first read.
`when_shortest_gap_minutes` is the fewest minutes between two runs, for the shortest interval (U4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from celery.schedules import ParseException, crontab, crontab_parser
from django.core.exceptions import ValidationError
from django_celery_beat import validators as beat_validators

WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_EVERY = re.compile(r"^(\d{1,2})([hm])$")
_CRON_FIELD = re.compile(r"^[\d*/,\-]+$")


class CronFields(Protocol):
    """Five crontab fields: a `When`, or django-celery-beat's CrontabSchedule."""

    @property
    def minute(self) -> str: ...
    @property
    def hour(self) -> str: ...
    @property
    def day_of_month(self) -> str: ...
    @property
    def month_of_year(self) -> str: ...
    @property
    def day_of_week(self) -> str: ...


def cron_text(fields: CronFields) -> str:
    """The fields as one cron string, as people read it (`0 9 * * 1-5`)."""
    return f"{fields.minute} {fields.hour} {fields.day_of_month} {fields.month_of_year} {fields.day_of_week}"


class WhenError(ValueError):
    """The <when> is not in the grammar (the reply shows the grammar)."""


class CronError(WhenError):
    """A cron string Celery or django-celery-beat refuses (an empty part, a zero step, Feb 31): the reply says so."""

    def __init__(self, cron: str) -> None:
        super().__init__(f"{cron!r} is not a cron string that can run")
        self.cron = cron


@dataclass(frozen=True)
class When:
    minute: str
    hour: str
    day_of_month: str = "*"
    month_of_year: str = "*"
    day_of_week: str = "*"

    @property
    def cron(self) -> str:
        return cron_text(self)


def _at(time_word: str, *, day_of_week: str = "*") -> When:
    match = _TIME.match(time_word)
    if match is None:
        raise WhenError(f"{time_word!r} is not a time like 09:00")
    return When(minute=str(int(match.group(2))), hour=str(int(match.group(1))), day_of_week=day_of_week)


def _every(amount_word: str) -> When:
    match = _EVERY.match(amount_word.lower())
    if match is None:
        raise WhenError(f"{amount_word!r} is not an interval like 2h or 30m")
    amount, unit = int(match.group(1)), match.group(2)
    if unit == "h" and 1 <= amount <= 23:
        return When(minute="0", hour="*" if amount == 1 else f"*/{amount}")
    if unit == "m" and 1 <= amount <= 59:
        return When(minute="*" if amount == 1 else f"*/{amount}", hour="*")
    raise WhenError(f"{amount_word!r} is out of range (1-23h, 1-59m)")


_BEAT_VALIDATORS = (
    beat_validators.minute_validator,
    beat_validators.hour_validator,
    beat_validators.day_of_month_validator,
    beat_validators.month_of_year_validator,
    beat_validators.day_of_week_validator,
)


def _crontab(when: When) -> crontab:
    return crontab(
        minute=when.minute,
        hour=when.hour,
        day_of_month=when.day_of_month,
        month_of_year=when.month_of_year,
        day_of_week=when.day_of_week,
    )


def _cron(fields: list[str]) -> When:
    when = When(
        minute=fields[0], hour=fields[1], day_of_month=fields[2], month_of_year=fields[3], day_of_week=fields[4]
    )
    try:  # Celery's own parser: what beat will run is what is accepted here; and what the admin's form accepts
        _crontab(when)
        for validate, field in zip(_BEAT_VALIDATORS, fields, strict=True):
            validate(field)
    except (ValueError, IndexError, ParseException, ValidationError) as error:  # ParseException is no ValueError
        raise CronError(when.cron) from error
    return when


MINUTES_A_DAY = 24 * 60


def when_shortest_gap_minutes(when: When) -> int:
    """The fewest minutes between two runs of `when` (pure; `when` as `schedule_parse` made it).

    The gaps between the run times of a day, and from the day's last to the next day's first: a day-of-week or
    day-of-month rule only ever lengthens a gap, so counting that last one whatever the days is the safe side.
    `*/14` runs at :56 and the next hour's :00, 4 minutes apart.
    """
    hours, minutes = crontab_parser(24).parse(when.hour), crontab_parser(60).parse(when.minute)
    times = sorted(hour * 60 + minute for hour in hours for minute in minutes)
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    return min([*gaps, times[0] + MINUTES_A_DAY - times[-1]])


def schedule_parse(text: str) -> tuple[When, str]:
    """(when, prompt) from the words after `/schedule`; raises WhenError when <when> or the prompt is missing."""
    words = text.split()
    if not words:
        raise WhenError("nothing to schedule")
    head = words[0].lower()
    if len(words) >= 5 and all(_CRON_FIELD.match(word) for word in words[:5]):
        when, used = _cron(words[:5]), 5
    elif head in ("daily", "weekdays", "weekends") and len(words) >= 2:
        day_of_week = {"daily": "*", "weekdays": "1-5", "weekends": "0,6"}[head]
        when, used = _at(words[1], day_of_week=day_of_week), 2
    elif head == "every" and len(words) >= 2:
        when, used = _every(words[1]), 2
    elif all(day in WEEKDAYS for day in head.split(",")) and len(words) >= 2:
        days = ",".join(str(WEEKDAYS[day]) for day in head.split(","))
        when, used = _at(words[1], day_of_week=days), 2
    else:
        raise WhenError(f"{words[0]!r} does not start a schedule")
    parts = text.strip().split(None, used)  # the prompt keeps its own lines and spacing
    prompt = parts[used].strip() if len(parts) > used else ""
    if not prompt:
        raise WhenError("the prompt is missing")
    return when, prompt
