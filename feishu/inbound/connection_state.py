"""The long connection's state row (FeishuConnection): written by a bot's connection child and its supervisor,
read by the bot page and the console (D1: connected / reconnecting / deaf since, and a short history of why).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Bot
from feishu.models import FeishuConnection

# The history keeps this many transitions (newest last): enough to read "deaf, reconnecting, connected" twice.
HISTORY_MAX_ENTRIES = 12
NOTE_MAX_CHARS = 300


def connection_state_record(
    *, bot_pk: int, add_reconnects: int = 0, add_events: int = 0, note: str = "", **fields: Any
) -> None:
    """Write the bot's connection row (created on first use); the counters are incremented in the UPDATE.

    A `note` (a transition and why) is appended to the row's bounded history in the same locked transaction, so
    the supervisor and its child never drop each other's entries.
    """
    now = timezone.now()
    updates: dict[str, Any] = {**fields, "updated_at": now}
    if add_reconnects:
        updates["reconnects"] = F("reconnects") + add_reconnects
    if add_events:
        updates["events_received"] = F("events_received") + add_events
    if not note:
        if not FeishuConnection.objects.filter(bot_id=bot_pk).update(**updates):
            FeishuConnection.objects.get_or_create(bot_id=bot_pk)  # one row per bot: a racing creator is harmless
            FeishuConnection.objects.filter(bot_id=bot_pk).update(**updates)
        return
    FeishuConnection.objects.get_or_create(bot_id=bot_pk)
    with transaction.atomic():
        row = FeishuConnection.objects.select_for_update().get(bot_id=bot_pk)
        entry = {"at": now.isoformat(), "state": fields.get("state", row.state), "note": note[:NOTE_MAX_CHARS]}
        updates["history"] = [*(row.history or []), entry][-HISTORY_MAX_ENTRIES:]
        FeishuConnection.objects.filter(pk=row.pk).update(**updates)


def connection_history(bot: Bot) -> list[dict[str, Any]]:
    """The bot's recent connection transitions, newest first, each {at (datetime), state, note}."""
    row = FeishuConnection.objects.filter(bot=bot).only("history").first()
    entries = list(reversed(row.history or [])) if row is not None else []
    return [{**entry, "at": _parsed(entry.get("at"))} for entry in entries if isinstance(entry, dict)]


def _parsed(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
