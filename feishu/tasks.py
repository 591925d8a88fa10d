"""Thin Celery tasks: load by id, call one service (STYLE: tasks).

Each keeps the name it had when the bridge lived in `amuxweb.feishu` (`name=`): a message already queued and the
beat entries stored by django-celery-beat name the task by that string. The services are imported inside each
task, so that this module imports none of ours at its top and every service may import it there to enqueue a task
(the accepted task↔service pattern, ARCHITECTURE §11.0).
"""

from datetime import datetime

from celery import shared_task


@shared_task(acks_late=True, name="amuxweb.feishu.tasks.inbound_event_process")
def inbound_event_process(event_pk: int) -> str:
    # Inside the task: this module stays a leaf (intake imports it to enqueue this task).
    from feishu.inbound.routing import inbound_event_process as process

    result = process(event_pk=event_pk)
    return result.outcome if result is not None else "not_claimed"


@shared_task(name="amuxweb.feishu.tasks.inbound_events_sweep")
def inbound_events_sweep() -> int:
    # Inside the task: this module stays a leaf (intake imports it to enqueue inbound_event_process).
    from feishu.inbound.catchup_runs import catchups_sweep
    from feishu.inbound.hub_start import hub_heartbeat_stamp
    from feishu.inbound.intake import inbound_events_sweep as sweep
    from feishu.outbound.delivery import notices_sweep

    hub_heartbeat_stamp()  # D2: the hub is alive (a start after a longer gap catches up, feishu.inbound.hub_start)

    # Turns of every channel, Feishu's included, are swept by agents' one turn sweeper (turns_sweep_task).
    return len(sweep()) + len(notices_sweep()) + catchups_sweep()


@shared_task(name="amuxweb.feishu.tasks.bridge_records_prune")
def bridge_records_prune() -> dict[str, int]:
    # Inside the task: this module stays a leaf that any service may import.
    from feishu.retention import bridge_records_prune as prune

    return prune()


@shared_task(acks_late=True, name="amuxweb.feishu.discuss.discuss_wake_fire_task")
def discuss_wake_fire_task(wake_id: int, swept_at: str = "") -> str:
    # Inside the task: this module stays a leaf (feishu.discuss.wake imports it to enqueue this task).
    from feishu.discuss.fire import discuss_wake_fire

    # swept_at: only an in-place (eager) run from the sweep passes it, so the fire reads the sweep's clock.
    return discuss_wake_fire(wake_id=wake_id, now=datetime.fromisoformat(swept_at) if swept_at else None)


@shared_task(name="amuxweb.feishu.discuss.discuss_wakes_sweep")
def discuss_wakes_sweep_task() -> int:
    # Inside the task: this module stays a leaf (feishu.discuss.sweep imports it to enqueue the fire task).
    from feishu.discuss.sweep import discuss_wakes_sweep

    return len(discuss_wakes_sweep())


@shared_task(name="feishu.tasks.context_summary_task")
def context_summary_task(decision_id: int, bot_id: int) -> str:
    # Inside the task: this module stays a leaf (the turn channel imports it to enqueue this task).
    from feishu.summaries import context_summary_write

    return context_summary_write(decision_id=decision_id, bot_id=bot_id)


@shared_task(name="feishu.tasks.feishu_credentials_verify_task")
def feishu_credentials_verify_task(bot_id: int) -> bool:
    """Verify one bot's Feishu credentials (after its page was saved); the result, or False for a deleted bot."""
    # Inside the task: this module stays a leaf that any service may import.
    from agents.models import Bot
    from feishu.outbound.verify import feishu_credentials_verify

    bot = Bot.objects.filter(pk=bot_id).first()
    return feishu_credentials_verify(bot=bot).ok if bot is not None else False


@shared_task(name="feishu.tasks.feishu_credentials_verify_all_task")
def feishu_credentials_verify_all_task() -> int:
    # Inside the task: this module stays a leaf that any service may import.
    from feishu.outbound.verify import feishu_credentials_verify_all

    return feishu_credentials_verify_all()


# The waits before each retry of a catch-up Feishu could not answer (a 5xx, a rate limit or a transport failure
# outlasting feishu_call's own tries): ~15 min in all, each shorter than the broker's visibility timeout (a longer
# countdown is redelivered meanwhile); then the run records the error and the next trigger reads the gap.
CATCHUP_RETRY_COUNTDOWNS_SECONDS = (30, 60, 120, 240, 480)


# acks_late and reject_on_worker_lost: a worker killed mid catch-up leaves the task to the broker, which hands it to
# another; running it again is harmless (a message stored already is found, not stored again).
@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=len(CATCHUP_RETRY_COUNTDOWNS_SECONDS),
    name="feishu.tasks.catchup_run",
)
def catchup_run(self, catchup_pk: int) -> int:
    # Inside the task: this module stays a leaf (feishu.inbound.catchup_runs imports it to enqueue this task).
    from feishu.inbound.catchup_runs import catchup_execute
    from feishu.outbound.api_errors import FeishuApiError

    retries = self.request.retries
    while True:
        try:
            may_retry = retries < len(CATCHUP_RETRY_COUNTDOWNS_SECONDS)
            # The run's row holds where the reading starts (fixed by its trigger): a retry reads the same gap.
            return catchup_execute(catchup_pk=catchup_pk, may_retry=may_retry)
        except FeishuApiError as error:  # raised only while a retry is allowed
            if self.request.is_eager:  # no broker to schedule a retry on (as turn_run_task): try again at once
                retries += 1
                continue
            raise self.retry(exc=error, countdown=CATCHUP_RETRY_COUNTDOWNS_SECONDS[retries]) from error
