"""Fixtures for thread-context tests: two bots (Planner, Coder) in one shared workspace group."""

from __future__ import annotations

import itertools

import pytest

from threadcontext.models import Workspace
from threadcontext.services import InboundMessage, Mention
from threadcontext.services.retention import prune_clock_reset

CHAT_ID = "oc_workspace_chat"
ROOT_ID = "om_root"
OWNER_OPEN_ID = "ou_owner"

PLANNER = {"bot_profile": "planner", "bridge_id": "cli_planner"}
CODER = {"bot_profile": "coder", "bridge_id": "cli_coder"}

_message_numbers = itertools.count(1)


def next_message_id() -> str:
    return f"om_msg_{next(_message_numbers)}"


@pytest.fixture(autouse=True)
def _fresh_prune_clock():
    prune_clock_reset()
    yield
    prune_clock_reset()


def workspace_create(bot: dict, *, mode: str = Workspace.Mode.SHARED, **overrides) -> Workspace:
    values = {
        "bot_profile": bot["bot_profile"],
        "chat_id": CHAT_ID,
        "name": "Workspace",
        "mode": mode,
        "owner_open_id": OWNER_OPEN_ID,
        "shared_thread_enabled": True,
    }
    values.update(overrides)
    return Workspace.objects.create(**values)


def inbound(
    bot: dict,
    text: str,
    *,
    message_id: str | None = None,
    root_msg_id: str = ROOT_ID,
    addressed: bool = False,
    sender_id: str = "ou_alice",
    sender_name: str = "Alice",
    **overrides,
) -> InboundMessage:
    """An inbound group message as `bot`'s bridge would classify it; `addressed` adds @bot to the text."""
    mentions: tuple[Mention, ...] = ()
    if addressed:
        text = f"@_user_1 {text}"
        mentions = (
            Mention(key="@_user_1", open_id=f"ou_{bot['bot_profile']}", name=bot["bot_profile"], is_this_bot=True),
        )
    values = {
        "chat_id": CHAT_ID,
        "message_id": message_id or next_message_id(),
        "root_msg_id": root_msg_id,
        "bridge_id": bot["bridge_id"],
        "bot_profile": bot["bot_profile"],
        "text": text,
        "sender_id": sender_id,
        "sender_name": sender_name,
        "mentions": mentions,
        "is_this_bot_addressed": addressed,
    }
    values.update(overrides)
    return InboundMessage(**values)
