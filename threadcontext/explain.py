"""Explain output (seed 002 "最小 Explain CLI", ARCHITECTURE C12): one decision as terminal text and as a dict.

The CLI prints `decision_explain_text`; the API and the admin page show `decision_explain_data`. Both read the
decision row, so a decision still explains itself after retention removed its items, plus one bounded query for
the messages of its timeline their senders recalled (G7), so explain says why they are not there.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent
from threadcontext.services.edits import EDITED_KEY, PREVIOUS_CHARS_KEY
from threadcontext.services.recall import RECALLED_KEY
from threadcontext.trimming import text_preview

PREVIEW_WIDTH = 60
RECALLED_LIMIT = 20


def _recalled(decision: ThreadContextDecision) -> list[dict]:
    """The timeline's recalled messages (newest first, bounded), each before or after this decision."""
    rows = (
        ThreadEvent.objects.filter(
            chat_id=decision.chat_id, root_msg_id=decision.root_msg_id, metadata__has_key=RECALLED_KEY
        )
        .order_by("-id")
        .values_list("message_id", "metadata")[: RECALLED_LIMIT * 4]
    )
    seen: dict[str, dict] = {}
    for message_id, metadata in rows:
        if message_id in seen or len(seen) >= RECALLED_LIMIT:
            continue
        recalled_at = str((metadata or {}).get(RECALLED_KEY, ""))
        try:
            before = decision.created_at is not None and datetime.fromisoformat(recalled_at) <= decision.created_at
        except ValueError:
            before = False
        seen[message_id] = {"message_id": message_id, "recalled_at": recalled_at, "before_decision": before}
    return list(seen.values())


def _edited(decision: ThreadContextDecision) -> list[dict]:
    """The decision's items (selected or excluded) whose message was edited (O6): when, and how long the earlier
    text was (the earlier text itself is not kept). Bounded by the decision's own items."""
    excluded = [item.get("id") for item in decision.excluded or [] if isinstance(item, dict)]
    item_ids = [*(decision.selected_item_ids or []), *(pk for pk in excluded if isinstance(pk, int))]
    rows = (
        ThreadContextItem.objects.filter(pk__in=item_ids, metadata__has_key=EDITED_KEY)
        .order_by("id")
        .values_list("message_id", "metadata")
    )
    return [
        {
            "message_id": message_id,
            "edited_at": str((metadata or {}).get(EDITED_KEY, "")),
            "previous_text_chars": int((metadata or {}).get(PREVIOUS_CHARS_KEY, 0) or 0),
        }
        for message_id, metadata in rows
    ]


# Said next to the mode when shared thread context is off: which setting wins, and where to change it.
MODE_NOT_APPLIED = (
    " (not applied: shared thread context is off, and that wins; turn it on in the admin's workspace page,"
    " 'Shared thread enabled', or hub-wide with AMUX_FEISHU_SHARED_THREAD_ENABLED)"
)
# The decision's diagnostics key a discuss turn's transcript is listed under (feishu.channel.discuss_context).
DISCUSS_TRANSCRIPT_KEY = "discuss_transcript"


def decision_explain_data(*, decision: ThreadContextDecision) -> dict:
    diagnostics = decision.diagnostics or {}
    return {
        "decision_id": decision.pk,
        "profile": decision.bot_profile,
        "bridge_id": decision.bridge_id,
        "chat_id": decision.chat_id,
        "root_msg_id": decision.root_msg_id,
        "message_id": decision.message_id,
        "target_id": decision.target_id,
        "mode": decision.workspace_mode,
        "request_text": decision.request_text,
        "context_chars": diagnostics.get("context_chars", len(decision.thread_context)),
        "prompt_chars": diagnostics.get("prompt_chars", len(decision.prompt_preview)),
        "selected_item_ids": list(decision.selected_item_ids or []),
        "selected": list(diagnostics.get("selected_items", [])),
        "excluded": list(decision.excluded or []),
        "diagnostics": {key: value for key, value in diagnostics.items() if key != "selected_items"},
        "recalled": _recalled(decision),
        "edited": _edited(decision),
        "thread_context": decision.thread_context,
        "prompt_preview": decision.prompt_preview,
        "created_at": decision.created_at.isoformat() if decision.created_at else None,
    }


