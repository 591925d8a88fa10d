"""Celery tasks of the agents app: thin, each loads by id and calls one service.

This module imports no service at load time: services enqueue these tasks (agents.services.enqueue), so each
task imports its service when it runs. Every turn, whatever its trigger, runs in `turn_run_task` (acks_late,
reject_on_worker_lost): a worker killed mid-turn leaves the message unacknowledged, the broker redelivers it and
the idempotent turn completes exactly once. A transient failure comes back as `TurnRetryLater` and becomes a
Celery retry after its backoff (run eagerly, without a broker, the task tries again at once; the ledger's attempt
caps bound it either way). A database blip mid-turn (`OperationalError`, `InterfaceError`) is retried too, after
a few seconds and a bounded number of times: the retry claims the turn again (a `running` turn is re-claimable,
and the reply's conditional store keeps one reply), so the turn is picked up in seconds instead of waiting for
the sweeper's time limit; past the bound the error propagates and the sweeper recovers the turn as before.
"""

from celery import shared_task
from celery.exceptions import Reject
from django.conf import settings
from django.db import InterfaceError, OperationalError

from agents.models import Automation
from core import worker_stop
from core.connections import pool_thread_connection_released

# Above the ledger's caps (model attempts + delivery attempts), which are the real bound.
TURN_TASK_MAX_RETRIES = 16
# The waits before each retry of a run the database interrupted (~20 s in all, then the sweeper's turn). Few: each
# retry claims the turn again, and a claim counts as one of its TURN_MAX_ATTEMPTS.
DATABASE_RETRY_COUNTDOWNS_SECONDS = (2.0, 5.0, 15.0)


def database_retry_countdown(*, database_retries: int) -> float | None:
    """Seconds before the next retry of a run the database interrupted; None when the retries are spent."""
    if database_retries >= len(DATABASE_RETRY_COUNTDOWNS_SECONDS):
        return None
    return DATABASE_RETRY_COUNTDOWNS_SECONDS[database_retries]


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=TURN_TASK_MAX_RETRIES)
def turn_run_task(self, turn_id: int, database_retries: int = 0) -> str:
    """Run turn `turn_id` through its lifecycle; the outcome ("delivered", "failed", ...).

    `database_retries` counts the retries a database error caused so far (the retry carries it on). A worker
    stopped mid-turn (SIGTERM) hands the turn back at once and acknowledges this task (core.worker_stop)."""
    from agents.services.turns import TurnRetryLater, turn_run
    from agents.services.turns.handback import turn_hand_back

    if worker_stop.is_stopping():  # a thread-pool worker between its SIGTERM and its exit: for the next worker
        raise Reject("the worker is stopping", requeue=True)
    try:
        with (
            pool_thread_connection_released(),
            worker_stop.turn_running(turn_id=turn_id, task_id=self.request.id or ""),
        ):
            while True:
                try:
                    return turn_run(turn_id=turn_id)
                except TurnRetryLater as exc:
                    if self.request.is_eager:
                        continue  # no broker to schedule a retry on; the ledger's caps end the loop
                    # A delivery's retry skips the turns queue (CELERY_TASK_ROUTES): its reply is ready.
                    queue = {"queue": settings.QUEUE_DELIVERIES} if exc.is_delivery else {}
                    raise self.retry(exc=exc, countdown=exc.countdown_seconds, **queue) from exc
                except (OperationalError, InterfaceError) as exc:
                    countdown = database_retry_countdown(database_retries=database_retries)
                    if countdown is None:
                        raise  # the sweeper re-runs the turn once its claim is stale
                    database_retries += 1
                    if self.request.is_eager:
                        continue  # no broker: try again at once, as above; the countdowns still bound it
                    retry_kwargs = {"turn_id": turn_id, "database_retries": database_retries}
                    raise self.retry(exc=exc, countdown=countdown, args=(), kwargs=retry_kwargs) from exc
    except worker_stop.WorkerStopping:
        if not worker_stop.was_handed_back(turn_id=turn_id):  # a thread pool's stop hands back for its threads
            turn_hand_back(turn_id=turn_id)
        return "handed back"


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=TURN_TASK_MAX_RETRIES)
def automation_run_task(self, automation_id: int, run_id: str = "") -> str | None:
    """Beat's entry point (and "Run now"'s): one run of the automation; the turn's outcome, or None (not run)."""
    from agents.services.automations import automation_run
    from agents.services.turns import TurnRetryLater

    automation = Automation.objects.select_related("bot").filter(pk=automation_id).first()
    if automation is None or not (run_id or (automation.is_enabled and automation.bot.is_enabled)):
        # Deleted, or it or its bot disabled since the schedule was synced (a bot's save does not re-sync its
        # automations' periodic tasks: this check is what keeps a disabled bot quiet). "Run now" passes a run_id.
        return None
    with pool_thread_connection_released():
        while True:
            try:
                return automation_run(automation=automation, run_id=run_id or self.request.id)
            except TurnRetryLater as exc:
                if self.request.is_eager:
                    continue  # see turn_run_task
                raise self.retry(exc=exc, countdown=exc.countdown_seconds) from exc


@shared_task
def turns_sweep_task() -> int:
    """Beat ("agents-turns-sweep", every minute): the one turn sweeper, every trigger (agents.services.turns.sweep)."""
    from agents.services.turns import turns_sweep

    return turns_sweep()
