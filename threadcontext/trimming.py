"""The context selector's rules and trimming (seed 002 "选择规则", ARCHITECTURE C5): pure functions, no ORM, no LLM.

`threadcontext.selectors.context_package_build` loads one thread's candidates from the store and calls this.

`select_context` takes candidate items (any order), the current bot's identity, the workspace mode and the two
limits, and returns a `ContextPackage`: the selected items oldest to newest with their source labels, every
candidate it did not select with one reason from `EXCLUSION_REASONS`, and diagnostics.

Trimming is stable: the selection is always a contiguous newest suffix of the eligible items, in write order,
that fits both the item limit and the character budget; an item older than one that did not fit is never
selected, even when it alone would fit (otherwise adding one new message could resurrect an old one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

MODE_SHARED = "shared"
MODE_OWNER_ONLY = "owner_only"

ITEM_TOPIC_ROOT = "topic_root"
ITEM_HUMAN_MESSAGE = "human_message"
ITEM_AGENT_OUTPUT = "agent_output"

# Why a candidate was not selected. The explain CLI, API and admin page show these verbatim.
EXCLUDED_OWN_OUTPUT = "own_output"  # an agent_output of the current bot (bridge_id): no self-feedback
EXCLUDED_ITEM_LIMIT = "item_limit"  # older than the newest `item_limit` eligible items
EXCLUDED_CHAR_BUDGET = "char_budget"  # did not fit (or is older than one that did not fit) the char budget
EXCLUDED_NOT_IN_MODE = "not_in_mode"  # the workspace mode (or a disabled thread context) does not inject it
EXCLUDED_SLASH_COMMAND = "slash_command"  # the request is a slash command: it carries no context
# Two more, both rare: the current request's own message (e.g. a topic root that is itself the @ request), and
# a second item for a Feishu message already selected under another type (a bot-sent topic root that is also
# that bot's recorded agent_output).
EXCLUDED_CURRENT_REQUEST = "current_request"
EXCLUDED_DUPLICATE = "duplicate"
# Issue 25: `/context clear` excluded it (it stays stored; explain shows it); pins alone were over the budget and
# this pin is older than the ones that fit (K2: the newest pins win).
EXCLUDED_CLEARED = "cleared"
EXCLUDED_PIN_OVER_BUDGET = "pin_over_budget"
# Why a selected item was selected when it is not simply among the newest: a person pinned it (K2).
SELECTED_PINNED = "pinned"
SELECTED_RECENT = "recent"

EXCLUSION_REASONS = (
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_CHAR_BUDGET,
    EXCLUDED_NOT_IN_MODE,
    EXCLUDED_SLASH_COMMAND,
    EXCLUDED_CURRENT_REQUEST,
    EXCLUDED_DUPLICATE,
    EXCLUDED_CLEARED,
    EXCLUDED_PIN_OVER_BUDGET,
)

PREVIEW_CHARS = 80


@dataclass(frozen=True)
class CandidateItem:
    """One stored context item as the selector sees it (a plain copy of a ThreadContextItem row)."""

    id: int
    item_type: str
    bridge_id: str
    message_id: str
    author_label: str
    text: str
    truncated: bool = False
    # The pin's id when a person pinned it for this conversation (newer pins have larger ids), else 0.
    pin_order: int = 0

    @property
    def pinned(self) -> bool:
        return self.pin_order > 0

    @property
    def source(self) -> str:
        """The label the prompt shows in front of the text (seed: `ou_xxx:` or `planner/planner-h5:`)."""
        return self.author_label or self.bridge_id

    @property
    def line(self) -> str:
        return f"{self.source}: {self.text}"

    @property
    def chars(self) -> int:
        # The line plus its newline: what the item costs in the rendered [Feishu thread context].
        return len(self.line) + 1


@dataclass(frozen=True)
class SelectedItem:
    id: int
    item_type: str
    source: str
    text: str
    chars: int
    truncated: bool
    pinned: bool = False

    @property
    def reason(self) -> str:
        return SELECTED_PINNED if self.pinned else SELECTED_RECENT

    @property
    def line(self) -> str:
        return f"{self.source}: {self.text}"

    @property
    def preview(self) -> str:
        return text_preview(self.text)


@dataclass(frozen=True)
class ExcludedItem:
    id: int
    item_type: str
    source: str
    reason: str
    chars: int
    preview: str


@dataclass(frozen=True)
class SelectionRequest:
    bridge_id: str
    bot_profile: str
    mode: str = MODE_SHARED
    item_limit: int = 20
    max_chars: int = 24000
    is_slash_command: bool = False
    message_id: str = ""
    # False when the workspace's effective shared_thread_enabled is off: nothing is injected (not_in_mode).
    thread_context_enabled: bool = True
    # `/context clear`: eligible items with an id up to this one are excluded as `cleared` (0: never cleared).
    cleared_through_id: int = 0


@dataclass(frozen=True)
class ContextPackage:
    """What the selector chose for one request, and why; the renderer and the decision record consume it."""

    chat_id: str
    root_msg_id: str
    message_id: str
    bridge_id: str
    bot_profile: str
    mode: str
    request_text: str
    is_slash_command: bool
    selected: tuple[SelectedItem, ...] = ()
    excluded: tuple[ExcludedItem, ...] = ()
    diagnostics: dict = field(default_factory=dict)
    target_id: str = ""

    @property
    def thread_context(self) -> str:
        """The `[Feishu thread context]` body: one labelled line per selected item, oldest first."""
        return "\n".join(item.line for item in self.selected)

    @property
    def holds_topic_root(self) -> bool:
        return any(item.item_type == ITEM_TOPIC_ROOT for item in self.selected)


def text_preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


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
) -> dict:
    """The counts explain and the decision record show next to the lists."""
    reason_counts: dict[str, int] = {}
    for item in excluded:
        reason_counts[item.reason] = reason_counts.get(item.reason, 0) + 1
    return {
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

    Pinned items come first (oldest pin's item first), then the newest raw items within what the pins left of
    the item limit and the char budget.
    """
    ordered = sorted(candidates, key=lambda item: item.id)
    excluded: dict[int, ExcludedItem] = {}
    pinned = [item for item in ordered if item.pinned] if not request.is_slash_command else []
    pins = _pins_select(pinned=pinned, request=request, excluded=excluded)
    pinned_ids = {item.id for item in pinned}
    seen_messages = {item.message_id for item in pins if item.message_id}
    rest = [item for item in ordered if item.id not in pinned_ids]
    eligible = _eligible_newest_first(ordered=rest, request=request, excluded=excluded, seen_messages=seen_messages)
    selected = tuple(_selected(item) for item in sorted(pins, key=lambda item: item.id)) + _trim_to_limits(
        eligible_newest_first=eligible,
        item_limit=max(0, request.item_limit - len(pins)),
        max_chars=max(0, request.max_chars - sum(item.chars for item in pins)),
        excluded=excluded,
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
        ),
        target_id=target_id,
    )
