"""The selector's vocabulary (seed 002, ARCHITECTURE C5, §11.4): item types, reasons, and the plain values the
pure selector (`threadcontext.trimming`) takes and returns. Split from trimming.py to keep each module small;
trimming re-exports every name, so callers import them from either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODE_SHARED = "shared"
MODE_OWNER_ONLY = "owner_only"

ITEM_TOPIC_ROOT = "topic_root"
ITEM_HUMAN_MESSAGE = "human_message"
ITEM_AGENT_OUTPUT = "agent_output"
# K3: a summary of the conversation's oldest trimmed items, written by a task after a turn (never by a person).
ITEM_SUMMARY = "summary"
# A summary item's metadata: the newest item id it covers, the ids it covers, the sources it names.
SUMMARY_COVERS_THROUGH_KEY = "covers_through_id"
SUMMARY_COVERS_KEY = "covers"

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
# K3: raw items the injected summary covers (they are in it), and older summaries the newest one replaces.
EXCLUDED_SUMMARISED = "summarised"
EXCLUDED_SUPERSEDED = "superseded"
SELECTED_PINNED = "pinned"
SELECTED_SUMMARY = "summary"
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
    EXCLUDED_SUMMARISED,
    EXCLUDED_SUPERSEDED,
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
    # A summary item: the newest item id it covers (every item it covers is at or below it), else 0.
    covers_through_id: int = 0

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
        if self.pinned:
            return SELECTED_PINNED
        return SELECTED_SUMMARY if self.item_type == ITEM_SUMMARY else SELECTED_RECENT

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
