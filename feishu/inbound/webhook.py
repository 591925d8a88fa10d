"""lark-oapi's EventDispatcherHandler, one per bot, with our policy around `handler.do(RawRequest)` (F1, G6).

Both intakes build their handler with `event_handler_build` and store with `captured_event_store`, so the
event types, the parsing and the store (dedupe on message_id) are one code path:
- webhook: lark-oapi answers the challenge, checks the verification token and the signature, and decrypts.
  Its processor only captures the decoded event into a context variable: it cannot raise, so lark-oapi never
  turns our failure into a 500 that invites Feishu's retries. The view stores the captured event afterwards.
- long connection (feishu.inbound.longconn): the authenticated websocket replaces the signature; the SDK calls
  the processor on its event loop before it acknowledges the frame, so the processor stores (and enqueues on
  commit) right there; a storage failure raises, the SDK answers 500 and Feishu redelivers.
"""

import contextvars
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.models import Bot
from core.parsers import MAX_JSON_DEPTH, JsonTooDeepError, json_depth_exceeds, json_loads_bounded
from core.text import storable_json
from feishu.inbound.card_actions import FOREIGN_ANSWER, captured_card, card_capture, card_event_dict
from feishu.inbound.edits import EVENT_EDITED, edit_dedupe_key
from feishu.inbound.intake import inbound_event_store
from feishu.inbound.signing import HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP
from feishu.models import InboundEvent, WebhookRefusal
from feishu.outbound.sdk import (
    AESCipher,
    CustomizedEvent,
    EventDispatcherHandler,
    LogLevel,
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
    RawRequest,
)

logger = logging.getLogger(__name__)
Reason = WebhookRefusal.Reason

# The event types the bridge handles; every other type is acknowledged with 200 and ignored. Routing dispatches
# on them (feishu.inbound.routing.inbound_event_route).
HANDLED_EVENT_TYPES = (
    "im.message.receive_v1",
    "im.message.recalled_v1",  # G7: the message leaves thread context
    "im.message.updated_v1",  # O6: the new text replaces the old (edits.EVENT_EDITED; no typed handler in 1.7.5)
    "im.chat.member.bot.added_v1",  # G2: the group's workspace is created (or restored)
    "im.chat.member.bot.deleted_v1",  # G2: ... and retired
)

_captured: contextvars.ContextVar[CustomizedEvent | None] = contextvars.ContextVar("feishu_captured", default=None)
_handlers: dict[int, tuple[Any, EventDispatcherHandler]] = {}
_handlers_lock = threading.Lock()


@dataclass(frozen=True)
class WebhookOutcome:
    """What the webhook should answer, and the event to store when there is one."""

    status_code: int
    body: dict[str, Any]
    event: dict[str, Any] | None = None
    card_action: dict[str, Any] | None = None  # a verified button press: the view answers it (feishu.channel.approvals)
    refusal: str = ""  # a WebhookRefusal.Reason when the request is refused (D3: counted per bot and reason)


def _capture(data: CustomizedEvent) -> None:
    _captured.set(data)


def event_handler_build(
    *,
    bot: Bot,
    processor: Callable[[CustomizedEvent], None],
    card_processor: Callable[[P2CardActionTrigger], P2CardActionTriggerResponse],
) -> EventDispatcherHandler:
    """The one handler builder of both intakes: the bot's keys, every HANDLED_EVENT_TYPES to `processor` and the
    card callbacks (lark-oapi's own card action handling) to `card_processor`."""
    # CRITICAL: lark-oapi would log a traceback for every refused request; the view logs one structured line.
    builder = EventDispatcherHandler.builder(
        bot.feishu_encrypt_key or "", bot.feishu_verification_token or "", LogLevel.CRITICAL
    )
    for event_type in HANDLED_EVENT_TYPES:
        builder = builder.register_p2_customized_event(event_type, processor)
    builder = builder.register_p2_card_action_trigger(card_processor)
    return builder.build()


def _handler_build(bot: Bot) -> EventDispatcherHandler:
    return event_handler_build(bot=bot, processor=_capture, card_processor=card_capture)


def event_handler_get(*, bot: Bot) -> EventDispatcherHandler:
    """The bot's handler, rebuilt when its credentials change (keyed on updated_at)."""
    cached = _handlers.get(bot.pk)
    if cached and cached[0] == bot.updated_at:
        return cached[1]
    with _handlers_lock:
        handler = _handler_build(bot)
        _handlers[bot.pk] = (bot.updated_at, handler)
    return handler


