"""Decision records (seed 002 thread_context_decisions, ARCHITECTURE C11): every selection, with its prompt."""

from __future__ import annotations

import logging
from dataclasses import asdict

from threadcontext.models import ThreadContextDecision
from threadcontext.trimming import ContextPackage

logger = logging.getLogger(__name__)


def context_decision_record(*, package: ContextPackage, prompt_preview: str) -> ThreadContextDecision:
    """Store what was selected, what was not and why, the diagnostics and the prompt as rendered.

    The selected items' source, type, chars, preview and truncation are copied into the diagnostics, so explain
    still reads a decision whose items retention has since removed.
    """
    thread_context = package.thread_context
    diagnostics = {
        **package.diagnostics,
        "context_chars": len(thread_context),
        "prompt_chars": len(prompt_preview),
        "selected_items": [
            {
                "id": item.id,
                "item_type": item.item_type,
                "source": item.source,
                "chars": item.chars,
                "preview": item.preview,
                "truncated": item.truncated,
                # K2: "pinned" (a person pinned it) or "recent" (among the newest that fit)
                "reason": item.reason,
            }
            for item in package.selected
        ],
    }
    decision = ThreadContextDecision.objects.create(
        chat_id=package.chat_id,
        root_msg_id=package.root_msg_id,
        message_id=package.message_id,
        bridge_id=package.bridge_id,
        bot_profile=package.bot_profile,
        target_id=package.target_id,
        workspace_mode=package.mode,
        request_text=package.request_text,
        thread_context=thread_context,
        selected_item_ids=[item.id for item in package.selected],
        excluded=[asdict(item) for item in package.excluded],
        prompt_preview=prompt_preview,
        diagnostics=diagnostics,
    )
    logger.info(
        "context decision recorded",
        extra={
            "decision_id": decision.pk,
            "bridge_id": package.bridge_id,
            "root_msg_id": package.root_msg_id,
            "selected": len(package.selected),
            "excluded": len(package.excluded),
        },
    )
    return decision
