"""Thin Celery tasks: load by id, call one service (STYLE: tasks)."""

from celery import shared_task

FEISHU_TURN_MAX_RETRIES = 5


@shared_task(acks_late=True)
def inbound_event_process(event_pk: int) -> str:
    from amuxweb.feishu.services.routing import inbound_event_process as process

    result = process(event_pk=event_pk)
    return result.outcome if result is not None else "not_claimed"


@shared_task
def inbound_events_sweep() -> int:
    from amuxweb.feishu.services.delivery import notices_sweep
    from amuxweb.feishu.services.intake import inbound_events_sweep as sweep
    from amuxweb.feishu.services.turns import feishu_turns_sweep

    return len(sweep()) + len(feishu_turns_sweep()) + len(notices_sweep())


@shared_task(acks_late=True, reject_on_worker_lost=True, bind=True, max_retries=FEISHU_TURN_MAX_RETRIES)
def feishu_turn_process(self, turn_pk: int, activation_contract: str = "") -> str:
    from amuxweb.feishu.services.turns import FeishuTurnRetry, feishu_turn_execute

    for _ in range(FEISHU_TURN_MAX_RETRIES + 1):
        try:
            return feishu_turn_execute(turn_pk=turn_pk, activation_contract=activation_contract)
        except FeishuTurnRetry as error:
            # A transient provider error or a delivery Feishu refused for now; the stored reply and the uuid keep
            # a retry from calling the model or posting twice. Eager (no broker): try again at once, bounded.
            if not self.request.is_eager:
                raise self.retry(countdown=error.countdown, exc=error) from error
    return "gave_up"


@shared_task
def bridge_records_prune() -> dict[str, int]:
    from amuxweb.feishu.services.retention import bridge_records_prune as prune

    return prune()
