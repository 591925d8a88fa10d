"""Thin Celery tasks: load by id, call one service (STYLE: tasks)."""

from celery import shared_task


@shared_task(acks_late=True)
def inbound_event_process(event_pk: int) -> str:
    from amuxweb.feishu.services.routing import inbound_event_process as process

    result = process(event_pk=event_pk)
    return result.outcome if result is not None else "not_claimed"


@shared_task
def inbound_events_sweep() -> int:
    from amuxweb.feishu.services.intake import inbound_events_sweep as sweep
    from amuxweb.feishu.services.turns import feishu_turns_sweep

    return len(sweep()) + len(feishu_turns_sweep())


@shared_task(acks_late=True, bind=True, max_retries=5)
def feishu_turn_process(self, turn_pk: int, activation_contract: str = "") -> str:
    from amuxweb.feishu.services.turns import FeishuTurnRetry, feishu_turn_execute

    try:
        return feishu_turn_execute(turn_pk=turn_pk, activation_contract=activation_contract)
    except FeishuTurnRetry as error:
        # A delivery Feishu refused for now (rate limit, outage): the uuid keeps the retry from posting twice.
        raise self.retry(countdown=error.countdown, exc=error) from error
