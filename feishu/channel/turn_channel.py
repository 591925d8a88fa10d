"""The Feishu channel of the one turn pipeline (agents.services.turns), and the bridge's entry point to it.

`feishu_turn_start` is what routing and the discuss wake call: it resolves the session, creates the turn once per
bot and source message (T2) and enqueues agents' `turn_run_task` after commit. The runner then calls this module's
`FeishuChannel` (registered in the bridge's AppConfig.ready()):

- prepare, once: the request (a voice message's transcript, H3: feishu.channel.voice) (mentions normalised, secrets redacted), the quoted message read online (C7; a
  transient read failure retries, a permanent one tells the user and submits nothing), the topic root when due
  (read online when not stored, C8), threadcontext's selection and decision; whether the root went in is noted
  (the reads of the source, the quote and the root: feishu.channel.sources);
- activation_contract: a discuss turn's contract, rebuilt from its judgement (P9; one source, never the broker);
- attachments: the message's images, files and linked documents (U3: as whom), read now for this run and never
  stored (feishu.channel.attachments);
- started: the receipt reaction on an addressed message (R1, feishu.outbound.replies);
- stream_sink: for a `markdown_card` bot, the streaming card the model's text is written into while it works,
  its state stored on the turn before each Feishu call (R3), tool steps as collapsed lines;
- deliver: the card finished with the stored reply (a refused card: one plain reply), or, when no card was
  started (`text` format, nothing streamed), the reply's chunks in the bot's format, each with a uuid fixed per
  turn and chunk (F3), and a line naming the documents not read for the person (U3); then the agent_output event
  once (C2), then, only if the prompt really held the root, topic_root_prompt_delivered (C8); the receipt goes;
- failed: the receipt replaced by the failure emoji, and one line to the chat;
- notice: one line to the chat (failure, delivery failure, unreadable quote);
- approval_place / approval_requested / approval_decided: where a call was asked, its card, a decision made elsewhere.
`FeishuAutomationChannel` (feishu.channel.automation) posts an automation run's answer the same way (item 8).
"""

import logging
from collections.abc import Sequence

from django.db import transaction

from agents.models import Bot, Message, Turn
from agents.principals import Admission, Principal
from agents.secrets import hub_secrets, turn_redactions_add
from agents.services.enqueue import turn_enqueue
from agents.services.turns import (
    DeliveryPermanent,
    Prepared,
    PrepareRetryable,
    Skip,
    TurnAttachments,
    TurnChannel,
    turn_get_or_create,
)
from agents.services.turns.assembly import DEFAULT_CONTEXT_WINDOW_TOKENS, text_within_tokens
from agents.services.turns.channels import StreamSink, failure_notice_text
from core.redaction import redact
from core.tasks_enqueue import task_enqueue
from core.text import TranslatableText
from feishu.channel.approvals import approval_card_patch, approval_card_post, approval_place_of
from feishu.channel.attachments import turn_attachments_fetch
from feishu.channel.collected import (
    collected_receipts_add,
    collected_receipts_fail,
    collected_receipts_remove,
    reply_target,
    request_text_with_collected,
    steered_texts,
)
from feishu.channel.discuss_context import discuss_prompt_with_transcript
from feishu.channel.doclinks import reply_with_documents_notice
from feishu.channel.handoff import UNSENT_REPLY_PREFIX, chat_handoff_targets, handoff_text_render, handoffs_dispatch
from feishu.channel.sending import bot_reply_format, delivery_finished, rows_send
from feishu.channel.sessions import (
    SessionRetired,
    session_binding_reads,
    session_binding_state,
    session_thread_resolve,
)
from feishu.channel.sources import (
    SOURCE_PAYLOAD_READ,
    quoted_text_read,
    source_parsed,
    source_payload_read,
    topic_root_fetch,
)
from feishu.channel.voice import voice_parsed
from feishu.inbound.messages import (
    QUOTED_READ_FAILED_TEXT,
    RETIRED_SESSION_TEXT,
    bot_secrets,
    inbound_message_build,
)
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.delivery import OutgoingText, deliveries_prepare, feishu_notice_send
from feishu.outbound.replies import (
    CardStreamSink,
    receipt_add,
    receipt_fail,
    receipt_remove,
    stream_card_close_with_notice,
    stream_reply_finish,
    stream_state_get,
    streaming_card_for,
)
from feishu.summaries import summary_due_note
from feishu.tasks import context_summary_task
from probe.models import ProbeJudgement
from probe.prompts import activation_contract
from threadcontext.rendering import prompt_render, request_is_submittable
from threadcontext.selectors import context_items_up_to, workspace_cached_get
from threadcontext.services import (
    ContextRequest,
    context_prompt_prepare,
    normalise_mentions,
    secrets_redact,
    session_binding_mark_topic_root_delivered,
    thread_event_record_agent_output,
)

