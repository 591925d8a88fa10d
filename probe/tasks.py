"""Celery tasks of the probe app: thin, each calls one service."""

from celery import shared_task

from probe.services import judgements_prune


@shared_task
def judgements_prune_task() -> int:
    """Daily (CELERY_BEAT_SCHEDULE "probe-judgements-prune"): drop judgements past the 30-day retention."""
    return judgements_prune()
