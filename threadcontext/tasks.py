"""Celery tasks: thin wrappers over services (the daily retention sweep for quiet hubs, C13)."""

from celery import shared_task

from threadcontext.services import retention


@shared_task(name="threadcontext.tasks.thread_context_prune")
def thread_context_prune() -> dict:
    result = retention.thread_context_prune()
    return {"events": result.events, "items": result.items, "decisions": result.decisions}
