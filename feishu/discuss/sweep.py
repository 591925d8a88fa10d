"""The beat's catch-up of discuss wakes (P10): every wake past due is handed to a worker, once per due time.

Invariant: a claimable wake past due is enqueued by some sweep even when its own fire task was lost (broker
down, worker killed); it is enqueued again only when it became due again since (a retry, an extension) or
SWEEP_REENQUEUE_SECONDS later, so a busy queue is not flooded with copies every 5 s. The sweep never judges:
each wake's judge runs in its own fire task.
"""

from datetime import datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone

from core.tasks_enqueue import task_enqueue
from feishu.discuss.arbitration import candidacies_settle_stale
from feishu.discuss.wake import discuss_wakes_claimable
from feishu.models import DiscussWake
from feishu.tasks import discuss_wake_fire_task

SWEEP_BATCH = 200
SWEEP_ENQUEUED = "enqueued"  # what the sweeper reports for a wake it handed to a worker
SWEEP_NOT_ENQUEUED = "not_enqueued"  # the broker refused it; the next sweep tries again
# A due wake the sweeper enqueued is enqueued again only when it became due again since (a retry, an
# extension) or after this long (its task was lost): a busy queue is not flooded with copies every 5 s.
SWEEP_REENQUEUE_SECONDS = 30


def discuss_wakes_sweep(*, now: datetime | None = None) -> list[str]:
    """Enqueue a fire task for every wake past due whose task was lost (or that waits for its retry); beat runs
    it every 5 s. The sweep never judges: each wake's judge runs in its own task, on a worker. Without a broker
    (eager, the test suite) the task runs in place and its outcome is reported; with one, `enqueued`.
    """
    now = now or timezone.now()
    candidacies_settle_stale(now=now)  # B3: a pick left undone by a worker that died after its candidacy
    not_recently = (
        Q(swept_at__isnull=True)
        | Q(swept_at__lt=F("due_at"))
        | Q(swept_at__lt=now - timedelta(seconds=SWEEP_REENQUEUE_SECONDS))
    )
    due = list(
        DiscussWake.objects.filter(discuss_wakes_claimable(now=now))
        .filter(not_recently)
        .order_by("due_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    if not due:
        return []
    DiscussWake.objects.filter(pk__in=due).update(swept_at=now)
    # The sweep saw these due at `now`: the fire treats the clock as at least that (an injected clock in tests).
    kwargs = {"swept_at": now.isoformat()}
    if discuss_wake_fire_task.app.conf.task_always_eager:
        return [discuss_wake_fire_task.apply(args=(wake_id,), kwargs=kwargs).get() for wake_id in due]
    # A worker's clock is the real one: no swept_at needed (and nothing but the id travels through the broker).
    return [
        SWEEP_ENQUEUED
        if task_enqueue(task=discuss_wake_fire_task, args=[wake_id], what="discuss_wake")
        else SWEEP_NOT_ENQUEUED
        for wake_id in due
    ]
