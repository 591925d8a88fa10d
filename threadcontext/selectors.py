"""Reads: workspace settings, the selector's one bounded query, the local topic root, decisions for explain."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery

from core.exceptions import NotFoundError
from threadcontext.models import (
    ContextClear,
    ContextPin,
    ThreadContextDecision,
    ThreadContextItem,
    ThreadEvent,
    Workspace,
)
from threadcontext.selection_types import SUMMARY_COVERS_THROUGH_KEY
from threadcontext.trimming import (
    MODE_OWNER_ONLY,
    MODE_SHARED,
    CandidateItem,
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


_CANDIDATE_COLUMNS = ("id", "item_type", "bridge_id", "message_id", "author_label", "text", "metadata")

# The query is a UNION ALL of small branches, each an index range scan of one thread and one item type
# ((chat_id, root_msg_id, item_type, -id)) read newest first and stopped by its LIMIT:
#   this bot's topic root (one row) | this bot's human messages (shared) | other bots' agent outputs
#   | ruled out, for explain only: this bot's own outputs, and its human messages in owner_only (newest few).
# Why the LIMITs are enough for a correct selection: the newest `item_limit` eligible rows of the thread are among
# the newest `item_limit` rows of each eligible branch, so the merge of the branches always holds them. Rows that
# are never eligible (own outputs, other bridges' copies of human messages and roots, out-of-mode types) are
# filtered in SQL, so however many a thread holds they cannot crowd an eligible row out. The two exclusions the
# selector may still make among eligible rows (the current request's own message; a bot-sent root that is also
# that bot's agent_output) both concern the topic root's message, the oldest of the thread: when it is inside a
# branch's window, that branch already holds all its rows. +1 tells "trimmed by the item limit" apart from "the
# thread had exactly that many"; +1 is spare.
# Cost: each branch reads at most its LIMIT matching rows; the human branch skips other bridges' copies (at most
# one per other bot in the group per message) and the outputs branch skips this bot's own outputs newer than the
# rows it returns. Neither depends on how long the thread is.
ELIGIBLE_SLACK = 2
# Ruled-out rows are read only to explain them, newest first and bounded; older ones are simply not listed.
RULED_OUT_LIMIT = 20
# K2: at most this many pins per conversation (`/context pin` refuses more); the pin branch reads them all.
MAX_PINS = 50
SUMMARY_WINDOW = 2


def _steering_annotations(*, bridge_id: str, chat_id: str, root_msg_id: str) -> dict:
    """Issue 25: each candidate row carries its pin (this bot's pin id, or NULL) and the conversation's newest
    clear boundary, so pins and clears ride in the selector's one query (an index lookup each, per bounded row)."""
    pin = ContextPin.objects.filter(item_id=OuterRef("id"), bridge_id=bridge_id).values("id")[:1]
    clear = (
        ContextClear.objects.filter(bridge_id=bridge_id, chat_id=chat_id, root_msg_id=root_msg_id)
        .order_by("-id")
        .values("through_item_id")[:1]
    )
    return {"pin_order": Subquery(pin), "cleared_through": Subquery(clear)}


def _newest_sql(queryset: QuerySet, limit: int, annotations: dict) -> tuple[str, tuple]:
    sliced = (
        queryset.annotate(**annotations).order_by("-id").values_list(*_CANDIDATE_COLUMNS, *annotations.keys())[:limit]
    )
    sql, params = sliced.query.sql_with_params()
    return sql, tuple(params)


def _candidate_branches(
    *, bridge_id: str, chat_id: str, root_msg_id: str, mode: str, item_limit: int
) -> list[tuple[Q, int]]:
    """(filter, LIMIT) per branch of the candidate query, in the order they are unioned."""
    window = item_limit + ELIGIBLE_SLACK
    topic_root = ThreadContextItem.ItemType.TOPIC_ROOT
    human = ThreadContextItem.ItemType.HUMAN_MESSAGE
    output = ThreadContextItem.ItemType.AGENT_OUTPUT
    branches = [
        (Q(item_type=topic_root, bridge_id=bridge_id), window),
        (Q(item_type=output) & ~Q(bridge_id=bridge_id), window),
        (Q(item_type=output, bridge_id=bridge_id), RULED_OUT_LIMIT),
    ]
    if mode == MODE_SHARED:
        branches.append((Q(item_type=human, bridge_id=bridge_id), window))
    else:
        branches.append((Q(item_type=human, bridge_id=bridge_id), RULED_OUT_LIMIT))
    # K3: this bot's newest summaries (the newest is injected; one more is read to explain it as superseded).
    summary = ThreadContextItem.ItemType.SUMMARY
    branches.append((Q(item_type=summary, bridge_id=bridge_id), SUMMARY_WINDOW))
    # K2: this bot's pins in this conversation, however old (read from the pin table's conversation index).
    pins = ContextPin.objects.filter(bridge_id=bridge_id, chat_id=chat_id, root_msg_id=root_msg_id)
    branches.append((Q(id__in=Subquery(pins.order_by("-id").values("item_id")[:MAX_PINS])), MAX_PINS))
    return branches


# Stand-ins for a request's own values while its query's shape is compiled (no chat, root or bridge id holds NUL).
_CHAT_ID, _ROOT_MSG_ID, _BRIDGE_ID = "\x00chat_id", "\x00root_msg_id", "\x00bridge_id"
# The newest item a request may see (O3: nothing that arrived after the request): no item id comes near this
# stand-in, which is also the value of a request without a cutoff.
_UP_TO_ITEM_ID = 2**62 + 7


@functools.lru_cache(maxsize=64)
def _candidates_sql(*, vendor: str, mode: str, item_limit: int) -> tuple[str, tuple]:
    """The candidate query of one shape (database, mode, limit), compiled once per process: its SQL, and its
    parameters with the stand-ins where a request's values go. The ORM's compile of the four branches cost ~2 ms
    of CPU per turn (issue 11); the SQL is the same for every request of a shape, only those three values differ."""
    thread = ThreadContextItem.objects.filter(chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID, id__lte=_UP_TO_ITEM_ID)
    parts: list[str] = []
    params: tuple = ()
    annotations = _steering_annotations(bridge_id=_BRIDGE_ID, chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID)
    branches = _candidate_branches(
        bridge_id=_BRIDGE_ID, chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID, mode=mode, item_limit=item_limit
    )
    for index, (branch, limit) in enumerate(branches):
        branch_sql, branch_params = _newest_sql(thread.filter(branch), limit, annotations)
        parts.append(f"SELECT * FROM ({branch_sql}) branch_{index}")
        params += branch_params
    return " UNION ALL ".join(parts), params


@dataclass(frozen=True)
class Candidates:
    """What the selector's one query read: the candidate items (each once) and the conversation's clear boundary."""

    items: list[CandidateItem]
    cleared_through_id: int = 0


def context_candidates_load(
    *, bridge_id: str, mode: str, chat_id: str, root_msg_id: str, item_limit: int, up_to_item_id: int | None = None
) -> Candidates:
    """The selector's ONE query (a UNION ALL of bounded newest-first branches, see above); any order out.
    `up_to_item_id`: only items up to that id (what had arrived when the request was made)."""
    sql, shape_params = _candidates_sql(vendor=connection.vendor, mode=mode, item_limit=item_limit)
    values: dict = {_CHAT_ID: chat_id, _ROOT_MSG_ID: root_msg_id, _BRIDGE_ID: bridge_id}
    if up_to_item_id is not None:
        values[_UP_TO_ITEM_ID] = up_to_item_id
    params = tuple(
        values.get(param, param) if isinstance(param, str) or param == _UP_TO_ITEM_ID else param
        for param in shape_params
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    candidates: dict[int, CandidateItem] = {}
    cleared_through_id = 0
    for item_id, item_type, item_bridge, message_id, author_label, text, metadata, pin_id, cleared in rows:
        cleared_through_id = max(cleared_through_id, int(cleared or 0))
        if item_id in candidates:  # a pinned item is also read by its type's branch
            continue
        if isinstance(metadata, str):  # SQLite hands JSON back as text; PostgreSQL's driver decodes jsonb
            metadata = json.loads(metadata or "{}")
        candidates[item_id] = CandidateItem(
            id=item_id,
            item_type=item_type,
            bridge_id=item_bridge,
            message_id=message_id,
            author_label=author_label,
            text=text,
            truncated=bool((metadata or {}).get("truncated")),
            pin_order=int(pin_id or 0),
            covers_through_id=int((metadata or {}).get(SUMMARY_COVERS_THROUGH_KEY) or 0),
        )
    return Candidates(items=list(candidates.values()), cleared_through_id=cleared_through_id)


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
