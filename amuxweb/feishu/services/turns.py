"""The bridge turn: session -> Thread, context, prompt, c's turn_run, delivery, agent_output (ARCHITECTURE §5 step 3).

`feishu_turn_start` is what routing and the discuss wake (engineer d) call: it creates the turn idempotently
(one per bot and source message, T2) and enqueues `feishu_turn_process` after commit.
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Bot, Turn
from amuxweb.feishu import client as feishu_client
from amuxweb.feishu.messages import (
    QUOTED_READ_FAILED_TEXT,
    RETIRED_SESSION_TEXT,
    bot_secrets,
    inbound_message_build,
)
from amuxweb.feishu.models import InboundEvent
from amuxweb.feishu.parsing import ParsedMessage, message_parse

logger = logging.getLogger(__name__)

# Queued Feishu turns older than this were never picked up (broker down at enqueue): the sweeper re-enqueues.
TURN_SWEEP_AFTER_SECONDS = 60


class FeishuTurnRetry(Exception):
    """Delivery failed for a reason a later try may fix; the task retries after `countdown` seconds."""

    def __init__(self, message: str, *, countdown: float = 30.0) -> None:
        super().__init__(message)
        self.countdown = countdown


def feishu_turn_enqueue(*, turn: Turn, activation_contract: str = "") -> None:
    """Queue the bridge turn after commit; a lost enqueue is picked up by `feishu_turns_sweep`."""
    from amuxweb.feishu.services.intake import task_enqueue
    from amuxweb.feishu.tasks import feishu_turn_process

    def enqueue() -> None:
        # Stamped before the send and cleared when the broker refuses it, as agents' turn_enqueue does, so the
        # sweeper can tell a lost enqueue from a task a busy broker still holds.
        stamp = timezone.now()
        Turn.objects.filter(pk=turn.pk).update(enqueued_at=stamp)
        if not task_enqueue(task=feishu_turn_process, args=[turn.pk, activation_contract], what="feishu_turn"):
            Turn.objects.filter(pk=turn.pk, enqueued_at=stamp).update(enqueued_at=None)

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
    """Re-enqueue Feishu turns whose enqueue was lost: refused by the broker a minute ago or more, or taken longer
    ago than a healthy broker could still be holding it (the same rule as agents' turns_sweep, whose
    `broker_redelivery_seconds` explains why: a second copy beside one the broker holds would pay the model twice).
    """
    from agents.services.turns import broker_redelivery_seconds

    now = now or timezone.now()
    refused = Q(enqueued_at__isnull=True, queued_at__lt=now - timedelta(seconds=TURN_SWEEP_AFTER_SECONDS))
    taken_long_ago = Q(enqueued_at__lt=now - timedelta(seconds=broker_redelivery_seconds()))
    rows = list(
        Turn.objects.filter(
            refused | taken_long_ago,
            status=Turn.Status.QUEUED,
            attempts=0,  # never started (a turn waiting for a retry has attempts > 0)
            thread__channel="feishu",
        ).values_list("pk", "trigger")[:200]
    )
    contracts = discuss_contracts_get(turn_pks=[pk for pk, trigger in rows if trigger == Turn.Trigger.DISCUSS])
    for turn_pk, _ in rows:
        # P9: a discuss turn the judge activated runs with its contract, however it was (re-)queued.
        feishu_turn_enqueue(turn=Turn(pk=turn_pk), activation_contract=contracts.get(turn_pk, ""))
    return [pk for pk, _ in rows]


def discuss_contracts_get(*, turn_pks: list[int]) -> dict[int, str]:
    """The activation contract of each discuss turn a judge activated (P9), rebuilt from its stored judgement;
    a turn without one (ungated) has none. One query for the batch."""
    if not turn_pks:
        return {}
    from probe.models import ProbeJudgement
    from probe.prompts import activation_contract

    judgements = ProbeJudgement.objects.filter(turn_id__in=turn_pks, activated=True).order_by("id")
    return {
        turn_pk: activation_contract(reason=reason) for turn_pk, reason in judgements.values_list("turn_id", "reason")
    }


def _source_parsed(*, turn: Turn) -> ParsedMessage | None:
    event = InboundEvent.objects.filter(bot=turn.bot, message_id=turn.source_message_id).first()
    return message_parse(event.payload) if event is not None else None


def quoted_text_read(*, bot: Bot, parsed: ParsedMessage) -> str:
    """C7: the replied-to message's text, read online; a card without inline text is filled from the local item.

    Raises FeishuApiError when the read fails (the caller answers the user and submits nothing).
    """
    from amuxweb.feishu.models import OutboundDelivery
    from amuxweb.feishu.parsing import content_text
    from threadcontext.selectors import context_item_text_get

    fetched = feishu_client.message_get(bot=bot, message_id=parsed.parent_id)
    text = content_text(message_type=fetched.msg_type, content=fetched.content)
    if not text.strip():
        text = context_item_text_get(chat_id=parsed.chat_id, message_id=parsed.parent_id) or ""
    if not text.strip():  # this bot's own delivered output that was never collected (e.g. in a DM)
        delivery = OutboundDelivery.objects.filter(bot=bot, feishu_message_id=parsed.parent_id).first()
        text = delivery.content if delivery is not None else ""
    return text


def _turn_skip(*, turn: Turn, reason: str) -> None:
    Turn.objects.filter(pk=turn.pk, reply_message__isnull=True).update(
        status=Turn.Status.SKIPPED, error=reason, finished_at=timezone.now()
    )


def _topic_root_text(*, bot: Bot, parsed: ParsedMessage) -> str | None:
    """C8: the root's text from the local store, else fetched by root_msg_id (any sender type) and recorded."""
    from amuxweb.feishu.parsing import content_text
    from threadcontext.selectors import topic_root_text_get
    from threadcontext.services import Mention, thread_event_record_topic_root

    local = topic_root_text_get(bridge_id=bot.bridge_id, chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id)
    if local:
        return local
    if not bot.has_feishu_credentials:
        return None
    try:
        fetched = feishu_client.message_get(bot=bot, message_id=parsed.root_msg_id)
    except feishu_client.FeishuApiError as error:
        logger.warning(
            "feishu topic root unreadable",
            extra={"bot": bot.slug, "root_msg_id": parsed.root_msg_id, "code": error.code},
        )
        return None
    text = content_text(message_type=fetched.msg_type, content=fetched.content)
    mentions = [
        Mention(
            key=str(m.get("key", "")),
            open_id=str(m.get("id", "")),
            name=str(m.get("name", "")),
            is_this_bot=bool(bot.feishu_bot_open_id) and m.get("id") == bot.feishu_bot_open_id,
        )
        for m in fetched.mentions
    ]
    event, _ = thread_event_record_topic_root(
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        chat_id=parsed.chat_id,
        root_msg_id=parsed.root_msg_id,
        text=text,
        sender_id=fetched.sender_id,
        sender_type=fetched.sender_type or "user",
        thread_id=fetched.thread_id,
        mentions=mentions,
        secrets=bot_secrets(bot),
    )
    return event.text if event is not None else None


