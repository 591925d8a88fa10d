"""Reads: workspace settings, the selection (its one bounded query: threadcontext.candidates), the local topic root,
decisions for explain."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db.models import QuerySet

from core.exceptions import NotFoundError
from threadcontext.candidates import context_candidates_load
from threadcontext.models import (
    ThreadContextDecision,
    ThreadContextItem,
    ThreadEvent,
    Workspace,
)
from threadcontext.trimming import (
    MODE_OWNER_ONLY,
    MODE_SHARED,
    ContextPackage,
    SelectionRequest,
    select_context,
)


@dataclass(frozen=True)
class WorkspaceSettings:
    """A workspace's effective settings: its own overrides, else the hub-wide settings (ARCHITECTURE §7)."""

    mode: str
    owner_open_id: str
    thread_context_limit: int
    session_scope: str
    topic_root_enabled: bool
    shared_thread_enabled: bool

    @property
    def is_group_scope(self) -> bool:
        return self.session_scope == Workspace.SessionScope.GROUP


def workspace_get(*, bot_profile: str, chat_id: str) -> Workspace | None:
    return Workspace.objects.filter(bot_profile=bot_profile, chat_id=chat_id).first()


_NO_WORKSPACE = "none"


def _workspace_cache_key(*, bot_profile: str, chat_id: str) -> str:
    return f"threadcontext:workspace:{bot_profile}:{chat_id}"


def workspace_cached_get(*, bot_profile: str, chat_id: str) -> Workspace | None:
    """The workspace (its reply policy, G5), from the cache: 0 queries per message once read.

    Every write through threadcontext's services and the admin drops the entry (`workspace_cache_forget`);
    another process sees a change within AMUX_WORKSPACE_CACHE_SECONDS.
    """
    key = _workspace_cache_key(bot_profile=bot_profile, chat_id=chat_id)
    cached = cache.get(key)
    if cached is not None:
        return None if cached == _NO_WORKSPACE else cached
    workspace = workspace_get(bot_profile=bot_profile, chat_id=chat_id)
    cache.set(key, workspace if workspace is not None else _NO_WORKSPACE, timeout=settings.AMUX_WORKSPACE_CACHE_SECONDS)
    return workspace


def workspace_cache_forget(*, bot_profile: str, chat_id: str) -> None:
    cache.delete(_workspace_cache_key(bot_profile=bot_profile, chat_id=chat_id))


def workspace_settings_resolve(*, workspace: Workspace | None) -> WorkspaceSettings:
    """Effective settings; a chat without a workspace gets the hub-wide defaults (and collects nothing)."""
    hub_topic_root = settings.AMUX_FEISHU_TOPIC_ROOT_ENABLED
    hub_shared_thread = settings.AMUX_FEISHU_SHARED_THREAD_ENABLED
    if workspace is None:
        return WorkspaceSettings(
            mode=MODE_SHARED,
            owner_open_id="",
            thread_context_limit=settings.AMUX_THREAD_CONTEXT_LIMIT,
            session_scope=Workspace.SessionScope.TOPIC,
            topic_root_enabled=hub_topic_root,
            shared_thread_enabled=hub_shared_thread,
        )
    return WorkspaceSettings(
        mode=workspace.mode,
        owner_open_id=workspace.owner_open_id,
        thread_context_limit=workspace.thread_context_limit,
        session_scope=workspace.session_scope,
        topic_root_enabled=hub_topic_root if workspace.topic_root_enabled is None else workspace.topic_root_enabled,
        shared_thread_enabled=(
            hub_shared_thread if workspace.shared_thread_enabled is None else workspace.shared_thread_enabled
        ),
    )


@dataclass(frozen=True)
class ContextRequest:
    """One request in one Feishu thread, as the bot answering it sees it: what both the selector
    (`context_package_build`) and the turn's prompt (`services.context_prompt_prepare`) are asked about.

    Not `trimming.SelectionRequest`, the pure selector's input, which is derived from this and the workspace.
    """

    workspace: Workspace | None
    bridge_id: str
    bot_profile: str
    chat_id: str
    root_msg_id: str
    message_id: str
    request_text: str
    is_slash_command: bool = False
    target_id: str = ""
    # O3: the newest context item the request may see (a turn's: what had arrived when it was made); None: all.
    up_to_item_id: int | None = None