def display_width(text: str) -> int:
    """Terminal columns: CJK wide and fullwidth characters take two, so Chinese sources and previews line up."""
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def text_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [display_width(header) for header in headers]
    for row in rows:
        widths = [max(width, display_width(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: list[str]) -> str:
        padded = (cell + " " * (width - display_width(cell)) for cell, width in zip(cells, widths, strict=True))
        return "  ".join(padded).rstrip()

    return [line(headers), line(["-" * width for width in widths])] + [line(row) for row in rows]


def _steering_lines(diagnostics: dict) -> list[str]:
    """What steered the selection: a clear, pins over the budget, a summary, the setting, a discuss transcript."""
    lines: list[str] = []
    if diagnostics.get("cleared_through_id"):
        lines.append(
            f"cleared:       /context clear: items up to {diagnostics['cleared_through_id']} are left out "
            f"({diagnostics.get('trimmed_by_clear', 0)} here)"
        )
    if diagnostics.get("pins_over_budget_ids"):
        left_out = ", ".join(str(item_id) for item_id in diagnostics["pins_over_budget_ids"])
        lines.append(f"pins:          over the budget, the newest pins won; left out: {left_out}")
    if diagnostics.get("summary_item_id"):
        lines.append(
            f"summary:       item {diagnostics['summary_item_id']} carried, covering items up to "
            f"{diagnostics.get('summary_covers_through_id', '?')} (those are left out as summarised)"
        )
    if diagnostics.get("summary_note"):
        lines.append(f"summary:       none will be written: {diagnostics['summary_note']}")
    if diagnostics.get("is_slash_command"):
        lines.append("note:          slash command: no context is carried")
    elif diagnostics.get("thread_context_enabled") is False:
        lines.append("note:          shared thread context is disabled for this workspace")
    transcript = diagnostics.get(DISCUSS_TRANSCRIPT_KEY) or []
    if transcript:
        # O5: a discuss turn gets the conversation its judge saw whatever the setting above says.
        lines += ["", f"discuss transcript ({len(transcript)} lines, what the judge saw; always given):"]
        lines += [f"  {text_preview(line, 200)}" for line in transcript]
    return lines


def _items_lines(title: str, items: list[dict], *, selected: bool) -> list[str]:
    lines = ["", f"{title} ({len(items)}):"]
    if not items:
        return [*lines, "(none)"]
    rows = [
        [
            str(item["id"]),
            item["item_type"],
            item["source"] + (" (truncated)" if selected and item.get("truncated") else ""),
            item.get("reason", "recent") if selected else item["reason"],
            str(item["chars"]),
            text_preview(item["preview"], PREVIEW_WIDTH),
        ]
        for item in items
    ]
    return lines + text_table(["id", "type", "source", "reason", "chars", "preview"], rows)


def decision_explain_text(*, decision: ThreadContextDecision, verbose: bool = False) -> str:
    data = decision_explain_data(decision=decision)
    diagnostics = data["diagnostics"]
    lines = [
        f"profile:       {data['profile']}",
        f"bridge_id:     {data['bridge_id']}",
        f"decision_id:   {data['decision_id']}",
        f"root_msg_id:   {data['root_msg_id']}",
        f"message_id:    {data['message_id']}",
        f"mode:          {data['mode']}"
        + (MODE_NOT_APPLIED if diagnostics.get("thread_context_enabled") is False else ""),
        f"request_text:  {text_preview(data['request_text'], 200)}",
        f"context chars: {data['context_chars']}",
        f"prompt chars:  {data['prompt_chars']}",
        (
            f"trimmed:       item_limit={diagnostics.get('trimmed_by_item_limit', 0)} "
            f"(limit {diagnostics.get('item_limit', '?')}), "
            f"char_budget={diagnostics.get('trimmed_by_char_budget', 0)} (budget {diagnostics.get('max_chars', '?')})"
        ),
    ]
    lines += _steering_lines(diagnostics)
    lines += _items_lines("selected items", data["selected"], selected=True)
    lines += _items_lines("excluded items", data["excluded"], selected=False)
    for recalled in data["recalled"]:
        when = "before this decision" if recalled["before_decision"] else "after this decision (later ones skip it)"
        lines.append(f"recalled {recalled['message_id']}: removed from thread context {when}")
    for edited in data["edited"]:
        lines.append(
            f"edited {edited['message_id']}: edited at {edited['edited_at']}"
            f" (the earlier text had {edited['previous_text_chars']} characters)"
        )
    if verbose:
        lines += ["", "thread context:", data["thread_context"] or "(empty)", "", "prompt preview:"]
        lines.append(data["prompt_preview"] or "(empty)")
    return "\n".join(lines) + "\n"
