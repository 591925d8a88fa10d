"""Feishu entry point -> session binding -> agents.Thread (C14), on top of threadcontext's binding services.

Topic scope: one session per (bot, chat, topic root). Group scope: one continuous session per (bot, chat); every
topic and every reply to the bot's outputs feeds it. A DM is one continuous session per chat. `/new` retires the
binding; a retired topic, or a reply to an output of a retired session, answers "start a new topic" (C14).
"""

import logging

from django.db.models import OuterRef, Subquery

from agents.models import Bot, Thread
from agents.services.threads import thread_create
from feishu.inbound.parsing import ParsedMessage
from feishu.models import OutboundDelivery
from threadcontext.models import SessionBinding
from threadcontext.selectors import workspace_cached_get, workspace_settings_resolve
from threadcontext.services import session_binding_get_or_create, session_binding_retire, session_scope_key

logger = logging.getLogger(__name__)


class SessionRetired(Exception):
    """The entry point belongs to a retired session: nothing is submitted (C14)."""


def _scope_key(*, bot: Bot, chat_id: str, chat_type: str, root_msg_id: str) -> tuple[str, bool]:
    """(scope key, is_group_scope) for an entry point."""
    if chat_type == "p2p":
        return SessionBinding.GROUP_SCOPE_KEY, True
    # The workspace as routing read it a moment ago (cached, dropped on every write; issue 11): one query less.
    effective = workspace_settings_resolve(workspace=workspace_cached_get(bot_profile=bot.slug, chat_id=chat_id))
    return session_scope_key(session_scope=effective.session_scope, root_msg_id=root_msg_id), effective.is_group_scope


def _reply_targets_retired_session(*, bot: Bot, parent_id: str) -> bool:
    # Only the thread's id, and no ORDER BY (any of the reply's chunks names the same turn): the whole delivery and
    # turn rows, ordered, cost ~1 ms of CPU per reply in a topic (issue 11).
    delivered = OutboundDelivery.objects.filter(bot=bot, feishu_message_id=parent_id, turn__isnull=False)
    thread_id = next(iter(delivered.values_list("turn__thread_id", flat=True)[:1]), None)
    if thread_id is None:
        return False
    bindings = SessionBinding.objects.filter(agent_thread_id=thread_id)
    return bindings.exists() and not bindings.filter(retired_at__isnull=True).exists()


def session_thread_resolve(*, bot: Bot, message) -> Thread:
    """The Thread this message's turn runs in, created with its binding on first use; raises SessionRetired."""
    if message.parent_id and _reply_targets_retired_session(bot=bot, parent_id=message.parent_id):
        raise SessionRetired(message.message_id)
    scope_key, _ = _scope_key(
        bot=bot, chat_id=message.chat_id, chat_type=message.chat_type, root_msg_id=message.effective_root_msg_id
    )
    # The common case, a live session: its thread read through its binding in one statement (issue 28).
    live = SessionBinding.objects.filter(
        bot_profile=bot.slug, chat_id=message.chat_id, scope_key=scope_key, retired_at__isnull=True
    ).values("agent_thread_id")[:1]
    thread = next(iter(Thread.objects.filter(pk=Subquery(live))), None)
    if thread is not None:
        return thread

    def create_agent_thread() -> int:
        thread = thread_create(
            bot=bot,
            runtime_mode=Thread.RuntimeMode.CHAT,
            channel=Thread.Channel.FEISHU,
            title=f"Feishu {message.chat_type} {message.chat_id}",
            external_key=f"{message.chat_id}:{scope_key}",
        )
        return thread.pk

    result = session_binding_get_or_create(
        bot_profile=bot.slug, chat_id=message.chat_id, scope_key=scope_key, create_agent_thread=create_agent_thread
    )
    if result.is_retired_entry:
        raise SessionRetired(message.message_id)
    return Thread.objects.get(pk=result.binding.agent_thread_id)


def session_binding_for_thread(*, thread: Thread):
    """The live binding that points at a thread (None when retired since)."""
    return SessionBinding.objects.filter(agent_thread_id=thread.pk, retired_at__isnull=True).order_by("-id").first()


# The turn's live binding as the claim read it (FeishuChannel.claim_reads, issue 28): annotations of the run's Turn.
BINDING_ID_READ = "feishu_binding_id"
BINDING_ROOT_DELIVERED_READ = "feishu_binding_root_delivered"


def session_binding_reads() -> dict:
    """The live binding of a turn's thread (its id, whether its topic root went in), as subqueries correlated with
    the turn's row."""
    live = SessionBinding.objects.filter(agent_thread_id=OuterRef("thread_id"), retired_at__isnull=True)
    live = live.order_by("-id")
    return {
        BINDING_ID_READ: Subquery(live.values("id")[:1]),
        BINDING_ROOT_DELIVERED_READ: Subquery(live.values("topic_root_prompt_delivered")[:1]),
    }


def session_binding_state(*, turn) -> tuple[int | None, bool]:
    """(the live binding's id, whether its topic root was delivered) for the turn's thread, as the claim read it
    (or read now); (None, True) without a live binding: no root is due."""
    if hasattr(turn, BINDING_ID_READ):
        binding_id = getattr(turn, BINDING_ID_READ)
        return (binding_id, bool(getattr(turn, BINDING_ROOT_DELIVERED_READ))) if binding_id else (None, True)
    binding = session_binding_for_thread(thread=turn.thread)
    return (binding.pk, binding.topic_root_prompt_delivered) if binding is not None else (None, True)


def session_retire(*, bot: Bot, parsed: ParsedMessage) -> bool:
    """`/new`: retire the session this message's entry point is bound to."""
    scope_key, _ = _scope_key(
        bot=bot, chat_id=parsed.chat_id, chat_type=parsed.chat_type, root_msg_id=parsed.root_msg_id
    )
    retired = session_binding_retire(bot_profile=bot.slug, chat_id=parsed.chat_id, scope_key=scope_key)
    if retired is not None:
        Thread.objects.filter(pk=retired.agent_thread_id, retired_at__isnull=True).update(retired_at=retired.retired_at)
    return retired is not None
