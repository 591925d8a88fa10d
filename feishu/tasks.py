"""Thin Celery tasks: load by id, call one service (STYLE: tasks)."""

from celery import shared_task


@shared_task(acks_late=True)
def inbound_event_process(event_pk: int) -> str:
    from amuxweb.feishu.services.routing import inbound_event_process as process

    result = process(event_pk=event_pk)
    return result.outcome if result is not None else "not_claimed"


@shared_task
def inbound_events_sweep() -> int:
    from amuxweb.feishu.services.delivery import notices_sweep
    from amuxweb.feishu.services.intake import inbound_events_sweep as sweep

    # Turns of every channel, Feishu's included, are swept by agents' one turn sweeper (turns_sweep_task).
    return len(sweep()) + len(notices_sweep())


@shared_task
def bridge_records_prune() -> dict[str, int]:
    from amuxweb.feishu.services.retention import bridge_records_prune as prune

    return prune()
