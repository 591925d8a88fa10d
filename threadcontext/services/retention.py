"""Retention (seed 002 "持久化", ARCHITECTURE C13): events older than 30 days go, with their items.

Items hang off their event (a non-null FK with ON DELETE CASCADE), so the items an expired event leaves orphaned
are deleted explicitly in the same transaction as their batch of events; none can outlive its event. Decisions older than
the retention go too: they point at item ids that no longer exist and nothing else prunes them.

Writing prunes, cheaply: `thread_context_prune_if_due` runs at most once per `PRUNE_INTERVAL_SECONDS` per process
and deletes at most `PRUNE_ON_WRITE_MAX_BATCHES` bounded batches, so a write never pays for a large backlog; the
daily beat task and the management command drain whatever is left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent

logger = logging.getLogger(__name__)

PRUNE_BATCH_SIZE = 500
PRUNE_INTERVAL_SECONDS = 60.0
PRUNE_ON_WRITE_MAX_BATCHES = 2

_last_prune_at: float | None = None


@dataclass(frozen=True)
class PruneResult:
    events: int = 0
    items: int = 0
    decisions: int = 0

    @property
    def total(self) -> int:
        return self.events + self.items + self.decisions


def retention_cutoff(*, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=settings.AMUX_CONTEXT_RETENTION_DAYS)


def thread_context_expired_count(*, now: datetime | None = None) -> int:
    cutoff = retention_cutoff(now=now)
    return (
        ThreadEvent.objects.filter(created_at__lt=cutoff).count()
        + ThreadContextDecision.objects.filter(created_at__lt=cutoff).count()
    )


def _prune_batch(*, cutoff: datetime, batch_size: int) -> PruneResult:
    with transaction.atomic():
        event_ids = list(
            ThreadEvent.objects.filter(created_at__lt=cutoff).order_by("id").values_list("id", flat=True)[:batch_size]
        )
        items = 0
        events = 0
        if event_ids:
            items, _ = ThreadContextItem.objects.filter(event_id__in=event_ids).delete()
            events, _ = ThreadEvent.objects.filter(id__in=event_ids).delete()
        decision_ids = list(
            ThreadContextDecision.objects.filter(created_at__lt=cutoff)
            .order_by("id")
            .values_list("id", flat=True)[:batch_size]
        )
        decisions = 0
        if decision_ids:
            decisions, _ = ThreadContextDecision.objects.filter(id__in=decision_ids).delete()
    return PruneResult(events=events, items=items, decisions=decisions)


def thread_context_prune(
    *,
    now: datetime | None = None,
    batch_size: int = PRUNE_BATCH_SIZE,
    max_batches: int | None = None,
    on_progress: Callable[[int], object] | None = None,  # what it returns is ignored (tqdm's update: a bool)
) -> PruneResult:
    """Delete expired events (with their items) and decisions in bounded batches; returns what was removed."""
    if batch_size < 1:
        # A batch of 0 would never come back short of the batch size: the loop below would never end.
        raise ValueError(f"batch_size must be at least 1, not {batch_size}.")
    cutoff = retention_cutoff(now=now)
    total = PruneResult()
    batches = 0
    while max_batches is None or batches < max_batches:
        result = _prune_batch(cutoff=cutoff, batch_size=batch_size)
        batches += 1
        total = PruneResult(
            events=total.events + result.events,
            items=total.items + result.items,
            decisions=total.decisions + result.decisions,
        )
        if on_progress is not None:
            on_progress(result.events + result.decisions)
        if result.events < batch_size and result.decisions < batch_size:
            break
    if total.total:
        logger.info(
            "thread context pruned",
            extra={"events": total.events, "items": total.items, "decisions": total.decisions, "cutoff": cutoff},
        )
    return total


def thread_context_prune_if_due() -> PruneResult | None:
    """The on-write prune: at most once a minute per process, a bounded amount of work. None when not due."""
    global _last_prune_at
    current = time.monotonic()
    if _last_prune_at is not None and current - _last_prune_at < PRUNE_INTERVAL_SECONDS:
        return None
    _last_prune_at = current
    return thread_context_prune(max_batches=PRUNE_ON_WRITE_MAX_BATCHES)


def prune_clock_reset() -> None:
    """Forget when this process last pruned, so that the next write prunes (the tests' clock reset)."""
    global _last_prune_at
    _last_prune_at = None
