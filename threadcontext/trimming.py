"""The context selector's rules and trimming (seed 002 "选择规则", ARCHITECTURE C5): pure functions, no ORM, no LLM.

`threadcontext.selectors.context_package_build` loads one thread's candidates from the store and calls this.

`select_context` takes candidate items (any order), the current bot's identity, the workspace mode and the two
limits, and returns a `ContextPackage`: the selected items oldest to newest with their source labels, every
candidate it did not select with one reason from `EXCLUSION_REASONS`, and diagnostics.

Trimming is stable: the selection is always a contiguous newest suffix of the eligible items, in write order,
that fits both the item limit and the character budget; an item older than one that did not fit is never
selected, even when it alone would fit (otherwise adding one new message could resurrect an old one).
"""

from collections.abc import Iterable

from threadcontext.selection_types import (
    EXCLUDED_CHAR_BUDGET,
    EXCLUDED_CLEARED,
    EXCLUDED_CURRENT_REQUEST,
    EXCLUDED_DUPLICATE,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_NOT_IN_MODE,
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_PIN_OVER_BUDGET,
    EXCLUDED_SLASH_COMMAND,
    EXCLUDED_SUMMARISED,
    EXCLUDED_SUPERSEDED,
    EXCLUSION_REASONS,
    ITEM_AGENT_OUTPUT,
    ITEM_HUMAN_MESSAGE,
    ITEM_SUMMARY,
    ITEM_TOPIC_ROOT,
    MODE_OWNER_ONLY,
    MODE_SHARED,
    PREVIEW_CHARS,
    SELECTED_PINNED,
    SELECTED_RECENT,
    SELECTED_SUMMARY,
    CandidateItem,
    ContextPackage,
    ExcludedItem,
    SelectedItem,
    SelectionRequest,
    text_preview,
)

__all__ = [
    "SELECTED_SUMMARY",
    "ITEM_SUMMARY",
    "EXCLUDED_SUPERSEDED",
    "EXCLUDED_SUMMARISED",
    "CandidateItem",
    "ContextPackage",
    "EXCLUDED_CHAR_BUDGET",
    "EXCLUDED_CLEARED",
    "EXCLUDED_CURRENT_REQUEST",
    "EXCLUDED_DUPLICATE",
    "EXCLUDED_ITEM_LIMIT",
    "EXCLUDED_NOT_IN_MODE",
    "EXCLUDED_OWN_OUTPUT",
    "EXCLUDED_PIN_OVER_BUDGET",
    "EXCLUDED_SLASH_COMMAND",
    "EXCLUSION_REASONS",
    "ExcludedItem",
    "ITEM_AGENT_OUTPUT",
    "ITEM_HUMAN_MESSAGE",
    "ITEM_TOPIC_ROOT",
    "MODE_OWNER_ONLY",
    "MODE_SHARED",
    "PREVIEW_CHARS",
    "SELECTED_PINNED",
    "SELECTED_RECENT",
    "SelectedItem",
    "SelectionRequest",
    "select_context",
    "text_preview",
]


def _excluded(item: CandidateItem, reason: str) -> ExcludedItem:
    return ExcludedItem(
        id=item.id,
        item_type=item.item_type,
        source=item.source,
        reason=reason,
        chars=item.chars,
        preview=text_preview(item.text),
    )


def _rule_exclusion(item: CandidateItem, request: SelectionRequest) -> str | None:
    """The reason a candidate is not eligible at all, before any trimming; None when it is eligible."""
    if request.is_slash_command:
        return EXCLUDED_SLASH_COMMAND
    if not request.thread_context_enabled:
        return EXCLUDED_NOT_IN_MODE
    if item.item_type == ITEM_AGENT_OUTPUT:
        return EXCLUDED_OWN_OUTPUT if item.bridge_id == request.bridge_id else None
    if item.item_type not in (ITEM_TOPIC_ROOT, ITEM_HUMAN_MESSAGE):
        return EXCLUDED_NOT_IN_MODE
    # topic_root and human_message: only what this bot's own bridge collected under its own mode (other bots'
    # bridges record the same Feishu messages under their bridge_id; those copies are not this bot's context).
    if item.bridge_id != request.bridge_id:
        return EXCLUDED_NOT_IN_MODE
    if item.item_type == ITEM_HUMAN_MESSAGE and request.mode != MODE_SHARED:
        return EXCLUDED_NOT_IN_MODE
    if request.message_id and item.message_id == request.message_id:
        return EXCLUDED_CURRENT_REQUEST
    return None