def feishu_turn_execute(*, turn_pk: int, activation_contract: str = "") -> str:
    """Run one Feishu turn end to end; idempotent (a re-run reuses the stored reply and the delivery rows)."""
    from agents.services.turns import TurnRetryLater, turn_run
    from amuxweb.feishu.services.delivery import deliveries_prepare, deliveries_send, feishu_notice_send
    from amuxweb.feishu.services.sessions import session_binding_for_thread
    from threadcontext.prompts import prompt_render, request_is_submittable, topic_root_is_due
    from threadcontext.selectors import workspace_get, workspace_settings_resolve
    from threadcontext.services import (
        context_prompt_prepare,
        normalise_mentions,
        secrets_redact,
        session_binding_mark_topic_root_delivered,
        thread_event_record_agent_output,
    )

    turn = Turn.objects.select_related("bot", "thread", "reply_message").get(pk=turn_pk)
    bot = turn.bot
    parsed = _source_parsed(turn=turn)
    if parsed is None:
        _turn_skip(turn=turn, reason="The Feishu message of this turn is not stored.")
        return "no_source"
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot.feishu_bot_open_id)
    # No secret reaches the prompt, the stored message or the decision, even when someone pastes one (C3).
    secrets = bot_secrets(bot)
    request_text = secrets_redact(normalise_mentions(parsed.text, message.mentions), secrets)
    workspace = None if parsed.is_direct else workspace_get(bot_profile=bot.slug, chat_id=parsed.chat_id)
    effective = workspace_settings_resolve(workspace=workspace)
    binding = session_binding_for_thread(thread=turn.thread)
    root_due = (
        not parsed.is_direct
        and binding is not None
        and topic_root_is_due(
            topic_root_enabled=effective.topic_root_enabled,
            topic_root_prompt_delivered=binding.topic_root_prompt_delivered,
            is_group_scope=effective.is_group_scope,
        )
    )
    reply_in_thread = parsed.is_in_topic

    reply = turn.reply_message
    if reply is None:
        quoted_text = None
        if parsed.is_explicit_reply:
            try:
                if bot.has_feishu_credentials:
                    quoted_text = secrets_redact(quoted_text_read(bot=bot, parsed=parsed), secrets)
            except feishu_client.FeishuApiError as error:
                # C7: no prompt, nothing submitted; the user hears why.
                feishu_notice_send(
                    bot=bot,
                    chat_id=parsed.chat_id,
                    reply_to_message_id=parsed.message_id,
                    reply_in_thread=reply_in_thread,
                    text=QUOTED_READ_FAILED_TEXT,
                    purpose="quoted_read_failed",
                )
                _turn_skip(turn=turn, reason=f"Quoted message unreadable ({error.code}).")
                return "quoted_read_failed"
        topic_root_text = None
        quoting_the_root = quoted_text is not None and parsed.parent_id == parsed.root_msg_id
        if root_due and not parsed.is_topic_root and not quoting_the_root:
            # (a quoted root is already the turn's background: it is neither fetched nor injected twice)
            topic_root_text = _topic_root_text(bot=bot, parsed=parsed)
        if not request_is_submittable(
            request_text=request_text, topic_root_due=topic_root_text is not None, quoted_text=quoted_text
        ):
            _turn_skip(turn=turn, reason="Empty request.")
            return "empty_request"
        if parsed.is_direct:  # DMs never get workspace thread context (C3): no selection, no decision
            prompt = prompt_render(
                request_text=request_text,
                package=None,
                topic_root_text=None,
                root_is_request=False,
                quoted_text=quoted_text,
            )
        else:
            # The one place a group turn's context is selected, rendered and recorded (C5, C7-C11).
            prepared = context_prompt_prepare(
                workspace=workspace,
                bridge_id=bot.bridge_id,
                bot_profile=bot.slug,
                chat_id=parsed.chat_id,
                root_msg_id=parsed.root_msg_id,
                message_id=parsed.message_id,
                request_text=request_text,
                topic_root_prompt_delivered=not root_due,
                topic_root_text=topic_root_text,
                quoted_text=quoted_text,
                quoted_message_id=parsed.parent_id,
            )
            prompt = prepared.prompt
            Turn.objects.filter(pk=turn.pk).update(context_decision_id=prepared.decision.pk)
        try:
            reply = turn_run(
                turn=turn,
                user_content=request_text or prompt,
                user_prompt=prompt,
                author=parsed.sender_open_id,
                activation_contract=activation_contract,
            )
        except TurnRetryLater as error:
            raise FeishuTurnRetry(str(error), countdown=error.countdown_seconds) from error
    if reply is None:
        return "no_reply"

    rows = deliveries_prepare(
        bot=bot,
        turn=turn,
        chat_id=parsed.chat_id,
        reply_to_message_id=parsed.message_id,
        reply_in_thread=reply_in_thread,
        text=reply.content,
        source_message_id=turn.source_message_id,
    )
    try:
        rows = deliveries_send(deliveries=rows)
    except feishu_client.FeishuApiError as error:
        reason = f"Delivery failed: {error.code} {error.message}"
        if error.is_retryable:
            raise FeishuTurnRetry(reason, countdown=30.0) from error
        # Permanent (bot removed from the chat, message recalled...): visible on the turn in the admin.
        Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.FAILED, error=reason[:2000])
        logger.warning(
            "feishu delivery failed permanently", extra={"bot": bot.slug, "turn": turn.pk, "code": error.code}
        )
        return "delivery_failed"

    output_message_id = rows[0].feishu_message_id or f"amux-turn-{turn.pk}"
    thread_event_record_agent_output(
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        chat_id=parsed.chat_id,
        root_msg_id=parsed.root_msg_id,
        message_id=output_message_id,
        text=reply.content,
        thread_id=parsed.thread_id,
        chat_type=parsed.chat_type,
        secrets=secrets,
    )
    if root_due and binding is not None:
        # C8: only now, after the reply carrying the root was delivered.
        session_binding_mark_topic_root_delivered(binding_id=binding.pk)
    logger.info(
        "feishu turn delivered",
        extra={"bot": bot.slug, "turn": turn.pk, "chunks": len(rows), "feishu_message_id": rows[0].feishu_message_id},
    )
    return "delivered"
