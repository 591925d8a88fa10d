"""K3: summary items of long conversations (ARCHITECTURE §11.4). What a summary covers and its record.

A turn's decision lists the raw items it trimmed that no summary covers yet (`unsummarised_trimmed_ids`); after
the turn a task (feishu.summaries) asks a model to summarise them, together with the conversation's newest summary
if there is one, and records the result here as one item of type `summary`: the selector injects the newest summary
before the newest raw items and leaves out the raw items it covers (`summarised`). Nothing is deleted; a summary
whose call fails is simply never written.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent
from threadcontext.selection_types import SUMMARY_COVERS_KEY, SUMMARY_COVERS_THROUGH_KEY

logger = logging.getLogger(__name__)

# What one summary request may carry: each item cut at ITEM_CHARS, all of them at INPUT_CHARS (oldest dropped).
SUMMARY_ITEM_CHARS = 2000
SUMMARY_INPUT_CHARS = 40000
SUMMARY_SOURCES_LISTED = 20
# The oldest trimmed items one summary takes in (the next turn's summary takes the rest).
SUMMARY_ITEMS_PER_RUN = 100


@dataclass(frozen=True)
class SummarySource:
    """What a new summary covers: the previous summary (its text and ids) and the newer trimmed items."""

    bridge_id: str
    bot_profile: str
    chat_id: str
    root_msg_id: str
    previous_text: str
    previous_covers: tuple[int, ...]
    items: tuple[tuple[int, str, str], ...]  # (id, source, text), oldest first

    @property
    def covers(self) -> list[int]:
        return sorted({*self.previous_covers, *(item_id for item_id, _, _ in self.items)})

    @property
    def input_text(self) -> str:
        """The model's input: the earlier summary first, then each new item as `#id source: text`."""
        lines = [f"Earlier summary:\n{self.previous_text}\n"] if self.previous_text else []
        lines += [f"#{item_id} {source}: {text[:SUMMARY_ITEM_CHARS]}" for item_id, source, text in self.items]
        body = "\n".join(lines)
        return body[-SUMMARY_INPUT_CHARS:]


def _newest_summary(*, bridge_id: str, chat_id: str, root_msg_id: str) -> ThreadContextItem | None:
    return (
        ThreadContextItem.objects.filter(
            chat_id=chat_id, root_msg_id=root_msg_id, item_type=ThreadContextItem.ItemType.SUMMARY, bridge_id=bridge_id
        )
        .order_by("-id")
        .first()
    )


def _eligible_raw(*, bridge_id: str, mode: str) -> Q:
    """The raw items the selector may carry for this bot (its collected roots and, in shared mode, messages; other
    bots' outputs): what a summary may cover. Not its own outputs (never fed back), not other bridges' copies."""
    own = [ThreadContextItem.ItemType.TOPIC_ROOT]
    if mode != "owner_only":
        own.append(ThreadContextItem.ItemType.HUMAN_MESSAGE)
    return Q(bridge_id=bridge_id, item_type__in=own) | (
        Q(item_type=ThreadContextItem.ItemType.AGENT_OUTPUT) & ~Q(bridge_id=bridge_id)
    )


def summary_source_for_decision(*, decision_id: int) -> SummarySource | None:
    """What a summary after this decision's turn would cover; None when there is nothing new to summarise (a
    re-run of the task finds its items covered by the summary it wrote: no second summary).

    It covers the oldest raw items this bot may carry after the newest summary's coverage (and any clear), up to the
    oldest raw item the decision carried: every trimmed one, also those older than the selector's bounded read."""
    decision = ThreadContextDecision.objects.filter(pk=decision_id).first()
    if decision is None:
        return None
    diagnostics = decision.diagnostics or {}
    trimmed = [int(item_id) for item_id in diagnostics.get("unsummarised_trimmed_ids") or []]
    if not trimmed:
        return None
    previous = _newest_summary(bridge_id=decision.bridge_id, chat_id=decision.chat_id, root_msg_id=decision.root_msg_id)
    previous_meta = previous.metadata if previous is not None else {}
    after = max(
        int(previous_meta.get(SUMMARY_COVERS_THROUGH_KEY) or 0), int(diagnostics.get("cleared_through_id") or 0)
    )
    before = int(diagnostics.get("oldest_recent_id") or max(trimmed) + 1)
    rows = (
        ThreadContextItem.objects.filter(
            _eligible_raw(bridge_id=decision.bridge_id, mode=decision.workspace_mode),
            chat_id=decision.chat_id,
            root_msg_id=decision.root_msg_id,
            id__gt=after,
            id__lt=before,
        )
        .order_by("id")
        .values_list("id", "author_label", "bridge_id", "text")[:SUMMARY_ITEMS_PER_RUN]
    )
    items = tuple((item_id, label or bridge, text) for item_id, label, bridge, text in rows)
    if not items:
        return None
    return SummarySource(
        bridge_id=decision.bridge_id,
        bot_profile=decision.bot_profile,
        chat_id=decision.chat_id,
        root_msg_id=decision.root_msg_id,
        previous_text=previous.text if previous is not None else "",
        previous_covers=tuple(int(item_id) for item_id in previous_meta.get(SUMMARY_COVERS_KEY) or []),
        items=items,
    )


def context_summary_record(
    *,
    source: SummarySource,
    summary: str,
    model_name: str,
    input_tokens: int,
    output_tokens: int,
    provider_name: str = "",
) -> ThreadContextItem:
    """Store one summary (an event and its item, like any context): untrusted background, its sources listed."""
    covers = source.covers
    listed = ", ".join(f"#{item_id} {label}" for item_id, label, _ in source.items[-SUMMARY_SOURCES_LISTED:])
    text = f"(summary of {len(covers)} earlier messages; sources: {listed})\n{summary}"
    metadata = {
        SUMMARY_COVERS_KEY: covers,
        SUMMARY_COVERS_THROUGH_KEY: max(covers),
        "model": model_name,
        "provider": provider_name,  # with the model's name, what prices the summary (console.dashboard.costs)
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
    }
    with transaction.atomic():
        event = ThreadEvent.objects.create(
            source="summary",
            chat_id=source.chat_id,
            root_msg_id=source.root_msg_id,
            message_id=f"summary-{uuid.uuid4().hex}",
            event_type=ThreadEvent.EventType.SUMMARY,
            actor_type="app",
            bridge_id=source.bridge_id,
            bot_profile=source.bot_profile,
            text=text,
            metadata=metadata,
        )
        item = ThreadContextItem.objects.create(
            event=event,
            chat_id=source.chat_id,
            root_msg_id=source.root_msg_id,
            bridge_id=source.bridge_id,
            item_type=ThreadContextItem.ItemType.SUMMARY,
            author_label="summary",
            text=text,
            token_estimate=len(text) // 4,
            metadata=metadata,
        )
    logger.info(
        "context summary recorded",
        extra={
            "item": item.pk,
            "bridge_id": source.bridge_id,
            "root_msg_id": source.root_msg_id,
            "covers": len(covers),
        },
    )
    return item
