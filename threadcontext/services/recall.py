"""G7 / issue 12 item 6: a message its sender recalled (`im.message.recalled_v1`) leaves thread context.

Its items are deleted (every bridge's copy: one bot's recall event is enough for the whole group) and its events
keep only the fact: text emptied, `metadata.recalled_at` set, so nothing selects, judges or shows it again while
explain can still say why a row is gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from threadcontext.models import ThreadContextItem, ThreadEvent

logger = logging.getLogger(__name__)

RECALLED_KEY = "recalled_at"


@dataclass(frozen=True)
class RecallResult:
    items_removed: int
    events_marked: int


def thread_context_recall(*, chat_id: str, message_id: str, now: datetime | None = None) -> RecallResult:
    """Remove a recalled message's context items and blank its events; idempotent (a second call removes nothing)."""
    stamp = (now or timezone.now()).isoformat()
    with transaction.atomic():
        removed, _ = ThreadContextItem.objects.filter(chat_id=chat_id, message_id=message_id).delete()
        events = list(ThreadEvent.objects.select_for_update().filter(chat_id=chat_id, message_id=message_id))
        marked = 0
        for event in events:
            if RECALLED_KEY in (event.metadata or {}):
                continue
            event.text = ""
            event.metadata = {**(event.metadata or {}), RECALLED_KEY: stamp}
            event.save(update_fields=["text", "metadata"])
            marked += 1
    logger.info(
        "thread context recalled",
        extra={"chat_id": chat_id, "message_id": message_id, "items_removed": removed, "events_marked": marked},
    )
    return RecallResult(items_removed=removed, events_marked=marked)
