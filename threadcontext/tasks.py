"""Celery tasks: thin wrappers over services (the daily retention sweep for quiet hubs, C13)."""

from celery import shared_task


@shared_task(name="threadcontext.tasks.thread_context_prune")
def thread_context_prune() -> dict:
    from threadcontext.services.retention import thread_context_prune as prune

    result = prune()
    return {"events": result.events, "items": result.items, "decisions": result.decisions}
