"""Workspaces as Feishu has them (G2): one per group a bot is in, created with the hub's defaults, retired when the
bot leaves; the chat's mode read once (G1); the per-group reply policy cached per process (G5).

Every write here drops the cached row (`workspace_cache_forget`), so the next message of that group reads the new
policy; another process's cache catches up within AMUX_WORKSPACE_CACHE_SECONDS.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cache_forget, workspace_get

logger = logging.getLogger(__name__)


def _default_mode() -> str:
    mode = settings.AMUX_WORKSPACE_DEFAULT_MODE
    if mode not in Workspace.Mode.values:
        logger.warning("AMUX_WORKSPACE_DEFAULT_MODE is not a workspace mode; using shared", extra={"value": mode})
        return Workspace.Mode.SHARED
    return mode


def workspace_ensure(*, bot_profile: str, chat_id: str, name: str = "") -> tuple[Workspace, bool]:
    """The bot's workspace for a group, created with the hub's defaults when it has none (G2). (workspace, created)

    Defaults: AMUX_WORKSPACE_DEFAULT_MODE (shared) and AMUX_THREAD_CONTEXT_LIMIT (20); marked as created
    automatically so the admin tells it from one an operator added.
    """
    workspace = workspace_get(bot_profile=bot_profile, chat_id=chat_id)
    if workspace is not None:
        return workspace, False
    try:
        with transaction.atomic():
            workspace = Workspace.objects.create(
                bot_profile=bot_profile,
                chat_id=chat_id,
                name=name[:200],
                mode=_default_mode(),
                thread_context_limit=settings.AMUX_THREAD_CONTEXT_LIMIT,
                is_created_automatically=True,
            )
    except IntegrityError:  # another worker created it a moment ago
        return Workspace.objects.get(bot_profile=bot_profile, chat_id=chat_id), False
    workspace_cache_forget(bot_profile=bot_profile, chat_id=chat_id)
    logger.info("workspace created automatically", extra={"bot_profile": bot_profile, "chat_id": chat_id})
    return workspace, True


def workspace_joined(*, bot_profile: str, chat_id: str, name: str = "") -> Workspace:
    """`im.chat.member.bot.added_v1`: the workspace exists (created or restored) and carries the group's name."""
    workspace, _ = workspace_ensure(bot_profile=bot_profile, chat_id=chat_id, name=name)
    fields = []
    if workspace.retired_at is not None:
        workspace.retired_at = None
        fields.append("retired_at")
    if name and not workspace.name:
        workspace.name = name[:200]
        fields.append("name")
    if fields:
        workspace.save(update_fields=[*fields, "updated_at"])
        workspace_cache_forget(bot_profile=bot_profile, chat_id=chat_id)
    return workspace


def workspace_retire(*, bot_profile: str, chat_id: str, now: datetime | None = None) -> bool:
    """`im.chat.member.bot.deleted_v1`: the bot left the group; its workspace is kept (history, explain) but retired."""
    updated = Workspace.objects.filter(bot_profile=bot_profile, chat_id=chat_id, retired_at__isnull=True).update(
        retired_at=now or timezone.now(), updated_at=timezone.now()
    )
    workspace_cache_forget(bot_profile=bot_profile, chat_id=chat_id)
    if updated:
        logger.info("workspace retired", extra={"bot_profile": bot_profile, "chat_id": chat_id})
    return updated == 1


def workspace_chat_mode_store(
    *, workspace: Workspace, chat_mode: str, group_message_type: str, name: str = "", now: datetime | None = None
) -> Workspace:
    """Keep what im.v1.chat.get said (G1); "" for both records a failed read (retried after a while)."""
    workspace.chat_mode = chat_mode[:16]
    workspace.group_message_type = group_message_type[:16]
    workspace.chat_mode_checked_at = now or timezone.now()
    fields = ["chat_mode", "group_message_type", "chat_mode_checked_at", "updated_at"]
    if name and not workspace.name:
        workspace.name = name[:200]
        fields.append("name")
    workspace.save(update_fields=fields)
    workspace_cache_forget(bot_profile=workspace.bot_profile, chat_id=workspace.chat_id)
    return workspace


def workspace_chat_mode_is_due(*, workspace: Workspace, now: datetime | None = None) -> bool:
    """Read chat.get once; after a failed read, again only every AMUX_FEISHU_CHAT_MODE_RETRY_SECONDS."""
    if workspace.is_chat_mode_known:
        return False
    if workspace.chat_mode_checked_at is None:
        return True
    now = now or timezone.now()
    return (now - workspace.chat_mode_checked_at).total_seconds() >= settings.AMUX_FEISHU_CHAT_MODE_RETRY_SECONDS