def _eligible_newest_first(
    *,
    ordered: list[CandidateItem],
    request: SelectionRequest,
    excluded: dict[int, ExcludedItem],
    seen_messages: set[str],
    summarised_through_id: int = 0,
) -> list[CandidateItem]:
    """The candidates the rules allow, newest first; every other one goes into `excluded` with its reason.

    `seen_messages`: the Feishu messages already selected (the pins): another copy of one is a duplicate.
    """
    eligible: list[CandidateItem] = []
    # Walk newest first so that, among copies of one Feishu message, the newest-written copy wins.
    for item in reversed(ordered):
        reason = _rule_exclusion(item, request)
        if reason is None and item.message_id and item.message_id in seen_messages:
            reason = EXCLUDED_DUPLICATE
        if reason is None and item.id <= request.cleared_through_id:
            reason = EXCLUDED_CLEARED  # after the rules: an own output stays `own_output`, whatever was cleared
        if reason is None and item.id <= summarised_through_id:
            reason = EXCLUDED_SUMMARISED  # the injected summary carries it
        if reason is not None:
            excluded[item.id] = _excluded(item, reason)
            continue
        if item.message_id:
            seen_messages.add(item.message_id)
        eligible.append(item)
    return eligible


def _selected(item: CandidateItem) -> SelectedItem:
    return SelectedItem(
        id=item.id,
        item_type=item.item_type,
        source=item.source,
        text=item.text,
        chars=item.chars,
        truncated=item.truncated,
        pinned=item.pinned,
    )


def _pins_select(
    *, pinned: list[CandidateItem], request: SelectionRequest, excluded: dict[int, ExcludedItem]
) -> list[CandidateItem]:
    """K2: the pins that fit the item limit and the char budget, newest pin first; older pins past that point are
    excluded as `pin_over_budget` (explain names them). A pin overrides the mode rules (a person chose it) but not
    a slash command (which carries nothing) nor being the request itself."""
    kept: list[CandidateItem] = []
    used_chars = 0
    over = False
    for item in sorted(pinned, key=lambda candidate: candidate.pin_order, reverse=True):
        if request.message_id and item.message_id == request.message_id:
            excluded[item.id] = _excluded(item, EXCLUDED_CURRENT_REQUEST)
            continue
        over = over or len(kept) >= request.item_limit or used_chars + item.chars > request.max_chars
        if over:
            excluded[item.id] = _excluded(item, EXCLUDED_PIN_OVER_BUDGET)
            continue
        kept.append(item)
        used_chars += item.chars
    return kept


def _summary_select(
    *,
    summaries: list[CandidateItem],
    request: SelectionRequest,
    excluded: dict[int, ExcludedItem],
    item_limit: int,
    max_chars: int,
) -> CandidateItem | None:
    """K3: the newest summary, when this bot may carry it and it fits what the pins left; older ones are
    superseded (the newest covers what they covered). A summary that does not fit covers nothing."""
    if not summaries:
        return None
    newest, *older = sorted(summaries, key=lambda item: item.id, reverse=True)
    for item in older:
        excluded[item.id] = _excluded(item, EXCLUDED_SUPERSEDED)
    reason = None
    if request.is_slash_command:
        reason = EXCLUDED_SLASH_COMMAND
    elif not request.thread_context_enabled or newest.bridge_id != request.bridge_id:
        reason = EXCLUDED_NOT_IN_MODE
    elif newest.id <= request.cleared_through_id:
        reason = EXCLUDED_CLEARED
    elif item_limit < 1:
        reason = EXCLUDED_ITEM_LIMIT
    elif newest.chars > max_chars:
        reason = EXCLUDED_CHAR_BUDGET
    if reason is not None:
        excluded[newest.id] = _excluded(newest, reason)
        return None
    return newest


def _trim_to_limits(
    *,
    eligible_newest_first: list[CandidateItem],
    item_limit: int,
    max_chars: int,
    excluded: dict[int, ExcludedItem],
) -> tuple[SelectedItem, ...]:
    """The newest contiguous run that fits both limits, oldest first; the rest go into `excluded`.

    Once one item does not fit, every older one is trimmed with the same reason: the selection stays a suffix.
    """
    kept_newest_first: list[CandidateItem] = []
    used_chars = 0
    trim_reason: str | None = None
    for item in eligible_newest_first:
        if trim_reason is None:
            if len(kept_newest_first) >= item_limit:
                trim_reason = EXCLUDED_ITEM_LIMIT
            elif used_chars + item.chars > max_chars:
                trim_reason = EXCLUDED_CHAR_BUDGET
        if trim_reason is not None:
            excluded[item.id] = _excluded(item, trim_reason)
            continue
        kept_newest_first.append(item)
        used_chars += item.chars
    return tuple(_selected(item) for item in reversed(kept_newest_first))


