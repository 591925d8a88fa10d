"""The primary model's input for a prepared turn, in conversation order (ARCHITECTURE §11.1, O3).

The context is the thread as people saw it up to the turn's request: every message older than the request, and
the answers of the earlier turns stored after the request was sent (the request waited for them, O1), each
placed right after the message it answered (after the last of the messages its turn collected). Nothing newer
than the request is in it, except the requests this turn collected (O2), which join its own, oldest first.
"""

from agents import selectors
from agents.models import LLMModel, Message, Thread, Turn
from agents.services.turns.assembly import PrimaryInput, context_messages_upper_bound, primary_input_build
from agents.services.turns.channels import TurnChannel
from agents.services.turns.conversation import collected_turn_ids, steered_turn_ids
from agents.visibility import CONTEXT_ASSEMBLY

COLLECTED_SEPARATOR = "\n\n"


def context_in_conversation_order(*, turn: Turn, before_id: int, limit: int) -> list[Message]:
    """The context messages of the turn, oldest first, each answer right after what it answered: the messages
    older than its request, and the answers of earlier turns stored after it (the request waited for them)."""
    context = selectors.context_messages_list(
        thread=turn.thread, before_id=before_id, limit=limit, assembly_fields_only=True
    )
    if turn.thread.channel != Thread.Channel.REST:
        # The channel stored the request when the turn first ran, after every earlier turn of the conversation
        # had finished (O1): the id order is the conversation's, no answer came later. A REST request is stored
        # when it is posted, so earlier answers may follow it in the table.
        return context
    late = list(
        Message.objects.filter(
            pk__in=Turn.objects.filter(thread_id=turn.thread_id, pk__lt=turn.pk, reply_message_id__gt=before_id).values(
                "reply_message_id"
            )
        ).only(*selectors.ASSEMBLY_FIELDS, "visibility_mask")
    )
    context += [reply for reply in late if reply.visibility_mask & CONTEXT_ASSEMBLY]
    return selectors.conversation_ordered(thread_id=turn.thread_id, messages=context)[-limit:]


def turn_user_prompt(*, turn: Turn, user_message: Message) -> str:
    """The turn's request, with the requests it collected after it (oldest first); the ones steered into it
    while it ran reach the model at a tool-call boundary instead (conversation.steer_hook)."""
    own = user_message.prompt or user_message.content
    steered = set(steered_turn_ids(turn=turn))
    collected = [turn_id for turn_id in collected_turn_ids(turn=turn) if turn_id not in steered]
    if not collected:
        return own
    others = Message.objects.filter(pk__in=Turn.objects.filter(pk__in=collected).values("user_message_id")).order_by(
        "pk"
    )
    return COLLECTED_SEPARATOR.join([own, *(message.prompt or message.content for message in others)])


def primary_input(
    *, turn: Turn, channel: TurnChannel, model: LLMModel, activation_contract: str
) -> tuple[PrimaryInput, dict]:
    """The primary model's input for the prepared turn, and the record of it stored on the turn (`model_input`)."""
    user_message = turn.user_message
    # Set when the turn was created; only a deletion of its thread since (SET_NULL) takes it away.
    assert user_message is not None, f"turn {turn.pk} has no request message"
    # No more context messages than could fit the window: the thread's length never decides what a turn loads.
    context = context_in_conversation_order(
        turn=turn,
        before_id=user_message.pk,
        limit=context_messages_upper_bound(context_window=model.context_window),
    )
    primary = primary_input_build(
        model=model,
        system_prompt=turn.bot.system_prompt,
        context=context,
        user_prompt=turn_user_prompt(turn=turn, user_message=user_message),
        activation_contract=activation_contract,
        attachments=channel.attachments(turn=turn, vision=model.supports_vision),
    )
    recorded = primary.recorded_request  # the attachments' bodies replaced by their labels
    model_input: dict = {
        "provider": model.provider.name,
        "kind": model.provider.kind,
        "model": model.name,
        "context_message_ids": primary.context_message_ids,
        "dropped_context_messages": primary.dropped_context_messages,
        "context_budget_tokens": primary.budget_tokens,
        "messages": [{"role": message.role, "content": message.content} for message in recorded.messages],
    }
    collected = collected_turn_ids(turn=turn)
    if collected:
        model_input["collected_turn_ids"] = collected
    return primary, model_input
