"""`/schedule <when> <prompt>`: the small grammar of <when> (pure), as crontab fields in the workspace's time zone.

    daily 09:00          every day at 09:00
    weekdays 18:30       Monday to Friday at 18:30
    weekends 10:00       Saturday and Sunday at 10:00
    mon 10:00            one weekday (mon tue wed thu fri sat sun), or several: mon,wed,fri 10:00
    every 2h             at minute 0 of every 2nd hour from midnight (1-23 hours)
    every 30m            every 30th minute from the top of the hour (1-59 minutes)
    0 9 * * 1-5          a cron string: minute hour day-of-month month day-of-week (5 fields)

Times are HH:MM, 24-hour. Whatever follows <when> is the prompt; it must not be empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from celery.schedules import crontab

WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_EVERY = re.compile(r"^(\d{1,2})([hm])$")
_CRON_FIELD = re.compile(r"^[\d*/,\-]+$")


class WhenError(ValueError):
    """The <when> is not in the grammar (the reply shows the grammar)."""


@dataclass(frozen=True)
class When:
    minute: str
    hour: str
    day_of_month: str = "*"
    month_of_year: str = "*"
    day_of_week: str = "*"

    @property
    def cron(self) -> str:
        return f"{self.minute} {self.hour} {self.day_of_month} {self.month_of_year} {self.day_of_week}"


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


def _cron(fields: list[str]) -> When:
    when = When(
        minute=fields[0], hour=fields[1], day_of_month=fields[2], month_of_year=fields[3], day_of_week=fields[4]
    )
    try:  # Celery's own parser: what beat will run is what is accepted here
        crontab(
            minute=when.minute,
            hour=when.hour,
            day_of_month=when.day_of_month,
            month_of_year=when.month_of_year,
            day_of_week=when.day_of_week,
        )
    except (ValueError, IndexError) as error:
        raise WhenError(f"{when.cron!r} is not a valid cron string") from error
    return when


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
