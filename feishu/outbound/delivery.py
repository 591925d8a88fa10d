"""Outbound delivery: rows first, then lark-oapi, with a uuid fixed per (turn, chunk) so a retry never posts twice (F3).

A reply is cut into chunks on block boundaries, never inside a code fence (R2, `markdown_chunks`), and each chunk
goes out in the bot's reply format: a markdown card (`interactive`, CardKit JSON 2.0) or `text`. Notices are
always text. Every send takes one token from the chat's and the app's send budget (R4), waiting for it:
a final message is delayed, never dropped. `feishu_call` takes it (`SendBudget`) right before the request
leaves, once the bot's tenant token is cached, and again for a resend after a rate-limit answer. A bot without Feishu credentials still gets its rows, marked
`recorded` instead of sent (F5).

A streamed reply (the card of outbound.streaming) is sent by its controller; `stream_deliveries_record` writes its
cards here as sent rows, so replies to a card route to the bot and its echo is recognised, as for any reply. When
Feishu refuses the card, its plain fallback goes through the chunk path above (`plain_replies_send`).
"""

import hashlib
import logging
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Bot, Turn
from agents.secrets import upstream_error_redacted
from core.statements import insert_or_refresh
from core.text import TranslatableText
from feishu.inbound.messages import bot_text
from feishu.models import OutboundDelivery
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.budget import SendBudget
from feishu.outbound.cards import (
    CARD_CHUNK_CHARS,
    TEXT_CHUNK_CHARS,
    ReplyFormat,
    markdown_chunks,
    outbound_content,
)
from feishu.outbound.stream_state import StreamState, stream_uuid

logger = logging.getLogger(__name__)

# Characters per message: TEXT_CHUNK_CHARS for text (Feishu caps a text request body at 150 KB; content is JSON in
# JSON, a CJK character can take ~7 bytes on the wire), CARD_CHUNK_CHARS for a card (30 KB of card JSON).
MSG_TYPE_OF_FORMAT: dict[str, str] = {"text": "text", "markdown_card": "interactive"}
# A notice not sent this long after it was written is retried by the sweeper (a send takes seconds at most:
# 4 attempts of a 10 s timeout); after NOTICE_MAX_ATTEMPTS sends or an hour it stays failed, visible in the admin.
NOTICE_SWEEP_AFTER_SECONDS = 120
NOTICE_GIVE_UP_AFTER_SECONDS = 3600
NOTICE_MAX_ATTEMPTS = 5


def delivery_uuid(*, bot: Bot, source_message_id: str, purpose: str, chunk_index: int) -> str:
    """Stable for the same turn and chunk, whoever sends it and however often (<= 50 chars, Feishu's limit)."""
    digest = hashlib.sha256(f"{bot.bridge_id}|{source_message_id}|{purpose}|{chunk_index}".encode()).hexdigest()
    return "amux-" + digest[:40]


@dataclass(frozen=True)
class OutgoingText:
    """A text the bridge sends, as rows of chunks: which bot sends it for which turn (None for a notice), where
    (`chat_id`, and the message it answers unless `reply_to_message_id` is ""), in which format, and what its
    uuids derive from (`source_message_id` and `purpose`), so the same text asked for twice is the same rows.

    `first_chunk_index`: where these chunks start among the turn's messages (a streamed reply's plain fallback
    comes after the cards it posted); the uuids count from 0 per purpose either way."""

    bot: Bot
    turn: Turn | None
    chat_id: str
    reply_to_message_id: str
    reply_in_thread: bool
    text: str
    source_message_id: str
    purpose: str = "turn"
    reply_format: ReplyFormat = "text"
    first_chunk_index: int = 0


def deliveries_prepare(*, outgoing: OutgoingText, sending_now: bool = False) -> list[OutboundDelivery]:
    """One row per chunk, created before anything is sent; a repeated call returns the same rows.

    Insert first (in a savepoint): a new reply, the common case, costs one INSERT per chunk; the uuid's unique
    constraint turns a repeated call (a re-run's delivery) into a read of the row it made. `sending_now`: the
    caller sends the rows at once (`deliveries_send`), so a new row is inserted with its first attempt counted
    and the send does not count it again (one UPDATE fewer per chunk, issue 28).
    """
    rows = []
    limit = TEXT_CHUNK_CHARS if outgoing.reply_format == "text" else CARD_CHUNK_CHARS
    for index, chunk in enumerate(markdown_chunks(outgoing.text or " ", limit=limit)):
        uuid = delivery_uuid(
            bot=outgoing.bot,
            source_message_id=outgoing.source_message_id,
            purpose=outgoing.purpose,
            chunk_index=index,
        )
        try:
            with transaction.atomic():
                row = OutboundDelivery.objects.create(
                    uuid=uuid,
                    bot=outgoing.bot,
                    turn=outgoing.turn,
                    chunk_index=outgoing.first_chunk_index + index,
                    chat_id=outgoing.chat_id,
                    reply_to_message_id=outgoing.reply_to_message_id,
                    reply_in_thread=outgoing.reply_in_thread,
                    msg_type=MSG_TYPE_OF_FORMAT[outgoing.reply_format],
                    content=chunk,
                    attempts=1 if sending_now else 0,
                )
            row.attempt_counted = sending_now
        except IntegrityError:  # made by an earlier call (or a concurrent one): that row
            row = OutboundDelivery.objects.get(uuid=uuid)
        rows.append(row)
    return rows