logger = logging.getLogger(__name__)


def feishu_turn_start(*, bot: Bot, message, trigger: str, admission: Admission, principal: Principal) -> Turn | None:
    """Resolve the session, create the turn once per (bot, source message) and enqueue it after commit.

    `message` is threadcontext's InboundMessage. Returns None when the entry point belongs to a retired session
    (C14): the user is told to start a new topic and nothing is submitted. `admission`: the door's decision (U2),
    which the caller made for `principal` (U1: the person the turn acts for) and which must have admitted it.
    """
    if not admission.allowed:  # a door that forgot to stop a refused principal must not start a turn (U2)
        raise ValueError(f"a refused admission cannot start a turn: {admission.rule}")
    try:
        thread = session_thread_resolve(bot=bot, message=message)
    except SessionRetired:
        feishu_notice_send(
            bot=bot,
            chat_id=message.chat_id,
            reply_to_message_id=message.message_id,
            reply_in_thread=bool(message.thread_id),
            text=RETIRED_SESSION_TEXT,
            purpose="retired",
        )
        return None
    turn, created = turn_get_or_create(
        bot=bot,
        thread=thread,
        trigger=trigger,
        source_message_id=message.message_id,
        principal=principal,
        admission=admission,
    )
    if created:
        transaction.on_commit(lambda: turn_enqueue(turn_id=turn.pk))
    logger.info(
        "feishu turn started" if created else "feishu turn already exists",
        extra={"bot": bot.slug, "turn": turn.pk, "trigger": trigger, "message_id": message.message_id},
    )
    return turn


def discuss_contract_get(*, turn: Turn) -> str:
    """The activation contract of a discuss turn its judge activated (P9), rebuilt from the stored judgement; a
    turn without one (ungated, or not a discuss turn) has none."""
    if turn.trigger != Turn.Trigger.DISCUSS:
        return ""
    reason = (
        ProbeJudgement.objects.filter(turn_id=turn.pk, activated=True).order_by("id").values_list("reason", flat=True)
    ).first()
    return activation_contract(reason=reason) if reason is not None else ""


