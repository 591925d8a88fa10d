"""D2's start trigger (issue 23): a hub that starts after being down longer than AMUX_BACKFILL_AFTER_SECONDS
catches up with what its Feishu bots missed.

"Down" is read from one database row, `HubHeartbeat.alive_at`, not from a process: the inbound sweeper (beat,
every 30 s, run by a worker) stamps it, so it says when a worker last did work. Each Celery worker, as it becomes
ready (`worker_ready`, once per worker process start), compares the stamp with now. A gap beyond the bound makes
it claim the catch-up by moving the stamp with a conditional UPDATE (`alive_at` still equal to what it read):
of several workers starting together exactly one UPDATE changes the row, and only that worker enqueues
`feishu.tasks.catchup_run` once per enabled Feishu bot, reading from the stamp it read (or earlier, where the
bot's stored messages end): the web, back first, may have stored Feishu's retries of messages said late in the
gap already. A worker that restarts while the others keep the stamp fresh finds no gap and enqueues nothing. The very first start (no row yet) writes the row and catches up with
nothing: there is no earlier hub to have missed anything.
"""

import logging
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Bot
from feishu.inbound.catchup_runs import catchup_enqueue
from feishu.models import CatchupRun, HubHeartbeat

logger = logging.getLogger(__name__)

HEARTBEAT_PK = 1


def hub_heartbeat_stamp(*, now: datetime | None = None) -> None:
    """The hub is alive now (the inbound sweeper, every run)."""
    now = now or timezone.now()
    if HubHeartbeat.objects.filter(pk=HEARTBEAT_PK).update(alive_at=now) == 0:
        try:
            with transaction.atomic():
                HubHeartbeat.objects.create(pk=HEARTBEAT_PK, alive_at=now)
        except IntegrityError:  # another worker wrote it first: its stamp is as good
            pass


def catchup_bots() -> list[Bot]:
    """The bots a catch-up reads for: enabled, with a Feishu app, not sandboxes (which have no Feishu to read)."""
    return [bot for bot in Bot.objects.filter(is_sandbox=False, is_enabled=True) if bot.has_feishu_credentials]


def hub_start_catchup(*, now: datetime | None = None) -> int:
    """At a worker's start: after a gap beyond AMUX_BACKFILL_AFTER_SECONDS, claim the catch-up and enqueue it
    once per bot (see the module docstring). Returns how many catch-ups this worker enqueued."""
    now = now or timezone.now()
    seen = HubHeartbeat.objects.filter(pk=HEARTBEAT_PK).values_list("alive_at", flat=True).first()
    if seen is None:
        hub_heartbeat_stamp(now=now)
        return 0
    gap = (now - seen).total_seconds()
    claimed = HubHeartbeat.objects.filter(pk=HEARTBEAT_PK, alive_at=seen).update(alive_at=now) == 1
    if not claimed or gap <= settings.AMUX_BACKFILL_AFTER_SECONDS:
        return 0
    bots = catchup_bots()
    for bot in bots:
        # From the last stamp before the gap at the latest: the web may be storing Feishu's retries already.
        catchup_enqueue(bot=bot, trigger=CatchupRun.Trigger.HUB_START, gap_started=seen)
    logger.info("hub started after a gap, catching up", extra={"gap_seconds": round(gap), "bots": len(bots)})
    return len(bots)