def delivery_send(*, delivery: OutboundDelivery) -> OutboundDelivery:
    """Send one row if it is not sent yet; raises FeishuApiError (row marked failed) when Feishu refuses."""
    if delivery.status in (OutboundDelivery.Status.SENT, OutboundDelivery.Status.RECORDED):
        return delivery
    bot = delivery.bot
    if delivery.attempt_counted:  # inserted a moment ago with this attempt counted (deliveries_prepare)
        delivery.attempt_counted = False
    else:
        OutboundDelivery.objects.filter(pk=delivery.pk).update(attempts=F("attempts") + 1)
    if not bot.has_feishu_credentials:
        delivery.status = OutboundDelivery.Status.RECORDED
        delivery.sent_at = timezone.now()
        delivery.save(update_fields=["status", "sent_at"])
        logger.info(
            "feishu delivery recorded (bot has no Feishu credentials)", extra={"bot": bot.slug, "uuid": delivery.uuid}
        )
        return delivery
    content = outbound_content(
        text=delivery.content, reply_format="markdown_card" if delivery.msg_type == "interactive" else "text"
    )
    try:
        budget = SendBudget(chat_id=delivery.chat_id)
        if delivery.reply_to_message_id:
            sent = feishu_sends.message_reply_content(
                bot=bot,
                message_id=delivery.reply_to_message_id,
                msg_type=content.msg_type,
                content=content.content,
                uuid=delivery.uuid,
                reply_in_thread=delivery.reply_in_thread,
                budget=budget,
            )
        else:
            sent = feishu_sends.message_create_content(
                bot=bot,
                chat_id=delivery.chat_id,
                msg_type=content.msg_type,
                content=content.content,
                uuid=delivery.uuid,
                budget=budget,
            )
    except FeishuApiError as error:
        delivery.status = OutboundDelivery.Status.FAILED
        delivery.error = upstream_error_redacted(
            f"{error.code}: {error.message}", extra=bot.feishu_secrets, max_chars=2000
        )
        delivery.save(update_fields=["status", "error"])
        raise
    delivery.status = OutboundDelivery.Status.SENT
    delivery.feishu_message_id = sent.message_id
    delivery.sent_at = timezone.now()
    delivery.error = ""
    delivery.save(update_fields=["status", "feishu_message_id", "sent_at", "error"])
    logger.info(
        "feishu delivery sent",
        extra={
            "bot": bot.slug,
            "uuid": delivery.uuid,
            "feishu_message_id": sent.message_id,
            "chunk": delivery.chunk_index,
        },
    )
    return delivery


def deliveries_send(*, deliveries: list[OutboundDelivery]) -> list[OutboundDelivery]:
    return [delivery_send(delivery=delivery) for delivery in deliveries]


def plain_replies_send(*, outgoing: OutgoingText) -> list[str]:
    """A whole text as plain text replies (whatever `reply_format` says), rows first (fixed uuids: a repeated
    call sends only what is not sent yet); the message ids, in order. The streaming card's fallback. Raises
    FeishuApiError as `delivery_send`."""
    rows = deliveries_prepare(outgoing=replace(outgoing, reply_format="text"), sending_now=True)
    return [row.feishu_message_id for row in deliveries_send(deliveries=rows)]