class FeishuChannel(TurnChannel):
    name = "feishu"

    def claim_reads(self) -> dict:
        # The source message and the session's binding, read with the claim (issue 28: two statements fewer).
        return {SOURCE_PAYLOAD_READ: source_payload_read(), **session_binding_reads()}

    def prepare(self, *, turn: Turn) -> Prepared | Skip:
        bot = turn.bot
        parsed = source_parsed(turn=turn)
        if parsed is None:
            return Skip(reason="The Feishu message of this turn is not stored.")
        parsed = voice_parsed(bot=bot, parsed=parsed)  # H3: transcribed now (once) when the bot has a model
        message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot.feishu_bot_open_id)
        # No secret reaches the prompt, the stored message or the decision, even when someone pastes one (C3).
        secrets = bot_secrets(bot)
        redaction = redact(normalise_mentions(parsed.text, message.mentions), secrets=secrets)
        turn_redactions_add(turn_id=turn.pk, count=redaction.count)
        # Each part within its share of the window (issue 30, finding 6); assembly fits the whole prompt.
        window = bot.primary_model.context_window or DEFAULT_CONTEXT_WINDOW_TOKENS
        # Queue mode collect (O2): the messages that waited for this turn join its request, oldest first.
        joined = request_text_with_collected(turn=turn, bot=bot, own_text=redaction.text, secrets=secrets)
        request_text = text_within_tokens(joined, max_tokens=window // 2, what="the message")
        quoted_text = self._quoted_text(bot=bot, parsed=parsed, secrets=secrets)
        if isinstance(quoted_text, Skip):
            return quoted_text
        if quoted_text:
            quoted_text = text_within_tokens(quoted_text, max_tokens=window // 2, what="the quoted message")
        if parsed.is_direct:  # DMs never get workspace thread context (C3): no selection, no decision
            if not request_is_submittable(request_text=request_text, topic_root_due=False, quoted_text=quoted_text):
                return Skip(reason="Empty request.")
            prompt = prompt_render(
                request_text=request_text,
                package=None,
                topic_root_text=None,
                root_is_request=False,
                quoted_text=quoted_text,
            )
            return Prepared(content=request_text or prompt, prompt=prompt, author=parsed.sender_open_id)
        binding_id, topic_root_prompt_delivered = session_binding_state(turn=turn)
        # The one place a group turn's context is selected, rendered and recorded (C5, C7-C11); whether the root is
        # due is threadcontext's rule, and it asks for the online read only then.
        prepared = context_prompt_prepare(
            request=ContextRequest(
                # The workspace as routing saw it a moment ago (cached, invalidated on every write; issue 11).
                workspace=workspace_cached_get(bot_profile=bot.slug, chat_id=parsed.chat_id),
                bridge_id=bot.bridge_id,
                bot_profile=bot.slug,
                chat_id=parsed.chat_id,
                root_msg_id=parsed.root_msg_id,
                message_id=parsed.message_id,
                request_text=request_text,
                # O3: what had arrived when the request was made; later messages wait for their own turn.
                up_to_item_id=context_items_up_to(
                    chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id, arrived_by=turn.queued_at
                ),
            ),
            topic_root_prompt_delivered=topic_root_prompt_delivered,
            quoted_text=quoted_text,
            quoted_message_id=parsed.parent_id,
            topic_root_fetch=lambda: topic_root_fetch(bot=bot, parsed=parsed),
        )
        if not prepared.is_submittable:
            return Skip(reason="Empty request.")
        prompt = discuss_prompt_with_transcript(turn=turn, decision=prepared.decision, prompt=prepared.prompt)
        return Prepared(
            content=request_text or prompt,
            prompt=prompt,
            author=parsed.sender_open_id,
            context_decision_id=prepared.decision.pk,
            channel_state={
                "topic_root_injected": prepared.topic_root_injected,
                "binding_id": binding_id,
                # K3: the selection trimmed items no summary covers: after delivery, a task may summarise them.
                "summary_due": bool(prepared.package.diagnostics.get("unsummarised_trimmed_ids")),
            },
        )

    @staticmethod
    def _quoted_text(*, bot: Bot, parsed: ParsedMessage, secrets: Sequence[str]) -> str | None | Skip:
        if not (parsed.is_explicit_reply and bot.has_feishu_credentials):
            return None
        try:
            return secrets_redact(quoted_text_read(bot=bot, parsed=parsed), secrets)
        except FeishuApiError as error:
            if error.is_retryable:  # 5xx, transport, rate limit: a later try may read it (item 11)
                raise PrepareRetryable(f"The quoted message could not be read for now ({error.code}).") from error
            # C7: no prompt, nothing submitted; the user hears why.
            return Skip(reason=f"Quoted message unreadable ({error.code}).", notice=QUOTED_READ_FAILED_TEXT)

    def activation_contract(self, *, turn: Turn) -> str:
        return discuss_contract_get(turn=turn)

    def attachments(self, *, turn: Turn, vision: bool) -> TurnAttachments:
        parsed = source_parsed(turn=turn)
        if parsed is None:
            return TurnAttachments()
        return turn_attachments_fetch(turn=turn, parsed=parsed, vision=vision)

    def started(self, *, turn: Turn) -> None:
        parsed = source_parsed(turn=turn)
        if parsed is not None:
            receipt_add(turn=turn, parsed=parsed)
            collected_receipts_add(turn=turn)

    def steered_texts(self, *, turn: Turn, steered: Sequence[Turn]) -> list[str]:
        return steered_texts(turn=turn, steered=steered, secrets=bot_secrets(turn.bot))

    def stream_sink(self, *, turn: Turn) -> StreamSink | None:
        bot = turn.bot
        if bot.reply_format != Bot.ReplyFormat.MARKDOWN_CARD or not bot.has_feishu_credentials:
            return None
        parsed = source_parsed(turn=turn)
        if parsed is None:
            return None
        target = reply_target(turn=turn, own=parsed)
        return CardStreamSink(card=streaming_card_for(turn=turn, parsed=target), secrets=hub_secrets())

    def deliver(self, *, turn: Turn, reply: Message) -> None:
        bot = turn.bot
        parsed = source_parsed(turn=turn)
        if parsed is None:
            raise DeliveryPermanent("The Feishu message of this turn is no longer stored.")
        target = reply_target(turn=turn, own=parsed)  # the newest message it answers (O2 collect)
        state = stream_state_get(turn=turn)
        # B1: the other hub bots the answer @-mentions get a real mention and, once it is sent, a turn.
        targets = chat_handoff_targets(turn=turn, parsed=parsed, text=reply.content)
        text = reply_with_documents_notice(turn=turn, parsed=parsed, text=reply.content)  # U3: what was not read
        if state.card_id or state.is_fallback:
            # A card was started while the model streamed (or Feishu refused it): finish it with the whole reply.
            message_ids = delivery_finished(lambda: stream_reply_finish(turn=turn, parsed=target, text=text))
            if targets:  # an @ added by a card update notifies nobody: one line that carries the real mentions
                self._mentions_send(turn=turn, parsed=target, targets=targets)
        else:
            rows = deliveries_prepare(
                outgoing=OutgoingText(
                    bot=bot,
                    turn=turn,
                    chat_id=parsed.chat_id,
                    reply_to_message_id=target.message_id,
                    reply_in_thread=target.is_in_topic,
                    text=handoff_text_render(text=text, targets=targets, reply_format=bot_reply_format(bot)),
                    source_message_id=turn.source_message_id,
                    reply_format=bot_reply_format(bot),
                ),
                sending_now=True,
            )
            message_ids = [row.feishu_message_id for row in rows_send(rows=rows)]
        first_message_id = next((message_id for message_id in message_ids if message_id), "")
        thread_event_record_agent_output(
            bridge_id=bot.bridge_id,
            bot_profile=bot.slug,
            chat_id=parsed.chat_id,
            root_msg_id=parsed.root_msg_id,
            message_id=first_message_id or f"{UNSENT_REPLY_PREFIX}{turn.pk}",
            text=text,  # what the chat saw
            thread_id=parsed.thread_id,
            chat_type=parsed.chat_type,
            secrets=bot_secrets(bot),
        )
        binding_id = turn.channel_state.get("binding_id")
        if turn.channel_state.get("topic_root_injected") and binding_id:
            # C8: only now, after the reply whose prompt really held the root was delivered.
            session_binding_mark_topic_root_delivered(binding_id=binding_id)
        receipt_remove(turn=turn, parsed=parsed)
        collected_receipts_remove(turn=turn)
        context_summary_enqueue(turn=turn)
        if targets:  # a bot without Feishu credentials (F5) records its reply: its hand-off keys on the turn
            handoffs_dispatch(
                turn=turn,
                parsed=parsed,
                message_id=first_message_id or f"{UNSENT_REPLY_PREFIX}{turn.pk}",
                text=reply.content,
                targets=targets,
            )

    @staticmethod
    def _mentions_send(*, turn: Turn, parsed: ParsedMessage, targets: list[Bot]) -> None:
        tags = " ".join(f'<at user_id="{t.feishu_bot_open_id}">{t.name}</at>' for t in targets if t.feishu_bot_open_id)
        if tags:
            feishu_notice_send(
                bot=turn.bot,
                chat_id=parsed.chat_id,
                reply_to_message_id=parsed.message_id,
                reply_in_thread=parsed.is_in_topic,
                text=tags,
                purpose="handoff_mentions",
            )

    def failed(self, *, turn: Turn, status: str) -> None:
        parsed = source_parsed(turn=turn)
        if parsed is None:
            return
        receipt_fail(turn=turn, parsed=parsed)
        collected_receipts_fail(turn=turn)
        if stream_card_close_with_notice(
            turn=turn, parsed=reply_target(turn=turn, own=parsed), text=failure_notice_text(status=status)
        ):
            return
        super().failed(turn=turn, status=status)

    approval_place = staticmethod(approval_place_of)  # U5: where a call was asked (feishu.channel.approvals)

    def approval_requested(self, *, turn: Turn, approval) -> None:
        approval_card_post(turn=turn, approval=approval)  # H1: feishu.channel.approvals

    def approval_decided(self, *, turn: Turn, approval, decision) -> None:
        approval_card_patch(turn=turn, approval=approval, decision=decision)

    def notice(self, *, turn: Turn, text: TranslatableText, purpose: str) -> None:
        parsed = source_parsed(turn=turn)
        if parsed is None:
            return
        feishu_notice_send(
            bot=turn.bot,
            chat_id=parsed.chat_id,
            reply_to_message_id=parsed.message_id,
            reply_in_thread=parsed.is_in_topic,
            text=text,
            purpose=purpose,
        )


def context_summary_enqueue(*, turn: Turn) -> None:
    """K3: after the reply was delivered (never on its path), queue the summary of what its selection trimmed."""
    decision_id = turn.context_decision_id
    if not (turn.channel_state.get("summary_due") and decision_id):
        return
    if summary_due_note(bot=turn.bot, decision_id=decision_id):
        bot_id = turn.bot_id
        transaction.on_commit(
            lambda: task_enqueue(task=context_summary_task, args=[decision_id, bot_id], what="context summary")
        )
