"""Session bookkeeping on SessionBinding (seed 002 first paragraph and "Prompt 注入"; ARCHITECTURE C8, C14).

One live binding per entry point (bot, chat, topic root or the group key), enforced by a partial unique
constraint; `/new` retires it. `topic_root_prompt_delivered` starts false on every new binding (a new session
resets it) and is set only by `session_binding_mark_topic_root_delivered`, which the turn calls after a successful
submit; a failed submit leaves it false and the next input injects the root again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from threadcontext.models import MAIN_TIMELINE_KEY, SessionBinding, Workspace

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionBindingResult:
    """binding: the live binding (created or found), or the retired one when `is_retired_entry`.

    is_retired_entry: this topic's session was retired (`/new`): the bridge answers "please start a new topic" and
    submits nothing (C14; a group-scope session is simply recreated by the next trigger).
    """

    binding: SessionBinding
    created: bool = False
    is_retired_entry: bool = False


def session_scope_key(*, session_scope: str, root_msg_id: str) -> str:
    return SessionBinding.GROUP_SCOPE_KEY if session_scope == Workspace.SessionScope.GROUP else root_msg_id


def _live_binding(*, bot_profile: str, chat_id: str, scope_key: str) -> SessionBinding | None:
    return SessionBinding.objects.filter(
        bot_profile=bot_profile, chat_id=chat_id, scope_key=scope_key, retired_at__isnull=True
    ).first()


def session_binding_get_or_create(
    *,
    bot_profile: str,
    chat_id: str,
    scope_key: str,
    create_agent_thread: Callable[[], int],
) -> SessionBindingResult:
    """The live binding for an entry point, creating it (and its agents.Thread, via the callback) when missing.

    `create_agent_thread` runs inside the same savepoint as the binding insert: when a concurrent request wins
    the unique constraint, both are rolled back and the winner's binding is returned (no orphan Thread).
    """
    live = _live_binding(bot_profile=bot_profile, chat_id=chat_id, scope_key=scope_key)
    if live is not None:
        return SessionBindingResult(binding=live)
    # A topic ends for good with /new; the group and an ordinary group's main timeline go on (the next trigger
    # starts a fresh session there).
    if scope_key not in (SessionBinding.GROUP_SCOPE_KEY, MAIN_TIMELINE_KEY):
        retired = (
            SessionBinding.objects.filter(bot_profile=bot_profile, chat_id=chat_id, scope_key=scope_key)
            .order_by("-id")
            .first()
        )
        if retired is not None:
            return SessionBindingResult(binding=retired, is_retired_entry=True)
    try:
        with transaction.atomic():
            binding = SessionBinding.objects.create(
                bot_profile=bot_profile,
                chat_id=chat_id,
                scope_key=scope_key,
                agent_thread_id=create_agent_thread(),
                # The main timeline has no topic root to inject (G1); a topic's session starts without its root (C8).
                topic_root_prompt_delivered=scope_key == MAIN_TIMELINE_KEY,
            )
    except IntegrityError:
        winner = SessionBinding.objects.get(
            bot_profile=bot_profile, chat_id=chat_id, scope_key=scope_key, retired_at__isnull=True
        )
        return SessionBindingResult(binding=winner)
    logger.info(
        "session binding created",
        extra={"bot_profile": bot_profile, "chat_id": chat_id, "scope_key": scope_key, "binding_id": binding.pk},
    )
    return SessionBindingResult(binding=binding, created=True)


def session_binding_retire(*, bot_profile: str, chat_id: str, scope_key: str) -> SessionBinding | None:
    """`/new`: retire the live binding of an entry point; returns it, or None when there was none."""
    binding = SessionBinding.objects.filter(
        bot_profile=bot_profile, chat_id=chat_id, scope_key=scope_key, retired_at__isnull=True
    ).first()
    if binding is None:
        return None
    binding.retired_at = timezone.now()
    binding.save(update_fields=["retired_at"])
    logger.info(
        "session binding retired",
        extra={"bot_profile": bot_profile, "chat_id": chat_id, "scope_key": scope_key, "binding_id": binding.pk},
    )
    return binding


def session_binding_mark_topic_root_delivered(*, binding_id: int) -> bool:
    """C8: call only after the submit that carried the topic root succeeded. True when a live binding was marked."""
    updated = SessionBinding.objects.filter(pk=binding_id, retired_at__isnull=True).update(
        topic_root_prompt_delivered=True
    )
    return updated == 1
