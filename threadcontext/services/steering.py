"""People steer a bot's conversation from the chat (ARCHITECTURE §11.4, K1/K2): pins and clears.

A conversation is one bot (its bridge) in one chat's timeline (a topic root, or the main-timeline key). Nothing
here deletes a context item: a clear records a boundary the selector applies (`cleared`), a pin points at an item
the selector puts first. Both are read by the selector's one query (threadcontext.selectors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Case, IntegerField, Value, When

from threadcontext.candidates import MAX_PINS
from threadcontext.models import ContextClear, ContextPin, ThreadContextItem

logger = logging.getLogger(__name__)

PIN_DONE = "pinned"
PIN_ALREADY = "already_pinned"
PIN_NOT_FOUND = "not_found"
PIN_TOO_MANY = "too_many"


@dataclass(frozen=True)
class Conversation:
    """One bot's conversation in one chat timeline: what pins and clears are keyed by."""

    bridge_id: str
    bot_profile: str
    chat_id: str
    root_msg_id: str

    @property
    def key(self) -> dict[str, str]:
        return {"bridge_id": self.bridge_id, "chat_id": self.chat_id, "root_msg_id": self.root_msg_id}


@dataclass(frozen=True)
class PinOutcome:
    outcome: str
    pin: ContextPin | None = None


def _item_for_message(*, conversation: Conversation, message_id: str) -> ThreadContextItem | None:
    """The stored item of a message in this timeline: this bot's own copy first (its topic root, a human
    message it collected, its own output), else another bot's output; the newest copy of each."""
    own_first = Case(
        When(bridge_id=conversation.bridge_id, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    return (
        ThreadContextItem.objects.filter(
            chat_id=conversation.chat_id, root_msg_id=conversation.root_msg_id, message_id=message_id
        )
        .annotate(own_first=own_first)
        .order_by("own_first", "-id")
        .first()
    )


def context_pin(*, conversation: Conversation, message_id: str, pinned_by: str) -> PinOutcome:
    """K2: pin the message `message_id` (a reply's parent) for this conversation; at most MAX_PINS."""
    item = _item_for_message(conversation=conversation, message_id=message_id) if message_id else None
    if item is None:
        return PinOutcome(PIN_NOT_FOUND)
    existing = ContextPin.objects.filter(**conversation.key, message_id=message_id).first()
    if existing is not None:
        return PinOutcome(PIN_ALREADY, existing)
    if ContextPin.objects.filter(**conversation.key).count() >= MAX_PINS:
        return PinOutcome(PIN_TOO_MANY)
    try:
        with transaction.atomic():
            pin = ContextPin.objects.create(
                **conversation.key,
                bot_profile=conversation.bot_profile,
                message_id=message_id,
                item=item,
                pinned_by=pinned_by,
            )
    except IntegrityError:  # the same pin, sent twice at once: the other one stands
        return PinOutcome(PIN_ALREADY, ContextPin.objects.filter(**conversation.key, message_id=message_id).first())
    logger.info("context pinned", extra={**conversation.key, "message_id": message_id, "item": item.pk})
    return PinOutcome(PIN_DONE, pin)


def context_unpin(*, conversation: Conversation, message_id: str = "") -> int:
    """Remove one pin (a reply's parent) or, with no message id, all of them; how many were removed."""
    pins = ContextPin.objects.filter(**conversation.key)
    if message_id:
        pins = pins.filter(message_id=message_id)
    removed, _ = pins.delete()
    logger.info("context unpinned", extra={**conversation.key, "message_id": message_id, "removed": removed})
    return removed


def context_pins_list(*, conversation: Conversation) -> list[ContextPin]:
    """This conversation's pins, oldest first, each with its item."""
    return list(ContextPin.objects.filter(**conversation.key).select_related("item").order_by("id")[:MAX_PINS])


def context_clear(*, conversation: Conversation, cleared_by: str, include_pins: bool = False) -> ContextClear:
    """K1: everything stored in this timeline so far is `cleared` for this bot from now on (no item is deleted);
    pins stay unless `include_pins` (`/context clear all`), which removes them as well."""
    newest = (
        ThreadContextItem.objects.filter(chat_id=conversation.chat_id, root_msg_id=conversation.root_msg_id)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    with transaction.atomic():
        clear = ContextClear.objects.create(
            **conversation.key,
            bot_profile=conversation.bot_profile,
            through_item_id=newest or 0,
            includes_pins=include_pins,
            cleared_by=cleared_by,
        )
        if include_pins:
            ContextPin.objects.filter(**conversation.key).delete()
    logger.info("context cleared", extra={**conversation.key, "through": clear.through_item_id, "all": include_pins})
    return clear
