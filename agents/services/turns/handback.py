"""Hand a turn back when its worker is stopped mid-run (issue 30, finding 10; core.worker_stop)."""

import logging

from django.db import connection
from django.db.models import F

from agents.models import Turn
from agents.services.enqueue import turn_enqueue

logger = logging.getLogger(__name__)


def turn_hand_back(*, turn_id: int) -> bool:
    """Release the turn's claim and queue it again at once; whether the broker took it.

    A run without a reply goes back to `queued` and its attempt is not counted (a stop is not a failure of the
    turn); a turn whose reply is stored keeps it and its status (the next run only delivers, with the same
    delivery uuids, so nothing is sent twice). The claim is cleared either way, so the sweeper no longer waits
    for a stale claim: if the enqueue fails it picks the turn up on its next pass.
    """
    if not connection.in_atomic_block:  # the task's own blocks have exited; a caller's transaction is left alone
        connection.close()  # the signal may have interrupted a query half-way: start on a fresh connection
    Turn.objects.filter(pk=turn_id, status=Turn.Status.RUNNING, reply_message__isnull=True).update(
        status=Turn.Status.QUEUED, claimed_at=None, attempts=F("attempts") - 1
    )
    Turn.objects.filter(pk=turn_id, status=Turn.Status.REPLIED).update(claimed_at=None)
    enqueued = turn_enqueue(turn_id=turn_id)
    logger.warning("turn handed back: its worker is stopping", extra={"turn_id": turn_id, "enqueued": enqueued})
    return enqueued