def context_items_up_to(*, chat_id: str, root_msg_id: str, arrived_by) -> int:
    """The newest item id of the thread recorded at or before `arrived_by` (0 when none): a turn's cutoff, O3.
    Reads the thread newest first on its (chat_id, root_msg_id, -id) index and stops at the first such item."""
    newest = (
        ThreadContextItem.objects.filter(chat_id=chat_id, root_msg_id=root_msg_id, created_at__lte=arrived_by)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    return newest or 0


def context_package_build(*, request: ContextRequest, max_chars: int | None = None) -> ContextPackage:
    """C5: load one thread's candidates (one query) and select this request's context deterministically.

    A slash command still reads (constant query count; explain shows what it would have carried) and selects
    nothing. A disabled shared thread context (workspace override, else AMUX_FEISHU_SHARED_THREAD_ENABLED) selects
    nothing either, each candidate excluded as not_in_mode.
    """
    effective = workspace_settings_resolve(workspace=request.workspace)
    mode = str(effective.mode) if effective.mode in (MODE_SHARED, MODE_OWNER_ONLY) else MODE_SHARED
    selection_request = SelectionRequest(
        bridge_id=request.bridge_id,
        bot_profile=request.bot_profile,
        mode=mode,
        item_limit=effective.thread_context_limit,
        max_chars=settings.AMUX_MAX_CONTEXT_CHARS if max_chars is None else max_chars,
        is_slash_command=request.is_slash_command,
        message_id=request.message_id,
        thread_context_enabled=effective.shared_thread_enabled and not effective.is_group_scope,
    )
    candidates = context_candidates_load(
        bridge_id=request.bridge_id,
        mode=mode,
        chat_id=request.chat_id,
        root_msg_id=request.root_msg_id,
        item_limit=selection_request.item_limit,
        up_to_item_id=request.up_to_item_id,
    )
    return select_context(
        candidates=candidates.items,
        request=dataclasses.replace(selection_request, cleared_through_id=candidates.cleared_through_id),
        chat_id=request.chat_id,
        root_msg_id=request.root_msg_id,
        request_text=request.request_text,
        target_id=request.target_id,
    )


def topic_root_text_get(*, bridge_id: str, chat_id: str, root_msg_id: str) -> str | None:
    """The locally recorded topic root's text for this bot, or None (the bridge then fetches it online)."""
    return (
        ThreadEvent.objects.filter(
            bridge_id=bridge_id,
            chat_id=chat_id,
            message_id=root_msg_id,
            event_type=ThreadEvent.EventType.TOPIC_ROOT,
        )
        .values_list("text", flat=True)
        .first()
    )


def context_item_text_get(*, chat_id: str, message_id: str) -> str | None:
    """C7: the local item for a message (a CardKit card without inline text is filled from it), newest copy."""
    return (
        ThreadContextItem.objects.filter(chat_id=chat_id, message_id=message_id)
        .order_by("-id")
        .values_list("text", flat=True)
        .first()
    )


def decision_list(*, root_msg_id: str = "", bot_profile: str = "", chat_id: str = "") -> QuerySet:
    decisions = ThreadContextDecision.objects.order_by("-id")
    if root_msg_id:
        decisions = decisions.filter(root_msg_id=root_msg_id)
    if bot_profile:
        decisions = decisions.filter(bot_profile=bot_profile)
    if chat_id:
        decisions = decisions.filter(chat_id=chat_id)
    return decisions


def decision_get(*, decision_id: int) -> ThreadContextDecision:
    decision = ThreadContextDecision.objects.filter(pk=decision_id).first()
    if decision is None:
        raise NotFoundError(f"No context decision with id {decision_id}.", extra={"decision_id": decision_id})
    return decision


def decision_for_explain(
    *,
    root_msg_id: str,
    bot_profile: str = "",
    message_id: str = "",
    decision_id: int | None = None,
) -> ThreadContextDecision:
    """C12: the decision explain shows: by id, else the latest for root (+ profile, + message).

    Without a profile the root must have decisions of exactly one profile (this app cannot know the hub's default
    bot); otherwise the error names the profiles to choose from.
    """
    if decision_id is not None:
        decision = decision_get(decision_id=decision_id)
        if decision.root_msg_id != root_msg_id:
            raise NotFoundError(
                f"Decision {decision_id} belongs to root {decision.root_msg_id}, not {root_msg_id}.",
                extra={"decision_id": decision_id, "root_msg_id": root_msg_id},
            )
        if bot_profile and decision.bot_profile != bot_profile:
            raise NotFoundError(
                f"Decision {decision_id} belongs to profile {decision.bot_profile}, not {bot_profile}.",
                extra={"decision_id": decision_id, "profile": bot_profile},
            )
        return decision
    for_root = ThreadContextDecision.objects.filter(root_msg_id=root_msg_id)
    profiles = sorted(set(for_root.values_list("bot_profile", flat=True).distinct()))
    if not profiles:
        raise NotFoundError(f"No context decision recorded for root {root_msg_id}.", extra={"root_msg_id": root_msg_id})
    if not bot_profile:
        if len(profiles) > 1:
            raise NotFoundError(
                f"Root {root_msg_id} has decisions of several profiles ({', '.join(profiles)}); pass --profile.",
                extra={"root_msg_id": root_msg_id, "profiles": profiles},
            )
        bot_profile = profiles[0]
    elif bot_profile not in profiles:
        raise NotFoundError(
            f"No context decision for root {root_msg_id} and profile {bot_profile} "
            f"(profiles with decisions: {', '.join(profiles)}).",
            extra={"root_msg_id": root_msg_id, "profile": bot_profile, "profiles": profiles},
        )
    decisions = for_root.filter(bot_profile=bot_profile)
    if message_id:
        decisions = decisions.filter(message_id=message_id)
    latest = decisions.order_by("-id").first()
    if latest is None:
        raise NotFoundError(
            f"No context decision for root {root_msg_id}, profile {bot_profile} and message {message_id}.",
            extra={"root_msg_id": root_msg_id, "profile": bot_profile, "message_id": message_id},
        )
    return latest