def event_dict(data: CustomizedEvent) -> dict[str, Any]:
    """The decoded event as stored: schema 2.0, the header without its verification token, the event body."""
    header = data.header
    return {
        "schema": "2.0",
        "header": {
            "event_id": header.event_id or "",
            "event_type": header.event_type or "",
            "create_time": header.create_time or "",
            "app_id": header.app_id or "",
            "tenant_key": header.tenant_key or "",
        },  # the verification token is dropped: no secret is stored (C3)
        "event": data.event or {},
    }


def event_dedupe_key(event: dict[str, Any]) -> str | None:
    """The key a captured event is stored once under (InboundEvent.message_id, unique per bot); None: shapeless.

    A message: its message_id (F2: Feishu replays a message under new event ids). A recall: "recalled:" + the
    recalled message's id (the message itself already holds the plain id). Membership events carry no message:
    "event:" + the event_id, which Feishu keeps across its retries of one event.
    """
    header = event.get("header")
    header = header if isinstance(header, dict) else {}
    body = event.get("event")
    body = body if isinstance(body, dict) else {}
    event_type = header.get("event_type")
    if event_type == "im.message.receive_v1":
        message = body.get("message")
        message_id = message.get("message_id") if isinstance(message, dict) else None
        return message_id[:64] if isinstance(message_id, str) and message_id else None
    if event_type == "im.message.recalled_v1":
        message_id = body.get("message_id")
        return f"recalled:{message_id}"[:64] if isinstance(message_id, str) and message_id else None
    if event_type == EVENT_EDITED:
        return edit_dedupe_key(body)  # one row per edit: "edited:" + the message id + its update time
    event_id = header.get("event_id")
    return f"event:{event_id}"[:64] if isinstance(event_id, str) and event_id else None


# Where each stored id of an event ends up, and how long that column is. A longer value cannot be Feishu's (its
# ids are 20-40 characters): such an event is acknowledged and ignored, never truncated into another message's id.
FEISHU_ID_MAX_CHARS = 64  # InboundEvent.event_id/message_id/event_type, chat_id, root_msg_id, open_id columns
FEISHU_NAME_MAX_CHARS = 200  # Message.author, ContextDecision.target_name
EVENT_FIELD_MAX_CHARS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("header", "event_id"), FEISHU_ID_MAX_CHARS),
    (("header", "event_type"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "message_id"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "chat_id"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "root_id"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "parent_id"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "thread_id"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "chat_type"), FEISHU_ID_MAX_CHARS),
    (("event", "message", "message_type"), FEISHU_ID_MAX_CHARS),
    (("event", "sender", "sender_id", "open_id"), FEISHU_ID_MAX_CHARS),
    (("event", "sender", "sender_id", "user_id"), FEISHU_ID_MAX_CHARS),
    (("event", "sender", "sender_id", "union_id"), FEISHU_ID_MAX_CHARS),
    (("event", "sender", "sender_type"), FEISHU_ID_MAX_CHARS),
)
MENTION_FIELD_MAX_CHARS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("key",), FEISHU_ID_MAX_CHARS),
    (("name",), FEISHU_NAME_MAX_CHARS),
    (("id", "open_id"), FEISHU_ID_MAX_CHARS),
    (("id", "user_id"), FEISHU_ID_MAX_CHARS),
    (("id", "union_id"), FEISHU_ID_MAX_CHARS),
)


