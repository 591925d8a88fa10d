"""The one turn sweeper, for every trigger (L2): beat runs `turns_sweep` every minute (agents.tasks.turns_sweep_task).

What it picks up, each bounded:
- queued, whose enqueue was lost: refused by the broker (enqueued_at null) a minute after the turn was created, or
  taken longer ago than a healthy broker could still be holding it; a turn waiting for its Celery retry counts as
  taken when its attempt failed (ledger.turn_requeue stamps it, and every backoff is shorter than the interval),
  so a retry the broker lost (Redis restarted without persistence) never holds its conversation for good;
- running, claimed longer ago than the task's hard time limit (worker killed, a database outage after the ack):
  re-enqueued at most TURN_MAX_SWEEPS times, then failed;
- replied but not delivered for DELIVERY_RESUME_AFTER_SECONDS (the worker died between storing and sending, or
  its retry was lost): delivery resumes with the same uuids; past DELIVERY_MAX_ATTEMPTS, delivery_failed.
- awaiting_approval (H1): an approval past its server's approval_timeout_seconds is denied (the turn resumes and
  the model is told); a decided one whose turn was never enqueued again is enqueued (agents.services.turns.approvals).
A turn waiting behind an older open turn of its conversation is left to that turn (O1, conversation.py).
What it gives up on is marked in the ledger (the admin's status filter lists it) and told to the chat in one line.
Every re-enqueue re-stamps enqueued_at, so a pass never re-enqueues a turn the previous one just did.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from agents.models import Turn
from agents.services.enqueue import turn_enqueue
from agents.services.turns import ledger
from agents.services.turns.approvals import approvals_sweep
from agents.services.turns.channels import channel_for
from agents.services.turns.conversation import HOLDING_STATUSES, conversation_next_start

logger = logging.getLogger(__name__)

# Turns still queued this long after they were created, whose enqueue the broker refused (or that were deferred).
TURN_SWEEP_AFTER_SECONDS = 60
TURN_SWEEP_BATCH = 500
# A run claimed longer ago than the task's hard time limit plus this margin is dead.
TURN_RUNNING_MARGIN_SECONDS = 60
# A turn left running is re-enqueued at most this many times; the next sweep fails it.
TURN_MAX_SWEEPS = 3
# A replied turn whose last delivery attempt is older than this resumes delivery (longer than every backoff wait).
DELIVERY_RESUME_AFTER_SECONDS = 120


def broker_redelivery_seconds() -> float:
    """How long a healthy broker may still hold a turn's task: the Redis transport's visibility timeout.

    Why this interval and not a fixed minute: with acks_late, a task a worker took but has not acknowledged is
    handed out again only after visibility_timeout, and a busy broker's queue legitimately holds a task for a
    while. Re-enqueueing a turn whose enqueue is younger than this would put a second copy next to one the
    broker still holds; both could run at once and each would call (and pay) the model, only one reply being
    kept. Past it, a copy the broker still held would have been redelivered by now, so the turn's task is most
    likely lost (a broker restart without persistence, a purge). A duplicate remains possible (a backlog
    longer than the interval) and stays harmless to the ledger: turn_run is idempotent and keeps one reply.
    """
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return float(options.get("visibility_timeout", 3600))  # kombu's Redis default: one hour


def running_stale_seconds() -> float:
    """How long after its last claim a `running` turn is certainly not being run any more.

    The hard time limit kills the task (CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT acks it: never redelivered), so
    past the limit plus a margin no run of that claim is alive. Without a limit, the redelivery interval.
    """
    limit = getattr(settings, "CELERY_TASK_TIME_LIMIT", None) or broker_redelivery_seconds()
    return float(limit) + TURN_RUNNING_MARGIN_SECONDS


def _stale_rows(*, now: datetime, older_than_seconds: float) -> list[tuple[int, str, int, int]]:
    redelivered_before = now - timedelta(seconds=broker_redelivery_seconds())
    refused = Q(enqueued_at__isnull=True, queued_at__lt=now - timedelta(seconds=older_than_seconds))
    # A turn waiting for an older one of its conversation (O1) is started by that one, not here; a deferred turn at
    # the head (its hand-back lost with a killed worker) looks like a refused enqueue and is picked up.
    ahead = Turn.objects.filter(thread_id=OuterRef("thread_id"), pk__lt=OuterRef("pk"), status__in=HOLDING_STATUSES)
    queued = Q(status=Turn.Status.QUEUED) & (refused | Q(enqueued_at__lt=redelivered_before)) & ~Exists(ahead)
    running = Q(status=Turn.Status.RUNNING, claimed_at__lt=now - timedelta(seconds=running_stale_seconds())) & (
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=F("claimed_at")) | Q(enqueued_at__lt=redelivered_before)
    )
    resume_before = now - timedelta(seconds=DELIVERY_RESUME_AFTER_SECONDS)
    replied = (
        Q(status=Turn.Status.REPLIED, replied_at__lt=resume_before)
        & (Q(claimed_at__isnull=True) | Q(claimed_at__lt=resume_before))
        & (Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=resume_before))
    )
    return list(
        Turn.objects.filter(queued | running | replied)
        .order_by("pk")
        .values_list("pk", "status", "sweeps", "delivery_attempts")[:TURN_SWEEP_BATCH]
    )


def turns_sweep(*, older_than_seconds: float = TURN_SWEEP_AFTER_SECONDS) -> int:
    """One pass; the number of turns re-enqueued (the ones given up on are marked, not counted)."""
    now = timezone.now()
    stale = _stale_rows(now=now, older_than_seconds=older_than_seconds)
    enqueued = given_up = 0
    for turn_id, status, sweeps, delivery_attempts in stale:
        if status == Turn.Status.RUNNING and sweeps >= TURN_MAX_SWEEPS:
            given_up += _give_up_running(turn_id=turn_id, sweeps=sweeps)
            continue
        if status == Turn.Status.REPLIED and delivery_attempts >= ledger.DELIVERY_MAX_ATTEMPTS:
            given_up += _give_up_delivery(turn_id=turn_id, attempts=delivery_attempts)
            continue
        if status == Turn.Status.RUNNING:
            # Counted before the enqueue: an eager run (or a fast worker) may be re-running it already.
            Turn.objects.filter(pk=turn_id).update(sweeps=F("sweeps") + 1)
        if not turn_enqueue(turn_id=turn_id):
            if status == Turn.Status.RUNNING:
                Turn.objects.filter(pk=turn_id).update(sweeps=F("sweeps") - 1)
            continue
        enqueued += 1
        if status == Turn.Status.RUNNING:
            logger.warning("running turn re-enqueued", extra={"turn_id": turn_id, "sweeps": sweeps + 1})
        elif status == Turn.Status.REPLIED:
            logger.warning("replied turn re-enqueued for delivery", extra={"turn_id": turn_id})
    if stale:
        logger.info("turns swept", extra={"found": len(stale), "enqueued": enqueued, "given_up": given_up})
    return enqueued + approvals_sweep(now=now)


def _tell(*, turn_id: int, status: str) -> None:
    turn = Turn.objects.select_related("bot", "thread").get(pk=turn_id)
    try:
        channel_for(thread=turn.thread).failed(turn=turn, status=status)
    except Exception:  # noqa: BLE001 - the ledger says what happened; the notice is best effort
        logger.exception("turn failure notice not sent", extra={"turn_id": turn_id, "status": status})


def _give_up_running(*, turn_id: int, sweeps: int) -> int:
    error = (
        f"The turn was left running and did not finish after {sweeps} re-runs by the sweeper "
        "(each past the task's time limit); giving up."
    )
    if not ledger.turn_mark_failed(turn_id=turn_id, error=error):
        return 0
    _tell(turn_id=turn_id, status=Turn.Status.FAILED)
    _hand_on(turn_id=turn_id)
    return 1


def _hand_on(*, turn_id: int) -> None:
    """A turn given up on hands its conversation to the next turn waiting for it (O1)."""
    thread_id = Turn.objects.filter(pk=turn_id).values_list("thread_id", flat=True).first()
    if thread_id is not None:
        conversation_next_start(thread_id=thread_id)


def _give_up_delivery(*, turn_id: int, attempts: int) -> int:
    turn = Turn.objects.get(pk=turn_id)
    error = f"Gave up after {attempts} delivery attempts. Last error: {turn.error or 'none recorded'}"
    if not ledger.turn_mark_delivery_failed(turn=turn, error=error):
        return 0
    _tell(turn_id=turn_id, status=Turn.Status.DELIVERY_FAILED)
    _hand_on(turn_id=turn_id)
    return 1
