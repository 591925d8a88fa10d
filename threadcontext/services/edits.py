"""O6: an edited Feishu message (`im.message.updated_v1`) carries its new text in thread context.

The bot's events of that message and their items take the new text; the event's metadata keeps when it was
edited and how long the earlier text was (never the earlier text itself: an edit is often made to take something
back), so explain can say "edited at ..." without showing what was replaced. A recalled message stays recalled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from threadcontext.models import ThreadContextItem, ThreadEvent
from threadcontext.services.collection import InboundMessage, normalise_mentions, secrets_redact
from threadcontext.services.event_store import token_estimate
from threadcontext.services.recall import RECALLED_KEY

logger = logging.getLogger(__name__)

EDITED_KEY = "edited_at"
PREVIOUS_CHARS_KEY = "previous_text_chars"


@dataclass(frozen=True)
class EditResult:
    found: bool  # the bridge had recorded the message (and it is not recalled)
    events_updated: int = 0


def thread_context_edit(*, message: InboundMessage, edited_at: datetime, secrets: tuple[str, ...] = ()) -> EditResult:
    """Give the bridge's recorded events (and items) of `message` its edited text; idempotent for one edit.

    An edit older than the one already applied changes nothing (Feishu may deliver two edits out of order).
    """
    text = secrets_redact(normalise_mentions(message.text, message.mentions), secrets)
    stamp = edited_at.isoformat()
    with transaction.atomic():
        events = list(
            ThreadEvent.objects.select_for_update().filter(
                bridge_id=message.bridge_id, chat_id=message.chat_id, message_id=message.message_id
            )
        )
        live = [event for event in events if RECALLED_KEY not in (event.metadata or {})]
        if not live:
            return EditResult(found=False)
        updated = 0
        for event in live:
            metadata = event.metadata or {}
            if metadata.get(EDITED_KEY, "") >= stamp:
                continue  # this edit (or a later one) is applied already
            previous = metadata.get(PREVIOUS_CHARS_KEY, len(event.text)) if EDITED_KEY in metadata else len(event.text)
            event.metadata = {**metadata, EDITED_KEY: stamp, PREVIOUS_CHARS_KEY: previous}
            event.text = text
            event.save(update_fields=["text", "metadata"])
            for item in ThreadContextItem.objects.filter(event=event):
                item.text = text
                item.token_estimate = token_estimate(text)
                item.metadata = {**(item.metadata or {}), EDITED_KEY: stamp, PREVIOUS_CHARS_KEY: previous}
                item.save(update_fields=["text", "token_estimate", "metadata"])
            updated += 1
    logger.info(
        "thread context edited",
        extra={"chat_id": message.chat_id, "message_id": message.message_id, "events_updated": updated},
    )
    return EditResult(found=True, events_updated=updated)
