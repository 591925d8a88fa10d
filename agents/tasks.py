"""Celery tasks of the agents app: thin, each loads by id and calls one service.

Both tasks are acks_late: a worker killed mid-turn leaves the message unacknowledged, the broker redelivers
it, and the idempotent turn (agents/services/turns.py) completes exactly once. A transient provider error
comes back as `TurnRetryLater` and becomes a Celery retry after its backoff (run eagerly, without a broker,
the task tries again at once; the turn's attempt cap still bounds it).
"""

from celery import shared_task

from agents.services.turns import TURN_MAX_ATTEMPTS


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=TURN_MAX_ATTEMPTS)
def turn_run_task(self, turn_id: int) -> int | None:
    """Run turn `turn_id`; the reply message id, or None (failed, gated, nothing to say)."""
    from agents.models import Turn
    from agents.services.turns import TurnRetryLater, turn_run

    turn = Turn.objects.filter(pk=turn_id).first()
    if turn is None:
        return None
    while True:
        try:
            reply = turn_run(turn=turn)
        except TurnRetryLater as exc:
            if self.request.is_eager:
                continue  # no broker to schedule a retry on; turn_run's attempt cap ends the loop
            raise self.retry(exc=exc, countdown=exc.countdown_seconds) from exc
        return reply.pk if reply else None


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=TURN_MAX_ATTEMPTS)
def automation_run_task(self, automation_id: int, run_id: str = "") -> int | None:
    """Beat's entry point (and "Run now"'s): one run of the automation; the reply message id or None."""
    from agents.models import Automation
    from agents.services.automations import automation_run
    from agents.services.turns import TurnRetryLater

    automation = Automation.objects.select_related("bot").filter(pk=automation_id).first()
    if automation is None or not (run_id or (automation.is_enabled and automation.bot.is_enabled)):
        # Deleted, or it or its bot disabled since the schedule was synced (a bot's save does not re-sync its
        # automations' periodic tasks: this check is what keeps a disabled bot quiet). "Run now" passes a run_id.
        return None
    while True:
        try:
            reply = automation_run(automation=automation, run_id=run_id or self.request.id)
        except TurnRetryLater as exc:
            if self.request.is_eager:
                continue  # see turn_run_task
            raise self.retry(exc=exc, countdown=exc.countdown_seconds) from exc
        return reply.pk if reply else None


@shared_task
def turns_sweep_task() -> int:
    """Beat ("agents-turns-sweep"): re-enqueue REST turns whose enqueue was lost (broker down at the time)."""
    from agents.services.turns import turns_sweep

    return turns_sweep()
