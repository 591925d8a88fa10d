"""Issue 26 (H3): a voice message's transcript replaces its label in this bridge's thread context.

The collector stored the message as the parser's label (`[audio: 12 s]`); once the bot transcribed it, its events
(what the discuss judge reads) and items (what selection reads) of this bridge say `[voice] <transcript>`. Other
bridges' copies keep the label: their bots have not transcribed it (a bot without a transcription model keeps
the label). A recalled message (its event blanked, G7) stays recalled.
"""

from __future__ import annotations

from django.db import transaction

from threadcontext.models import ThreadContextItem, ThreadEvent
from threadcontext.services.event_store import token_estimate
from threadcontext.services.recall import RECALLED_KEY

VOICE_PREFIX = "[voice]"


def voice_text(transcript: str) -> str:
    return f"{VOICE_PREFIX} {transcript}"


def thread_context_voice_store(*, bridge_id: str, chat_id: str, message_id: str, transcript: str) -> int:
    """Write `[voice] <transcript>` over the message's label in this bridge's events and items; the rows changed."""
    text = voice_text(transcript)
    changed = 0
    with transaction.atomic():
        events = ThreadEvent.objects.select_for_update().filter(
            bridge_id=bridge_id, chat_id=chat_id, message_id=message_id
        )
        for event in events:
            if RECALLED_KEY in (event.metadata or {}) or event.text == text:
                continue
            event.text = text
            event.save(update_fields=["text"])
            changed += 1
        changed += (
            ThreadContextItem.objects.filter(bridge_id=bridge_id, chat_id=chat_id, message_id=message_id)
            .exclude(text=text)
            .update(text=text, token_estimate=token_estimate(text))
        )
    return changed
