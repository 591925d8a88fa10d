"""Group-chat scenarios driven through the real services, as the bridge and the turn call them.

Every bot in the group receives every message on its own bridge: `post` records it once per bot (addressed only
for the @ target), `turn` is what happens on an @ (record, then select/render/decide), `answer` records the final
output of a round. `hub_restart` drops the DB connection and reloads the thread-context modules so that nothing
kept in process memory can help the next step.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from dataclasses import dataclass

from django.db import connections

from tests.threadcontext.conftest import CHAT_ID, ROOT_ID
from threadcontext.models import Workspace
from threadcontext.services import InboundMessage, Mention

_ids = itertools.count(1)

THREADCONTEXT_MODULES = [
    "threadcontext.trimming",
    "threadcontext.rendering",
    "threadcontext.selectors",
    "threadcontext.services.retention",
    "threadcontext.services.event_store",
    "threadcontext.services.collection",
    "threadcontext.services.decisions",
    "threadcontext.services.sessions",
    "threadcontext.services.prompting",
    "threadcontext.services",
]


@dataclass(frozen=True)
class Bot:
    bot_profile: str
    bridge_id: str
    open_id: str
    name: str


PLANNER = Bot("planner", "cli_planner", "ou_bot_planner", "Planner")
CODER = Bot("coder", "cli_coder", "ou_bot_coder", "Coder")
REVIEWER = Bot("reviewer", "cli_reviewer", "ou_bot_reviewer", "Reviewer")


def services():
    return importlib.import_module("threadcontext.services")


def selectors():
    return importlib.import_module("threadcontext.selectors")


def hub_restart() -> None:
    connections.close_all()
    for name in THREADCONTEXT_MODULES:
        importlib.reload(sys.modules[name])


def workspace_for(bot: Bot, **overrides) -> Workspace:
    values = {"mode": Workspace.Mode.SHARED, "owner_open_id": "ou_owner", "shared_thread_enabled": True}
    values.update(overrides)
    workspace, _ = Workspace.objects.update_or_create(bot_profile=bot.bot_profile, chat_id=CHAT_ID, defaults=values)
    return workspace


def message_id_new() -> str:
    return f"om_flow_{next(_ids)}"


def post(
    text: str,
    *,
    bots: list[Bot],
    to: Bot | None = None,
    message_id: str | None = None,
    root_msg_id: str = ROOT_ID,
    sender_id: str = "ou_alice",
    sender_name: str = "Alice",
    chat_type: str = "group",
    chat_id: str = CHAT_ID,
    message_type: str = "text",
) -> dict:
    """A person posts in the group; each bot's bridge records it. Returns {bot_profile: RecordOutcome}."""
    message_id = message_id or message_id_new()
    outcomes = {}
    for bot in bots:
        mentions = ()
        body = text
        if to is not None:
            body = f"@_user_1 {text}"
            mentions = (Mention(key="@_user_1", open_id=to.open_id, name=to.name, is_this_bot=to == bot),)
        message = InboundMessage(
            chat_id=chat_id,
            chat_type=chat_type,
            message_id=message_id,
            root_msg_id=root_msg_id,
            bridge_id=bot.bridge_id,
            bot_profile=bot.bot_profile,
            text=body,
            sender_id=sender_id,
            sender_name=sender_name,
            mentions=mentions,
            message_type=message_type,
            is_this_bot_addressed=to == bot,
        )
        workspace = selectors().workspace_get(bot_profile=bot.bot_profile, chat_id=chat_id)
        outcomes[bot.bot_profile] = services().thread_event_record_inbound(message=message, workspace=workspace)
    return outcomes


def turn(
    text: str,
    *,
    to: Bot,
    bots: list[Bot],
    sender_id: str = "ou_alice",
    root_msg_id: str = ROOT_ID,
    is_slash_command: bool = False,
    topic_root_prompt_delivered: bool = True,
):
    """Someone @s `to`: every bridge records the message, then `to`'s turn prepares its prompt (None: no trigger)."""
    message_id = message_id_new()
    if is_slash_command:
        outcome = None
    else:
        outcome = post(text, bots=bots, to=to, message_id=message_id, sender_id=sender_id, root_msg_id=root_msg_id)[
            to.bot_profile
        ]
        if not outcome.triggers_selector:
            return None
    return services().context_prompt_prepare(
        request=services().ContextRequest(
            workspace=selectors().workspace_get(bot_profile=to.bot_profile, chat_id=CHAT_ID),
            bridge_id=to.bridge_id,
            bot_profile=to.bot_profile,
            chat_id=CHAT_ID,
            root_msg_id=root_msg_id,
            message_id=message_id,
            request_text=outcome.request_text if outcome else text,
            is_slash_command=is_slash_command,
        ),
        topic_root_prompt_delivered=topic_root_prompt_delivered,
    )


def answer(bot: Bot, text: str, *, session_name: str = "", root_msg_id: str = ROOT_ID) -> str:
    message_id = message_id_new()
    services().thread_event_record_agent_output(
        bridge_id=bot.bridge_id,
        bot_profile=bot.bot_profile,
        chat_id=CHAT_ID,
        root_msg_id=root_msg_id,
        message_id=message_id,
        text=text,
        session_name=session_name or f"{bot.bot_profile}-session",
    )
    return message_id
