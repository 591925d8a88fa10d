"""Enqueueing a turn: a leaf module (the tasks module imports no service at load time, so nothing circles)."""

from django.utils import timezone

from agents.models import Turn
from agents.tasks import turn_run_task
from core.tasks_enqueue import task_enqueue


def turn_enqueue(*, turn_id: int) -> bool:
    """Queue `turn_run_task`, stamping `enqueued_at`; False (stamp cleared) when the broker cannot take it.

    The sweeper retries a refused enqueue a minute later and a taken one only after the broker's redelivery
    interval (see sweep.broker_redelivery_seconds).
    """
    stamp = timezone.now()
    # Stamped before the send, so no worker can claim the turn before the stamp exists.
    Turn.objects.filter(pk=turn_id).update(enqueued_at=stamp)
    if task_enqueue(task=turn_run_task, args=[turn_id], what="turn"):
        return True
    Turn.objects.filter(pk=turn_id, enqueued_at=stamp).update(enqueued_at=None)
    return False
