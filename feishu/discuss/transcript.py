"""The transcript a discuss judge reads (P9, B5), and which the discuss turn it starts is given (O5): the thread's
recorded events, oldest first, each line with its author or bot label."""

from django.db.models import Q

from agents.llm.base import ChatMessage
from agents.models import Bot
from threadcontext.models import SessionBinding, ThreadEvent

# Newest recorded items handed to the judge: the primary's own horizon (AMUX_THREAD_CONTEXT_LIMIT, 20) twice
# over. Whether to speak now depends on the tail; a longer history only makes every probe dearer (the bench
# measured a 200-item transcript costing the judge more tokens than the primary it gates). The probe's token
# budget trims further.
TRANSCRIPT_ITEM_LIMIT = 40


def discuss_transcript_build(
    *, bot: Bot, chat_id: str, root_msg_id: str, limit: int = TRANSCRIPT_ITEM_LIMIT
) -> list[ChatMessage]:
    """The judge's transcript from the thread's recorded context items, oldest first.

    This bot's own outputs are assistant turns (actions it already took); everything else - people, the topic
    root, other bots - is a labelled user line, never trusted as instructions.
    """
    # Read from the events, not the items, so the people's requests (user_request: an @ of this bot, which is
    # never a context item) are in the judge's view beside the discussion and the outputs (G4). Every bot's
    # bridge records its own copy of the people's messages: this bridge's copies, and the agent outputs of every
    # bot (each recorded once, by the bot that spoke). A recalled message's event is blank and left out (G7).
    wanted = (
        ThreadEvent.EventType.TOPIC_ROOT,
        ThreadEvent.EventType.HUMAN_MESSAGE,
        ThreadEvent.EventType.USER_REQUEST,
        ThreadEvent.EventType.AGENT_OUTPUT,
    )
    events = ThreadEvent.objects.filter(
        Q(bridge_id=bot.bridge_id) | Q(event_type=ThreadEvent.EventType.AGENT_OUTPUT),
        chat_id=chat_id,
        event_type__in=wanted,
    ).exclude(text="")
    if root_msg_id != SessionBinding.GROUP_SCOPE_KEY:  # the group key reads the whole chat
        events = events.filter(root_msg_id=root_msg_id)
    columns = ("bridge_id", "event_type", "actor_id", "bot_profile", "session_name", "metadata", "text")
    rows = list(events.order_by("-id").values(*columns)[:limit])
    rows.reverse()
    # B5: another hub bot's reply is labelled with that bot's display name, so the judge sees who answered what.
    other_bots = {row["bot_profile"] for row in rows if row["event_type"] == ThreadEvent.EventType.AGENT_OUTPUT}
    names = dict(Bot.objects.filter(slug__in=other_bots - {bot.slug}).values_list("slug", "name")) if other_bots else {}
    transcript = []
    for row in rows:
        if row["event_type"] == ThreadEvent.EventType.AGENT_OUTPUT:
            if row["bridge_id"] == bot.bridge_id:
                transcript.append(ChatMessage(role="assistant", content=row["text"]))
                continue
            label = f"{row['bot_profile']}/{row['session_name']}" if row["session_name"] else row["bot_profile"]
            if row["bot_profile"] in names:
                label = f"{names[row['bot_profile']]} (bot)"
        else:
            metadata = row["metadata"] if isinstance(row["metadata"], dict) else {}
            label = metadata.get("sender_name") or row["actor_id"]
            if row["event_type"] == ThreadEvent.EventType.USER_REQUEST:
                label = f"{label} (to you)" if label else "(to you)"
        transcript.append(ChatMessage(role="user", content=f"{label}: {row['text']}" if label else row["text"]))
    return transcript
