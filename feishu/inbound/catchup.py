"""D2 (issue 23): catch up with what the hub missed, read with `im.v1.message.list`.

For each chat the bot heard from in the last CATCHUP_LOOKBACK (groups and DMs: a DM's chat_id is its container
too), the chat's messages from the newest event the bot stored (at most the lookback back) to now are read page by
page and stored through the same intake as a pushed event (`captured_event_store`: the dedupe on message_id makes
a message both listed and redelivered by Feishu one row, whichever comes first). A listed message carries the hub
annotation `backfilled`; an addressed one older than AMUX_BACKFILL_ANSWER_WINDOW_SECONDS also `missed`, and
routing records it without answering (the inbound event and its explain say "this request arrived while the hub
was down and was not answered"). Each page read takes a token of the app's send budget (feishu.outbound.reads).

U7 (issue 35): the catch-up answers only chats the bot belongs to. A chat whose workspace is retired (the bot was
removed) is not read; and each listed item's chat id is checked against the chat it was asked for: an item claiming
another chat is dropped (a warning names both, the run's record counts it), never stored or answered, so a list
answer cannot carry a message into a chat the hub did not ask about. The answer window applies to DMs and commands
as to any @ (routing's `missed`).

Triggers: the bot page's "catch up" action; a long connection back after a gap (its child enqueues
feishu.tasks.catchup_run when the SDK reconnects or a replacement child connects); a worker starting after the hub
was down longer than AMUX_BACKFILL_AFTER_SECONDS (feishu.inbound.hub_start). Topic replies are read with their
group's chat container; topics are not read as containers of their own.

Where the reading starts is fixed when the trigger fires (feishu.inbound.catchup_runs records each catch-up, and
queues it again when its task is refused or lost), not when the task runs: the intake is back by then, and a
message it stores before a worker takes the task (a new one, or a Feishu retry) would move "the newest stored"
past the gap, which would then never be read.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.models import Bot

# The module, not its name: it is lazy (lark-oapi), and the admin imports this module at startup.
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound.parsing import HUB_ANNOTATIONS_KEY
from feishu.models import InboundEvent
from feishu.outbound import reads as feishu_reads
from threadcontext.models import ThreadEvent, Workspace

logger = logging.getLogger(__name__)

CATCHUP_LOOKBACK = timedelta(hours=24)
MISSED_KEY = "missed"
MISSED_TEXT = "this request arrived while the hub was down and was not answered"


@dataclass(frozen=True)
class CatchupResult:
    chats: int
    read: int
    stored: int
    seconds: float
    dropped: int = 0  # listed items that claimed another chat than the one asked for (U7)


def _active_chats(*, bot: Bot, since) -> dict[str, str]:
    """Each chat the bot heard from since `since`, with its chat type: groups and DMs ("p2p", whose chat_id is
    the DM's container like a group's). The type comes from the stored receive events; a chat known only from
    thread context (the bot's own output) is a group."""
    received = (
        InboundEvent.objects.filter(bot=bot, event_type="im.message.receive_v1", received_at__gte=since)
        .values_list("payload__event__message__chat_id", "payload__event__message__chat_type")
        .order_by()  # no default ordering column in the SELECT DISTINCT
        .distinct()
    )
    chats = {str(chat_id): str(chat_type or "group") for chat_id, chat_type in received if chat_id}
    heard = ThreadEvent.objects.filter(bridge_id=bot.bridge_id, created_at__gte=since).values_list("chat_id", flat=True)
    for chat_id in set(heard):
        chats.setdefault(chat_id, "group")
    left = set(  # U7: a group the bot was removed from is no chat of its own any more
        Workspace.objects.filter(bot_profile=bot.slug, chat_id__in=list(chats), retired_at__isnull=False).values_list(
            "chat_id", flat=True
        )
    )
    return {chat_id: chat_type for chat_id, chat_type in sorted(chats.items()) if chat_id not in left}


def listed_message_event(
    *, bot: Bot, item: Any, missed: bool, chat_id: str, chat_type: str = "group"
) -> dict[str, Any]:
    """A listed message as the receive event Feishu would have pushed (pure): the list's mention ids are
    strings, the event's are objects; the sender's id is an open_id for people. `chat_id`: the chat the list was
    asked for, which the item was checked to belong to (an item without a chat id of its own gets it)."""
    sender = item.sender
    mentions = [
        {"key": m.key or "", "id": {"open_id": m.id or ""}, "name": m.name or ""} for m in (item.mentions or [])
    ]
    message = {
        "message_id": item.message_id,
        "create_time": item.create_time or "",
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": item.msg_type or "text",
        "content": (item.body.content if item.body else "") or "",
        "root_id": item.root_id or "",
        "parent_id": item.parent_id or "",
        "thread_id": item.thread_id or "",
        "mentions": mentions,
    }
    return {
        "schema": "2.0",
        "header": {
            "event_id": f"catchup:{item.message_id}"[:64],
            "event_type": "im.message.receive_v1",
            "create_time": item.create_time or "",
            "app_id": bot.feishu_app_id,
            "tenant_key": "",
        },
        "event": {
            "message": message,
            "sender": {
                "sender_id": {"open_id": (sender.id if sender else "") or ""},
                "sender_type": (sender.sender_type if sender else "") or "user",
            },
        },
        HUB_ANNOTATIONS_KEY: {"backfilled": True, MISSED_KEY: missed},
    }


# How many of the newest stored messages are looked at for the newest create time (a retry of an old message
# may be the newest row: its create time, not its arrival, says how far the hub has heard).
NEWEST_SCAN_ROWS = 500


def _newest_stored_message_at(*, bot: Bot, now: datetime) -> datetime:
    """When the newest message the bot stored was sent (Feishu's create_time), or the lookback's start."""
    times = (
        InboundEvent.objects.filter(
            bot=bot, event_type="im.message.receive_v1", received_at__gte=now - CATCHUP_LOOKBACK
        )
        .order_by("-id")
        .values_list("payload__event__message__create_time", flat=True)[:NEWEST_SCAN_ROWS]
    )
    stamps = [int(value) for value in times if str(value).isdigit()]
    return datetime.fromtimestamp(max(stamps) / 1000, tz=UTC) if stamps else now - CATCHUP_LOOKBACK


def catchup_since(*, bot: Bot, now: datetime | None = None) -> datetime:
    """Where a catch-up of the bot starts reading now: when the newest message it stored was sent (at most the
    lookback back)."""
    now = now or timezone.now()
    return max(_newest_stored_message_at(bot=bot, now=now), now - CATCHUP_LOOKBACK)


def catchup_run(*, bot: Bot, since: datetime | None = None) -> CatchupResult:
    """Read and store what the bot missed in its active groups since `since` (default: `catchup_since` now; at
    most the lookback back); see the module docstring."""
    started = time.perf_counter()
    now = timezone.now()
    since = catchup_since(bot=bot, now=now) if since is None else max(since, now - CATCHUP_LOOKBACK)
    window_ms = settings.AMUX_BACKFILL_ANSWER_WINDOW_SECONDS * 1000
    now_ms = int(now.timestamp() * 1000)
    chats = _active_chats(bot=bot, since=now - CATCHUP_LOOKBACK)
    read = dropped = 0
    before = InboundEvent.objects.filter(bot=bot).count()
    for chat_id, chat_type in chats.items():
        token = ""
        while True:
            items, token = feishu_reads.messages_list_page(
                bot=bot,
                chat_id=chat_id,
                start_time=int(since.timestamp()),
                end_time=int(now.timestamp()),
                page_token=token,
            )
            for item in items:
                read += 1
                if getattr(item, "deleted", False):
                    continue
                if item.chat_id and item.chat_id != chat_id:
                    dropped += 1
                    _foreign_item_log(bot=bot, asked=chat_id, item=item)
                    continue
                missed = now_ms - int(item.create_time or now_ms) > window_ms
                listed = listed_message_event(bot=bot, item=item, missed=missed, chat_id=chat_id, chat_type=chat_type)
                event = json.loads(json.dumps(listed))
                # A message stored already is found, not stored again.
                feishu_webhook.captured_event_store(bot=bot, event=event)
            if not token:
                break
    stored = InboundEvent.objects.filter(bot=bot).count() - before
    seconds = time.perf_counter() - started
    counts = {"chats": len(chats), "read": read, "stored": stored, "dropped": dropped}
    logger.info("feishu catch-up done", extra={"bot": bot.slug, **counts})
    return CatchupResult(**counts, seconds=seconds)


def _foreign_item_log(*, bot: Bot, asked: str, item: Any) -> None:
    logger.warning(
        "feishu catch-up dropped a listed message of another chat",
        extra={"bot": bot.slug, "asked_chat_id": asked, "listed_chat_id": item.chat_id, "message_id": item.message_id},
    )
