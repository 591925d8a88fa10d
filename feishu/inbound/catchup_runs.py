"""D2 (issue 23): each catch-up is recorded before it is queued (`feishu.CatchupRun`), so none is lost on the way.

A trigger (a long connection back after a gap, a worker starting after an outage, an operator's action) records
where the reading starts, then hands the run's id to the broker after commit. What could lose a catch-up between
the trigger and the end of the reading is each covered:
- the broker refuses the task (Redis down at that moment): `enqueued_at` stays empty and the inbound sweeper
  (every 30 s) queues it again a minute later (`catchups_sweep`);
- the broker loses the task, or its worker dies mid-run (the task is acknowledged late): the broker hands it out
  again, and past its redelivery interval the sweeper queues it again, at most CATCHUP_MAX_SWEEPS times;
- Feishu cannot answer for now (a 5xx, a rate limit, no connection): the task retries after its wait, the run
  re-stamped as queued so the sweeper leaves it to the retry (feishu.tasks.catchup_run).
Running a catch-up twice is harmless: a message stored already is found, not stored again. The run's row ends
with what it read and stored, or why it could not (a refusal, such as a missing scope, is final); the bot's page
lists the latest.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.models import Bot
from agents.secrets import upstream_error_redacted
from agents.services.turns import broker_redelivery_seconds
from core.tasks_enqueue import task_enqueue
from feishu import tasks as feishu_tasks
from feishu.inbound.catchup import CatchupResult, catchup_run, catchup_since
from feishu.models import CatchupRun
from feishu.outbound.api_errors import FeishuApiError

logger = logging.getLogger(__name__)

# A run whose enqueue the broker refused is queued again this long after it was recorded.
CATCHUP_REFUSED_AFTER_SECONDS = 60
# A run the sweeper had to queue again this many times is given up on (its row says so).
CATCHUP_MAX_SWEEPS = 5
ERROR_MAX_CHARS = 500


def catchup_record(*, bot: Bot, trigger: str, gap_started: datetime | None = None) -> CatchupRun:
    """Record a catch-up of `bot` reading from where its stored messages end now, or from `gap_started` when that
    is earlier (the start is fixed now, not when a worker runs it: see feishu.inbound.catchup)."""
    since = catchup_since(bot=bot)
    if gap_started is not None:
        since = min(since, gap_started)
    return CatchupRun.objects.create(bot=bot, trigger=trigger, since=since)


def catchup_enqueue(*, bot: Bot, trigger: str, gap_started: datetime | None = None) -> CatchupRun:
    """Record a catch-up (`catchup_record`) and queue its task once the caller's transaction commits."""
    catchup = catchup_record(bot=bot, trigger=trigger, gap_started=gap_started)
    transaction.on_commit(functools.partial(_enqueue, catchup_pk=catchup.pk))
    return catchup


def _enqueue(*, catchup_pk: int) -> bool:
    """Queue the run's task, stamping `enqueued_at` first (cleared again when the broker refuses it)."""
    stamp = timezone.now()
    CatchupRun.objects.filter(pk=catchup_pk).update(enqueued_at=stamp)
    if task_enqueue(task=feishu_tasks.catchup_run, args=[catchup_pk], what="feishu catch-up"):
        return True
    CatchupRun.objects.filter(pk=catchup_pk, enqueued_at=stamp).update(enqueued_at=None)
    return False


def catchup_execute(*, catchup_pk: int, may_retry: bool) -> int:
    """Run the recorded catch-up; the number of messages it stored. A Feishu error a later try may get past is
    raised while `may_retry` (the caller retries; the run is re-stamped as queued), else recorded on the run."""
    catchup = CatchupRun.objects.select_related("bot").filter(pk=catchup_pk, finished_at__isnull=True).first()
    if catchup is None:
        return 0  # finished already: a second delivery of its task
    if not catchup.bot.is_enabled:
        _finish(catchup_pk=catchup_pk, error="The bot was disabled before its catch-up ran.")
        return 0
    try:
        result = catchup_run(bot=catchup.bot, since=catchup.since)
    except FeishuApiError as error:
        text = upstream_error_redacted(
            f"Feishu answered: {error}", extra=catchup.bot.feishu_secrets, max_chars=ERROR_MAX_CHARS
        )
        if error.is_retryable and may_retry:
            CatchupRun.objects.filter(pk=catchup_pk).update(enqueued_at=timezone.now(), error=text)
            raise
        logger.warning("feishu catch-up failed", extra={"catchup": catchup_pk, "code": error.code})
        _finish(catchup_pk=catchup_pk, error=text)
        return 0
    _finish(catchup_pk=catchup_pk, result=result)
    return result.stored


def catchup_now(*, bot: Bot) -> CatchupRun:
    """An operator's catch-up, run in their request (the bots list's action) and recorded like any other: a request
    that dies half-way leaves the run open for the sweeper."""
    catchup = catchup_record(bot=bot, trigger=CatchupRun.Trigger.OPERATOR)
    catchup_execute(catchup_pk=catchup.pk, may_retry=False)
    catchup.refresh_from_db()
    return catchup


def _finish(*, catchup_pk: int, result: CatchupResult | None = None, error: str = "") -> None:
    counts = {}
    if result is not None:
        counts = {"chats": result.chats, "read": result.read, "stored": result.stored, "dropped": result.dropped}
    CatchupRun.objects.filter(pk=catchup_pk, finished_at__isnull=True).update(
        finished_at=timezone.now(), error=error, **counts
    )


def catchups_sweep(*, now: datetime | None = None) -> int:
    """The inbound sweeper's pass: queue again each open run whose enqueue the broker refused a minute ago or whose
    task it could no longer be holding; give up on one queued again CATCHUP_MAX_SWEEPS times. How many queued."""
    now = now or timezone.now()
    refused = Q(enqueued_at__isnull=True, requested_at__lt=now - timedelta(seconds=CATCHUP_REFUSED_AFTER_SECONDS))
    lost = Q(enqueued_at__lt=now - timedelta(seconds=broker_redelivery_seconds()))
    stale = list(CatchupRun.objects.filter(refused | lost, finished_at__isnull=True).values_list("pk", "sweeps")[:100])
    queued = 0
    for catchup_pk, sweeps in stale:
        if sweeps >= CATCHUP_MAX_SWEEPS:
            _finish(catchup_pk=catchup_pk, error=f"Gave up: its task was lost {sweeps} times.")
            continue
        CatchupRun.objects.filter(pk=catchup_pk).update(sweeps=F("sweeps") + 1)
        queued += _enqueue(catchup_pk=catchup_pk)
    if stale:
        logger.warning("feishu catch-ups queued again", extra={"found": len(stale), "queued": queued})
    return queued