def _field(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def event_field_refusal(*, event: dict[str, Any]) -> str | None:
    """Why a decoded event can never be stored as Feishu's, or None (pure; the webhook and long connection call it).

    Every id is checked against its column (a longer one is not Feishu's), and the message's `content` (a JSON
    string the worker decodes) against the depth bound. Shape is not judged here: a missing field passes.
    """
    for path, limit in EVENT_FIELD_MAX_CHARS:
        value = _field(event, path)
        if isinstance(value, str) and len(value) > limit:
            return f"{'.'.join(path)} is longer than {limit} characters."
    mentions = _field(event, ("event", "message", "mentions"))
    for mention in mentions if isinstance(mentions, list) else ():
        for path, limit in MENTION_FIELD_MAX_CHARS:
            value = _field(mention, path)
            if isinstance(value, str) and len(value) > limit:
                return f"event.message.mentions[].{'.'.join(path)} is longer than {limit} characters."
    content = _field(event, ("event", "message", "content"))
    if isinstance(content, str) and json_depth_exceeds(content):
        return f"event.message.content is nested deeper than {MAX_JSON_DEPTH} levels."
    return None


def _refused(status_code: int, reason: str, refusal: str) -> WebhookOutcome:
    message = "Verification failed." if status_code == 401 else "Event could not be read."
    return WebhookOutcome(status_code, {"message": message, "extra": {"reason": reason}}, refusal=refusal)


def _malformed(message: str) -> WebhookOutcome:
    return WebhookOutcome(400, {"message": message, "extra": {}}, refusal=Reason.MALFORMED)


# lark-oapi's refusals are mapped to sentences of ours; its text (an exception's) never reaches a client.
SIGNATURE_HEADERS = (HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE)


def _lark_refusal(*, reason: str, bot: Bot, headers: dict[str, str]) -> WebhookOutcome:
    if reason.startswith("invalid verification_token"):
        return _refused(401, "The verification token does not match this bot's.", Reason.WRONG_TOKEN)
    missing = [name for name in SIGNATURE_HEADERS if not headers.get(name)]
    if bot.feishu_encrypt_key and missing:
        # lark-oapi adds the headers up unchecked (a TypeError, or a mismatch for a missing signature): say which.
        return _refused(
            401, f"The request has no {', '.join(missing)} header; Feishu signs every event.", Reason.BAD_SIGNATURE
        )
    if reason.startswith("signature verification failed"):
        return _refused(401, "The signature does not match the body.", Reason.BAD_SIGNATURE)
    if reason.startswith("encrypt_key not found"):
        return _refused(400, "The body is encrypted but this bot has no encrypt key.", Reason.UNDECRYPTABLE)
    return _refused(400, "The body is not a Feishu event.", Reason.MALFORMED)


def _timestamp_is_stale(headers: dict[str, str], *, max_age_seconds: int, now: float) -> bool:
    raw = headers.get(HEADER_TIMESTAMP)
    if raw is None:
        return False  # lark-oapi's signature check refuses a signed bot's request without one
    try:
        stamp = int(raw)
    except ValueError:
        return True
    return abs(now - stamp) > max_age_seconds  # far-future stamps are as suspect as old ones


def webhook_handle(
    *, bot: Bot, path: str, headers: dict[str, str], body: bytes, max_age_seconds: int, now: float | None = None
) -> WebhookOutcome:
    """Run one request through lark-oapi plus our policy; pure of the DB (the caller stores the event).

    The body, and the plaintext of an encrypted one, are parsed with the depth bound before lark-oapi (whose
    parse recurses) sees them; the event it hands back is made storable (core.text, L3) and its fields checked
    against their columns. Every refusal says what was wrong in a sentence of ours, never an exception's text.
    """
    try:
        decoded = json_loads_bounded(body)
    except JsonTooDeepError:
        return _malformed(f"Body is nested deeper than {MAX_JSON_DEPTH} levels.")
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return _malformed("Body is not JSON.")
    if not isinstance(decoded, dict):
        return _malformed("Body is not a JSON object.")
    encrypted = decoded.get("encrypt")
    if isinstance(encrypted, str) and encrypted and bot.feishu_encrypt_key:
        # Decrypted here too (microseconds) only to bound the plaintext's depth before lark-oapi parses it.
        try:
            plaintext = AESCipher(bot.feishu_encrypt_key).decrypt_str(encrypted)
        except ValueError:  # bad base64 (binascii.Error), length, padding or UTF-8
            return _refused(400, "The body could not be decrypted with this bot's encrypt key.", Reason.UNDECRYPTABLE)
        if json_depth_exceeds(plaintext):
            return _malformed(f"Body is nested deeper than {MAX_JSON_DEPTH} levels.")

    # Our policy, not lark-oapi's (it has no replay window): refuse an old timestamp (F1).
    if _timestamp_is_stale(headers, max_age_seconds=max_age_seconds, now=time.time() if now is None else now):
        return WebhookOutcome(400, {"message": "Request timestamp is too old.", "extra": {}}, refusal=Reason.STALE)

    raw = RawRequest()
    raw.uri = path
    raw.headers = headers  # as Django gives them: Title-Case, which lark-oapi's case-sensitive lookup expects
    raw.body = body
    token, card_token = _captured.set(None), captured_card.set(None)
    try:
        response = event_handler_get(bot=bot).do(raw)
        captured, card = _captured.get(), captured_card.get()
    finally:
        _captured.reset(token)
        captured_card.reset(card_token)

    try:
        answer = json.loads(response.content or b"{}")
    except ValueError:
        answer = {}
    if response.status_code == 200:
        if "challenge" in answer:
            return WebhookOutcome(200, {"challenge": answer["challenge"]})
        if card is not None:
            pressed = card_event_dict(card)
            if not event_app_matches(bot=bot, event=pressed):
                return WebhookOutcome(200, FOREIGN_ANSWER)
            return WebhookOutcome(200, {}, card_action=pressed)
        if captured is None:
            return WebhookOutcome(200, {"msg": "ignored"})
        event = captured_event_prepare(bot=bot, data=captured)
        if event is None or not event_app_matches(bot=bot, event=event):
            return WebhookOutcome(200, {"msg": "ignored"})
        return WebhookOutcome(200, {"msg": "success"}, event=event)

    reason = str(answer.get("msg", "")) if isinstance(answer, dict) else ""
    if reason.startswith("processor not found"):
        # An authenticated event of a type we do not handle: acknowledge so Feishu does not retry it.
        return WebhookOutcome(200, {"msg": "ignored"})
    outcome = _lark_refusal(reason=reason, bot=bot, headers=headers)
    # lark-oapi's own text goes to the log only (truncated, made loggable); the client gets our sentence.
    logger.warning(
        "feishu webhook refused",
        extra={"bot": bot.slug, "reason": outcome.body["extra"]["reason"], "detail": storable_json(reason[:200])},
    )
    return outcome


def event_app_matches(*, bot: Bot, event: dict[str, Any]) -> bool:
    """Whether the event names the bot's own Feishu app (issue 30, 9); a mismatch is logged once.

    Signed with this bot's keys but carrying another app's id (keys shared or leaked between apps, or a replay
    into the wrong bot): acknowledged with 200 so Feishu does not retry, never stored or answered. A bot without an
    app id (the demo's locally provisioned webhook credentials, feishu.simulate) has nothing to compare against.
    """
    app_id = event["header"].get("app_id") or ""
    if not bot.feishu_app_id or app_id == bot.feishu_app_id:
        return True
    logger.warning(
        "feishu event ignored: its app_id is not the bot's",
        extra={"bot": bot.slug, "event_app_id": storable_json(app_id[:FEISHU_ID_MAX_CHARS])},
    )
    return False


def captured_event_prepare(*, bot: Bot, data: CustomizedEvent) -> dict[str, Any] | None:
    """The decoded event as it may be stored (webhook and long connection alike), or None when it is ignored.

    Outside text is made storable here, once (L3), and every id is checked against its column: an event no column
    can hold is acknowledged (a retry would be the same), logged once, and never stored.
    """
    event = storable_json(event_dict(data))
    refusal = event_field_refusal(event=event)
    if refusal is not None:
        logger.warning("feishu event ignored", extra={"bot": bot.slug, "reason": refusal})
        return None
    return event


def captured_event_store(*, bot: Bot, event: dict[str, Any]) -> InboundEvent | None:
    """Store one decoded event (webhook or long connection) and enqueue it on commit; None when it is ignored.

    An authenticated event without its dedupe key (event_dedupe_key) is shapeless: None, nothing stored, and the caller
    acknowledges it so Feishu stops redelivering a payload we never accept. A DatabaseError propagates:
    nothing was stored, and the caller's non-acknowledgement makes Feishu redeliver.
    """
    header = event.get("header")
    header = header if isinstance(header, dict) else {}
    message_id = event_dedupe_key(event)  # a message's id, or a key for a recall / membership event
    if message_id is None or not all(isinstance(header.get(key), str) for key in ("event_id", "event_type")):
        return None
    stored, _ = inbound_event_store(
        bot=bot,
        # captured_event_prepare made them storable and checked their lengths against the columns
        event_id=header["event_id"],
        message_id=message_id,
        event_type=header["event_type"],
        payload=event,
    )
    return stored
