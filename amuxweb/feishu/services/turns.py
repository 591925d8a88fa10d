"""The bridge turn: session -> Thread, context, prompt, c's turn_run, delivery, agent_output (ARCHITECTURE §5 step 3).

`feishu_turn_start` is what routing and the discuss wake (engineer d) call: it creates the turn idempotently
(one per bot and source message, T2) and enqueues `feishu_turn_process` after commit.
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agents.models import Bot, Turn
from amuxweb.feishu import client as feishu_client
from amuxweb.feishu.models import InboundEvent
from amuxweb.feishu.parsing import ParsedMessage, message_parse

logger = logging.getLogger(__name__)

QUOTED_READ_FAILED_TEXT = (
    "I could not read the message you replied to, so I did not send your request. Please try again."
)
# Queued Feishu turns older than this were never picked up (broker down at enqueue): the sweeper re-enqueues.
TURN_SWEEP_AFTER_SECONDS = 60


class FeishuTurnRetry(Exception):
    """Delivery failed for a reason a later try may fix; the task retries after `countdown` seconds."""

    def __init__(self, message: str, *, countdown: float = 30.0) -> None:
        super().__init__(message)
        self.countdown = countdown


def feishu_turn_enqueue(*, turn: Turn, activation_contract: str = "") -> None:
    from amuxweb.feishu.services.intake import _is_broker_error
    from amuxweb.feishu.tasks import feishu_turn_process

    def enqueue() -> None:
        try:
            feishu_turn_process.apply_async(args=[turn.pk, activation_contract], retry=False)
        except Exception as error:
            if not isinstance(error, OSError | ConnectionError) and not _is_broker_error(error):
                raise
            logger.warning("feishu turn not enqueued; the sweeper will pick it up", extra={"turn": turn.pk})

    transaction.on_commit(enqueue)


def feishu_turn_start(*, bot: Bot, message, trigger: str, activation_contract: str = "") -> Turn | None:
    """Resolve the session, create the turn once per (bot, source message) and enqueue it after commit.

    `message` is threadcontext's InboundMessage. Returns None when the entry point belongs to a retired
    session (C14): the user is told to start a new topic and nothing is submitted.
    """
    from agents.services.turns import turn_get_or_create

    from amuxweb.feishu.services.sessions import SessionRetired, session_thread_resolve

    try:
        thread = session_thread_resolve(bot=bot, message=message)
    except SessionRetired:
        from amuxweb.feishu.services.delivery import feishu_notice_send
        from amuxweb.feishu.services.routing import RETIRED_SESSION_TEXT

        feishu_notice_send(
            bot=bot,
            chat_id=message.chat_id,
            reply_to_message_id=message.message_id,
            reply_in_thread=bool(message.thread_id),
            text=RETIRED_SESSION_TEXT,
            purpose="retired",
        )
        return None
    turn, created = turn_get_or_create(bot=bot, thread=thread, trigger=trigger, source_message_id=message.message_id)
    if created:
        feishu_turn_enqueue(turn=turn, activation_contract=activation_contract)
    logger.info(
        "feishu turn started" if created else "feishu turn already exists",
        extra={"bot": bot.slug, "turn": turn.pk, "trigger": trigger, "message_id": message.message_id},
    )
    return turn


def feishu_turns_sweep(*, now=None) -> list[int]:
    """Re-enqueue Feishu turns still queued long after they were created (their enqueue was lost)."""
    now = now or timezone.now()
    turn_pks = list(
        Turn.objects.filter(
            status=Turn.Status.QUEUED,
            thread__channel="feishu",
            queued_at__lt=now - timedelta(seconds=TURN_SWEEP_AFTER_SECONDS),
        ).values_list("pk", flat=True)[:200]
    )
    for turn_pk in turn_pks:
        feishu_turn_enqueue(turn=Turn(pk=turn_pk))
    return turn_pks


def _source_parsed(*, turn: Turn) -> ParsedMessage | None:
    event = InboundEvent.objects.filter(bot=turn.bot, message_id=turn.source_message_id).first()
    return message_parse(event.payload) if event is not None else None


def quoted_text_read(*, bot: Bot, parsed: ParsedMessage) -> str:
    """C7: the replied-to message's text, read online; a card without inline text is filled from the local item.

    Raises FeishuApiError when the read fails (the caller answers the user and submits nothing).
    """
    from amuxweb.feishu.parsing import content_text
    from threadcontext.models import ThreadContextItem

    fetched = feishu_client.message_get(bot=bot, message_id=parsed.parent_id)
    text = content_text(message_type=fetched.msg_type, content=fetched.content)
    if not text.strip():
        item = (
            ThreadContextItem.objects.filter(event__message_id=parsed.parent_id, item_type="agent_output")
            .order_by("-id")
            .first()
        )
        text = item.text if item is not None else ""
    if not text.strip():
        from amuxweb.feishu.models import OutboundDelivery

        delivery = OutboundDelivery.objects.filter(bot=bot, feishu_message_id=parsed.parent_id).first()
        text = delivery.content if delivery is not None else ""
    return text