def stream_deliveries_record(
    *,
    bot: Bot,
    turn: Turn,
    chat_id: str,
    reply_to_message_id: str,
    reply_in_thread: bool,
    state: StreamState,
    uuid_base: str,
    carried_write: tuple[str, list] | None = None,
) -> None:
    """The cards a streamed reply posted, as sent rows in order (a plain fallback has its own rows, written by
    `plain_replies_send` before it is sent, after these).

    Written as soon as a message id is known (the card's echo and a reply to it are recognised while it streams)
    and again when the answer is finished, with what each card shows. Keyed by the controller's own uuids, so a
    re-run (or a concurrent one) finds the same rows: one upsert per card, its content refreshed when it changed.
    `carried_write`: the caller's UPDATE (the card's state on the turn), carried by the first row's statement.
    """
    entries: list[tuple[str, str, str, str]] = []  # (uuid, message_id, msg_type, content)
    for index, card in enumerate(state.closed_cards):
        uuid = stream_uuid(uuid_base=uuid_base, kind="c", index=index)
        entries.append((uuid, card.get("message_id", ""), "interactive", card.get("text", "")))
    if state.message_id:
        uuid = stream_uuid(uuid_base=uuid_base, kind="c", index=state.card_index)
        entries.append((uuid, state.message_id, "interactive", state.shown))
    now = timezone.now()
    for chunk_index, (uuid, message_id, msg_type, content) in enumerate(entries):
        if not message_id:
            continue
        row = OutboundDelivery(
            uuid=uuid,
            bot=bot,
            turn=turn,
            chunk_index=chunk_index,
            chat_id=chat_id,
            reply_to_message_id=reply_to_message_id,
            reply_in_thread=reply_in_thread,
            msg_type=msg_type,
            status=OutboundDelivery.Status.SENT,
            feishu_message_id=message_id,
            sent_at=now,
            content=content,
        )
        insert_or_refresh(instance=row, conflict_fields=("uuid",), refreshed="content", carried_write=carried_write)
        carried_write = None
    if carried_write is not None:  # no row to carry it
        with connection.cursor() as cursor:
            cursor.execute(*carried_write)


def feishu_notice_send(
    *,
    bot: Bot,
    chat_id: str,
    reply_to_message_id: str,
    reply_in_thread: bool,
    text: TranslatableText,
    purpose: str,
    source_key: str = "",
    reply_format: ReplyFormat = "text",
) -> list[OutboundDelivery]:
    """A short bridge notice (help, "start a new topic", quoted read failed): no turn, same uuid discipline.

    The rows are written in the caller's transaction; the HTTP call runs only after it commits (at once when
    there is none), so no Feishu call ever holds a transaction open, and a rolled-back caller sends nothing.
    A send Feishu refuses stays on its row (failed) and `notices_sweep` retries it under the same uuid.
    `source_key` names what the notice is about when it replies to no message (an automation run): one notice per
    (source, purpose), never one per chat. `reply_format`: a command's card (`/context show`) is a markdown card.
    """
    rows = deliveries_prepare(
        outgoing=OutgoingText(
            bot=bot,
            turn=None,
            chat_id=chat_id,
            reply_to_message_id=reply_to_message_id,
            reply_in_thread=reply_in_thread,
            text=bot_text(bot=bot, text=text),  # the bridge's fixed texts speak the bot's language (A3)
            source_message_id=source_key or reply_to_message_id or chat_id,
            purpose=purpose,
            reply_format=reply_format,
        )
    )
    transaction.on_commit(lambda: notices_deliver(deliveries=rows))
    return rows


def notices_deliver(*, deliveries: list[OutboundDelivery]) -> bool:
    """Send a notice's rows in order; a refusal is logged (the row says why), never raised. True when all went."""
    for delivery in deliveries:
        try:
            delivery_send(delivery=delivery)
        except FeishuApiError as error:
            logger.warning(
                "feishu notice not delivered; the sweeper retries it",
                extra={"bot": delivery.bot.slug, "uuid": delivery.uuid, "code": error.code},
            )
            return False  # the later chunks wait, so the notice is never delivered out of order
    return True


def notices_sweep(*, now=None) -> list[int]:
    """Retry notices whose send failed or never ran (worker killed after commit), same uuid: never posted twice."""
    now = now or timezone.now()
    rows = list(
        OutboundDelivery.objects.filter(
            turn__isnull=True,
            status__in=[OutboundDelivery.Status.PENDING, OutboundDelivery.Status.FAILED],
            attempts__lt=NOTICE_MAX_ATTEMPTS,
            created_at__lt=now - timedelta(seconds=NOTICE_SWEEP_AFTER_SECONDS),
            created_at__gte=now - timedelta(seconds=NOTICE_GIVE_UP_AFTER_SECONDS),
        )
        .select_related("bot")
        .order_by("id")[:100]
    )
    for row in rows:
        notices_deliver(deliveries=[row])
    return [row.pk for row in rows]


def message_is_other_bot_output(*, bot: Bot, feishu_message_id: str) -> bool:
    """Whether a Feishu message is another hub bot's delivered output (U8: a reply to it is that bot's)."""
    return (
        bool(feishu_message_id)
        and OutboundDelivery.objects.filter(feishu_message_id=feishu_message_id).exclude(bot=bot).exists()
    )


def message_is_bot_output(*, bot: Bot, feishu_message_id: str) -> bool:
    """Whether a Feishu message is one of this bot's delivered outputs (replies to it route to the bot)."""
    return (
        bool(feishu_message_id)
        and OutboundDelivery.objects.filter(bot=bot, feishu_message_id=feishu_message_id).exists()
    )