def _diagnostics(
    *,
    request: SelectionRequest,
    candidate_count: int,
    eligible_count: int,
    selected: tuple[SelectedItem, ...],
    excluded: tuple[ExcludedItem, ...],
    summary: CandidateItem | None,
) -> dict:
    """The counts explain and the decision record show next to the lists."""
    reason_counts: dict[str, int] = {}
    for item in excluded:
        reason_counts[item.reason] = reason_counts.get(item.reason, 0) + 1
    covered = summary.covers_through_id if summary is not None else 0
    trimmed = (EXCLUDED_ITEM_LIMIT, EXCLUDED_CHAR_BUDGET)
    return {
        # K3: the summary carried, what it covers, and the raw items trimmed that no summary covers yet (when there
        # are some, a task after the turn writes a newer summary of them).
        "summary_item_id": summary.id if summary is not None else None,
        "summary_covers_through_id": covered,
        # a newer summary covers what lies between `covered` and the oldest raw item carried (services.summaries)
        "oldest_recent_id": min(
            (item.id for item in selected if not item.pinned and item.item_type != ITEM_SUMMARY), default=None
        ),
        "unsummarised_trimmed_ids": [
            item.id
            for item in excluded
            if item.reason in trimmed and item.item_type != ITEM_SUMMARY and item.id > covered
        ],
        "candidates": candidate_count,
        "eligible": eligible_count,
        "selected": len(selected),
        "excluded": len(excluded),
        "excluded_by_reason": reason_counts,
        "context_chars": len("\n".join(item.line for item in selected)),
        "item_limit": request.item_limit,
        "max_chars": request.max_chars,
        "trimmed_by_item_limit": reason_counts.get(EXCLUDED_ITEM_LIMIT, 0),
        "trimmed_by_char_budget": reason_counts.get(EXCLUDED_CHAR_BUDGET, 0),
        "truncated_item_ids": [item.id for item in selected if item.truncated],
        "pinned_item_ids": [item.id for item in selected if item.pinned],
        "pins_over_budget_ids": [item.id for item in excluded if item.reason == EXCLUDED_PIN_OVER_BUDGET],
        "cleared_through_id": request.cleared_through_id,
        "trimmed_by_clear": reason_counts.get(EXCLUDED_CLEARED, 0),
        "thread_context_enabled": request.thread_context_enabled,
        "is_slash_command": request.is_slash_command,
    }


def select_context(
    *,
    candidates: Iterable[CandidateItem],
    request: SelectionRequest,
    chat_id: str = "",
    root_msg_id: str = "",
    request_text: str = "",
    target_id: str = "",
) -> ContextPackage:
    """Choose the context for one request. Deterministic: same candidates and request, same package.

    Pinned items come first (oldest pin's item first), then the newest summary (K3), then the newest raw items
    within what the pins and the summary left of the item limit and the char budget.
    """
    ordered = sorted(candidates, key=lambda item: item.id)
    excluded: dict[int, ExcludedItem] = {}
    pinned = [item for item in ordered if item.pinned] if not request.is_slash_command else []
    pins = _pins_select(pinned=pinned, request=request, excluded=excluded)
    pinned_ids = {item.id for item in pinned}
    seen_messages = {item.message_id for item in pins if item.message_id}
    rest = [item for item in ordered if item.id not in pinned_ids and item.item_type != ITEM_SUMMARY]
    item_limit = max(0, request.item_limit - len(pins))
    max_chars = max(0, request.max_chars - sum(item.chars for item in pins))
    summaries = [item for item in ordered if item.id not in pinned_ids and item.item_type == ITEM_SUMMARY]
    summary = _summary_select(
        summaries=summaries, request=request, excluded=excluded, item_limit=item_limit, max_chars=max_chars
    )
    if summary is not None:
        item_limit, max_chars = item_limit - 1, max_chars - summary.chars
    eligible = _eligible_newest_first(
        ordered=rest,
        request=request,
        excluded=excluded,
        seen_messages=seen_messages,
        summarised_through_id=summary.covers_through_id if summary is not None else 0,
    )
    selected = (
        tuple(_selected(item) for item in sorted(pins, key=lambda item: item.id))
        + tuple(_selected(item) for item in ([summary] if summary is not None else []))
        + _trim_to_limits(eligible_newest_first=eligible, item_limit=item_limit, max_chars=max_chars, excluded=excluded)
    )
    excluded_items = tuple(excluded[item_id] for item_id in sorted(excluded))
    return ContextPackage(
        chat_id=chat_id,
        root_msg_id=root_msg_id,
        message_id=request.message_id,
        bridge_id=request.bridge_id,
        bot_profile=request.bot_profile,
        mode=request.mode,
        request_text=request_text,
        is_slash_command=request.is_slash_command,
        selected=selected,
        excluded=excluded_items,
        diagnostics=_diagnostics(
            request=request,
            candidate_count=len(ordered),
            eligible_count=len(eligible) + len(pins),
            selected=selected,
            excluded=excluded_items,
            summary=summary,
        ),
        target_id=target_id,
    )
