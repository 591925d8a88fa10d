"""What a Feishu turn reads about the message it answers, for the turn channel (feishu/channel/turn_channel.py).

- `source_parsed`: the turn's stored Feishu message, parsed once per run (every hook of the run needs it);
- `quoted_text_read`: the replied-to message, read online (C7), its mentions normalised (C4), filled from the
  local item or this bot's delivery row when Feishu's copy carries no text (a card);
- `topic_root_fetch`: the topic root, read online when it is due and not stored (C8), and recorded.
The reads raise or log Feishu's refusal (`FeishuApiError`); what a failed read means for the turn (retry, a
notice, a prompt without the root) is the channel's.
"""

import logging

from django.db.models import OuterRef, Subquery

from agents.models import Bot, Turn
from feishu.inbound.messages import bot_secrets
from feishu.inbound.parsing import ParsedMessage, content_text, message_parse
from feishu.models import InboundEvent, OutboundDelivery
from feishu.outbound import reads as feishu_reads
from feishu.outbound.api_errors import FeishuApiError
from threadcontext.selectors import context_item_text_get, topic_root_text_get
from threadcontext.services import Mention, normalise_mentions, thread_event_record_topic_root

logger = logging.getLogger(__name__)


def _mentions(*, bot: Bot, raw: list[dict]) -> list[Mention]:
    return [
        Mention(
            key=str(item.get("key", "")),
            open_id=str(item.get("id", "")),
            name=str(item.get("name", "")),
            is_this_bot=bool(bot.feishu_bot_open_id) and item.get("id") == bot.feishu_bot_open_id,
        )
        for item in raw
    ]


# Every hook of a run needs the source message (prepare, attachments, started, the sink, deliver): it is read and
# parsed once per run and kept on the run's Turn instance (each run claims a fresh one, so nothing outlives it).
_SOURCE_PARSED_ATTRIBUTE = "_feishu_source_parsed"
_UNREAD = object()


# The stored payload as the claim read it (FeishuChannel.claim_reads, issue 28): an annotation of the run's Turn.
SOURCE_PAYLOAD_READ = "feishu_source_payload"


def source_payload_read() -> Subquery:
    """The turn's stored Feishu payload, as a subquery correlated with the turn's row (null when not stored)."""
    stored = InboundEvent.objects.filter(bot_id=OuterRef("bot_id"), message_id=OuterRef("source_message_id"))
    return Subquery(stored.values("payload")[:1])


def source_parsed(*, turn: Turn) -> ParsedMessage | None:
    """The turn's stored Feishu message, parsed; None when it is not stored (any more)."""
    parsed = getattr(turn, _SOURCE_PARSED_ATTRIBUTE, _UNREAD)
    if parsed is _UNREAD:
        payload = getattr(turn, SOURCE_PAYLOAD_READ, _UNREAD)
        if payload is _UNREAD:  # a claim without the channel's reads (ledger.turn_claim's locked path)
            event = (
                InboundEvent.objects.filter(bot_id=turn.bot_id, message_id=turn.source_message_id)
                .only("payload")
                .first()
            )
            payload = event.payload if event is not None else None
        parsed = message_parse(payload) if isinstance(payload, dict) else None
        setattr(turn, _SOURCE_PARSED_ATTRIBUTE, parsed)
    assert parsed is None or isinstance(parsed, ParsedMessage)  # only this function sets the attribute
    return parsed


def quoted_text_read(*, bot: Bot, parsed: ParsedMessage) -> str:
    """C7: the replied-to message's text, read online with its mentions normalised (C4); a card without inline text
    is filled from the local item, this bot's own uncollected output from its delivery row.

    Raises FeishuApiError when the read fails.
    """
    fetched = feishu_reads.message_get(bot=bot, message_id=parsed.parent_id)
    text = normalise_mentions(
        content_text(message_type=fetched.msg_type, content=fetched.content), _mentions(bot=bot, raw=fetched.mentions)
    )
    if not text.strip():
        text = context_item_text_get(chat_id=parsed.chat_id, message_id=parsed.parent_id) or ""
    if not text.strip():  # this bot's own delivered output that was never collected (e.g. in a DM)
        delivery = OutboundDelivery.objects.filter(bot=bot, feishu_message_id=parsed.parent_id).first()
        text = delivery.content if delivery is not None else ""
    return text


def topic_root_fetch(*, bot: Bot, parsed: ParsedMessage) -> str | None:
    """C8: the root read online by root_msg_id (any sender type) and recorded (mentions normalised there, C4);
    None when it cannot be read: the prompt goes without it and the root stays due."""
    if not bot.has_feishu_credentials:
        return None
    try:
        fetched = feishu_reads.message_get(bot=bot, message_id=parsed.root_msg_id)
    except FeishuApiError as error:
        logger.warning(
            "feishu topic root unreadable",
            extra={"bot": bot.slug, "root_msg_id": parsed.root_msg_id, "code": error.code},
        )
        return None
    event, _ = thread_event_record_topic_root(
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        chat_id=parsed.chat_id,
        root_msg_id=parsed.root_msg_id,
        text=content_text(message_type=fetched.msg_type, content=fetched.content),
        sender_id=fetched.sender_id,
        sender_type=fetched.sender_type or "user",
        thread_id=fetched.thread_id,
        mentions=_mentions(bot=bot, raw=fetched.mentions),
        secrets=bot_secrets(bot),
    )
    if event is not None:
        return event.text
    # Recorded by an earlier read (the event exists): the stored text.
    return topic_root_text_get(bridge_id=bot.bridge_id, chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id)
