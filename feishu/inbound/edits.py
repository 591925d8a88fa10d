"""O6: a message its sender edited (Feishu's `im.message.updated_v1`), through either intake.

lark-oapi 1.7.5 has no typed handler for it: both intakes register it as a customized event (the webhook's
HANDLED_EVENT_TYPES). Its body carries the message as `im.message.receive_v1` does (message_id, chat_id,
chat_type, message_type, content with the new text, mentions, root/parent ids, and `update_time`); the editor is
`sender` there (some deliveries name it `operator`: read either). Each edit is stored once (its dedupe key is the
message and its update time), so Feishu's retries of one edit are one event and a second edit is another.

This module applies the edit to thread context and says what routing should consider; routing decides whether
the edit starts a turn (feishu.inbound.routing._edit_route).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from agents.models import Bot, Turn
from feishu.inbound.messages import bot_secrets, inbound_message_build, message_is_own_echo
from feishu.inbound.parsing import ParsedMessage, message_parse
from threadcontext.services import InboundMessage, thread_context_edit

logger = logging.getLogger(__name__)

EVENT_EDITED = "im.message.updated_v1"
ROUTE_EDITED = "edited"  # context updated; routing may still start a turn
ROUTE_EDIT_OF_ANSWERED = "edit_of_answered"  # the message already has this bot's turn: no second one
IGNORED_EDIT_UNKNOWN = "edit_of_unknown"  # never recorded by this bot, or recalled
IGNORED_EDIT_UNREADABLE = "unreadable"
IGNORED_EDIT_OWN_ECHO = "own_echo"


@dataclass(frozen=True)
class EditApplied:
    outcome: str
    parsed: ParsedMessage | None = None
    message: InboundMessage | None = None
    bot_open_id: str = ""


def edit_dedupe_key(body: dict[str, Any]) -> str | None:
    """The stored key of one edit: the message and its update time (pure; None when the message id is missing)."""
    message = body.get("message")
    message_id = message.get("message_id") if isinstance(message, dict) else None
    if not isinstance(message_id, str) or not message_id:
        return None
    update_time = message.get("update_time") if isinstance(message, dict) else ""
    return f"edited:{message_id}:{update_time or ''}"[:64]


def edit_payload_normalized(payload: dict[str, Any]) -> dict[str, Any]:
    """The edit's payload in receive_v1's shape: the editor as `sender` when the body names it `operator`."""
    body = payload.get("event")
    if not isinstance(body, dict) or "sender" in body or not isinstance(body.get("operator"), dict):
        return payload
    operator = body["operator"]
    sender = {
        "sender_id": operator.get("operator_id") or operator.get("sender_id") or {},
        "sender_type": operator.get("operator_type") or "user",
    }
    return {**payload, "event": {**body, "sender": sender}}


def _edited_at(payload: dict[str, Any]) -> datetime:
    body = payload.get("event")
    message = body.get("message") if isinstance(body, dict) else None
    raw = message.get("update_time") if isinstance(message, dict) else None
    try:
        return datetime.fromtimestamp(int(str(raw)) / 1000, tz=UTC)
    except (TypeError, ValueError, OverflowError):
        return timezone.now()


def inbound_edit_apply(*, bot: Bot, payload: dict[str, Any], bot_open_id: str) -> EditApplied:
    """Apply one edit to the bot's thread context and classify it (see the module docstring)."""
    payload = edit_payload_normalized(payload)
    parsed = message_parse(payload)
    if parsed is None:
        return EditApplied(IGNORED_EDIT_UNREADABLE)
    if message_is_own_echo(bot=bot, parsed=parsed, bot_open_id=bot_open_id):
        return EditApplied(IGNORED_EDIT_OWN_ECHO)
    answered = Turn.objects.filter(bot=bot, source_message_id=parsed.message_id).exists()
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot_open_id)
    if parsed.is_direct:
        # A DM is never thread context (C3) and always started a turn: no turn means a message we never had.
        return EditApplied(ROUTE_EDIT_OF_ANSWERED if answered else _unknown(bot=bot, parsed=parsed))
    result = thread_context_edit(message=message, edited_at=_edited_at(payload), secrets=tuple(bot_secrets(bot)))
    if not result.found:
        return EditApplied(_unknown(bot=bot, parsed=parsed))
    if answered:
        return EditApplied(ROUTE_EDIT_OF_ANSWERED)
    return EditApplied(ROUTE_EDITED, parsed=parsed, message=message, bot_open_id=bot_open_id)


def _unknown(*, bot: Bot, parsed: ParsedMessage) -> str:
    logger.debug(
        "feishu edit ignored: the message is recalled or was never recorded",
        extra={"bot": bot.slug, "message_id": parsed.message_id},
    )
    return IGNORED_EDIT_UNKNOWN
