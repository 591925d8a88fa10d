"""The collector (seed 002 "采集规则", ARCHITECTURE C2-C4, C6): what the Feishu bridge and the turn record.

The bridge fills an `InboundMessage` per Feishu message and calls `thread_event_record_inbound`; the turn calls
`thread_event_record_agent_output` with each round's final aggregated output. Every write goes through
`event_store.thread_event_insert_once`, idempotent on the (bridge_id, message_id, event_type) unique constraint, so
a redelivered Feishu event or a re-run task never records twice.

What is never collected (C3) is refused here by type and flag, not left to the caller's discipline: DMs, the bot's
own echoed messages, non-message payloads (reactions, streaming chunks, tool activity, permission cards) and
slash commands. No raw payload or header reaches this module (the dataclass has no field for one), and the
caller's known secrets are redacted from any text before it is stored.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from core.redaction import redacted
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace
from threadcontext.services.event_store import thread_event_insert_once
from threadcontext.services.retention import thread_context_prune_if_due

logger = logging.getLogger(__name__)

CHAT_TYPE_GROUP = "group"
CHAT_TYPE_P2P = "p2p"

SENDER_USER = "user"
SENDER_APP = "app"
SENDER_BOT = "bot"

# Feishu message types whose text is collected; anything else the bridge passes (reaction, stream_chunk,
# tool_activity, permission, interactive cards: a bot's card is its own bridge's agent_output) is refused.
# Images, files, audio, video, stickers and forwards are collected as the label the bridge's parser puts in their
# text (`[image]`, `[file: report.pdf]`), never a body (G7, seed 002).
COLLECTED_MESSAGE_TYPES = frozenset({"text", "post", "image", "file", "audio", "media", "sticker", "merge_forward"})

# Why an inbound message recorded nothing (RecordOutcome.skipped_reason).
SKIP_DIRECT_MESSAGE = "direct_message"
SKIP_OWN_ECHO = "own_echo"
SKIP_NOT_COLLECTED_TYPE = "not_collected_type"
SKIP_NO_WORKSPACE = "no_workspace"
SKIP_SLASH_COMMAND = "slash_command"
SKIP_OWNER_ONLY_DISCUSSION = "owner_only_discussion"
SKIP_NOT_OWNER = "not_owner"
SKIP_NOT_HUMAN = "not_human"
SKIP_EMPTY = "empty"

TRUNCATED_KEY = "truncated"

_MENTION_KEY = re.compile(r"(@_user_\d+|@_all)( ?)")


@dataclass(frozen=True)
class Mention:
    """One Feishu mention: `key` is the placeholder in the text (`@_user_1`), `is_this_bot` marks the receiving bot."""

    key: str
    open_id: str = ""
    name: str = ""
    is_this_bot: bool = False


@dataclass(frozen=True)
class InboundMessage:
    """A Feishu message as the bridge parsed and classified it; everything the collector needs, nothing more."""

    chat_id: str
    message_id: str
    bridge_id: str
    bot_profile: str
    text: str
    chat_type: str = CHAT_TYPE_GROUP
    root_msg_id: str = ""  # empty: the message starts a topic (it is its own root)
    thread_id: str = ""
    parent_id: str = ""
    sender_id: str = ""
    sender_type: str = SENDER_USER
    sender_name: str = ""
    mentions: Sequence[Mention] = ()
    message_type: str = "text"
    is_this_bot_addressed: bool = False
    is_slash_command: bool = False
    is_own_echo: bool = False
    source: str = "feishu"
    # Feishu's create_time, kept for logs; rows are ordered by their id (write order), as the seed's store is.
    created_at: datetime | None = None

    @property
    def effective_root_msg_id(self) -> str:
        return self.root_msg_id or self.message_id

    @property
    def is_topic_root(self) -> bool:
        return self.effective_root_msg_id == self.message_id


@dataclass(frozen=True)
class RecordOutcome:
    """What `thread_event_record_inbound` did. `triggers_selector`: a user_request for this bot was recorded."""

    recorded: tuple[str, ...] = ()  # event types this message now has (new or already there)
    created: tuple[str, ...] = ()  # the subset written by this call
    skipped_reason: str = ""  # a SKIP_* constant: why (part of) the message was not recorded
    request_text: str = ""
    triggers_selector: bool = False
    events: tuple[ThreadEvent, ...] = field(default=(), repr=False)


def normalise_mentions(text: str, mentions: Sequence[Mention]) -> str:
    """C4: strip this bot's @, turn every other mention into `@Name`; no Feishu `@_user_N` key survives.

    Only the removed mention's own trailing space goes with it: indentation and spacing elsewhere (code in a
    message) are kept as written.
    """
    by_key = {mention.key: mention for mention in mentions}

    def replace(match: re.Match[str]) -> str:
        key, space = match.group(1), match.group(2)
        if key == "@_all":
            return "@all" + space
        mention = by_key.get(key)
        if mention is None:
            return "@user" + space
        if mention.is_this_bot:
            return ""
        return f"@{mention_name_capped(mention.name or mention.open_id or 'user')}" + space

    return _MENTION_KEY.sub(replace, text).strip()


# Issue 30, finding 6: a 200-character display name times 14,000 placeholders made a 2.8-million-character
# prompt. Feishu's own names are far shorter; a longer one is cut (with an ellipsis) where it is written out.
MAX_MENTION_NAME_CHARS = 64


def mention_name_capped(name: str) -> str:
    return name if len(name) <= MAX_MENTION_NAME_CHARS else name[: MAX_MENTION_NAME_CHARS - 1] + "…"


def secrets_redact(text: str, secrets: Sequence[str]) -> str:
    """C3: no secret the caller knows (the hub's, issue 30) reaches a stored item, even when someone pastes it;
    the one redaction step (core.redaction), encodings included."""
    return redacted(text, secrets=secrets)


def _refusal_reason(*, message: InboundMessage, workspace: Workspace | None) -> str:
    """C3: why this message is never collected (a SKIP_* constant), or "" when the mode decides what to record."""
    if message.chat_type != CHAT_TYPE_GROUP:
        return SKIP_DIRECT_MESSAGE
    if message.is_own_echo:
        return SKIP_OWN_ECHO
    if message.message_type not in COLLECTED_MESSAGE_TYPES:
        return SKIP_NOT_COLLECTED_TYPE
    if workspace is None:
        return SKIP_NO_WORKSPACE
    if message.is_slash_command:
        # The seed reserves the `command` event type but records no slash command; neither do we.
        return SKIP_SLASH_COMMAND
    return ""


# One event to write: its type, and the type of the context item written with it (None: the event has no item).
PlannedEvent = tuple[str, str | None]


def _inbound_plan(*, message: InboundMessage, workspace: Workspace, text: str) -> tuple[list[PlannedEvent], str]:
    """C2: the events this message gets under the workspace mode, and why (part of) it gets none ("" if it all does)."""
    plan: list[PlannedEvent] = []
    skipped_reason = ""
    if message.is_topic_root and text:
        plan.append((ThreadEvent.EventType.TOPIC_ROOT, ThreadContextItem.ItemType.TOPIC_ROOT))
    is_owner_only = workspace.mode == Workspace.Mode.OWNER_ONLY
    if message.is_this_bot_addressed:
        if is_owner_only and (not workspace.owner_open_id or message.sender_id != workspace.owner_open_id):
            skipped_reason = SKIP_NOT_OWNER
        else:
            plan.append((ThreadEvent.EventType.USER_REQUEST, None))
    elif not message.is_topic_root:
        if is_owner_only:
            skipped_reason = SKIP_OWNER_ONLY_DISCUSSION
        elif message.sender_type != SENDER_USER:
            # Another bot's message: its own bridge records it as agent_output; a second copy would duplicate it.
            skipped_reason = SKIP_NOT_HUMAN
        elif not text:
            skipped_reason = SKIP_EMPTY
        else:
            plan.append((ThreadEvent.EventType.HUMAN_MESSAGE, ThreadContextItem.ItemType.HUMAN_MESSAGE))
    return plan, skipped_reason


def _inbound_plan_write(
    *, message: InboundMessage, text: str, plan: list[PlannedEvent]
) -> tuple[list[ThreadEvent], list[str]]:
    """Write each planned event once: (the stored events, new or already there; the types this call created)."""
    fields = {
        "source": message.source,
        "chat_id": message.chat_id,
        "root_msg_id": message.effective_root_msg_id,
        "thread_id": message.thread_id,
        "actor_type": message.sender_type,
        "actor_id": message.sender_id,
        "bot_profile": message.bot_profile,
        "text": text,
        "metadata": {"sender_name": message.sender_name} if message.sender_name else {},
    }
    label = message.sender_name or message.sender_id
    events: list[ThreadEvent] = []
    created_types: list[str] = []
    for event_type, item_type in plan:
        item = None
        if item_type is not None:
            item = {"item_type": item_type, "role": message.sender_type, "author_label": label, "text": text}
        event, created = thread_event_insert_once(
            bridge_id=message.bridge_id,
            message_id=message.message_id,
            event_type=event_type,
            defaults=fields,
            item=item,
        )
        events.append(event)
        if created:
            created_types.append(str(event_type))
    return events, created_types


def thread_event_record_inbound(
    *, message: InboundMessage, workspace: Workspace | None, secrets: Sequence[str] = ()
) -> RecordOutcome:
    """C2: record topic_root / human_message / user_request for one inbound group message, per the workspace mode.

    shared: a topic root's plain text -> topic_root (real actor_type); un-@ text -> human_message; @this bot ->
    user_request (the caller then runs the selector). owner_only: topic_root recorded; un-@ text never; @this bot
    -> user_request only from the workspace owner. A topic root that @s the bot is both topic_root and
    user_request (the selector then excludes it as the current request).
    """
    refusal = _refusal_reason(message=message, workspace=workspace)
    if refusal:
        return RecordOutcome(skipped_reason=refusal)
    assert workspace is not None  # no workspace is a refusal
    text = secrets_redact(normalise_mentions(message.text, message.mentions), secrets)
    plan, skipped_reason = _inbound_plan(message=message, workspace=workspace, text=text)
    events, created_types = _inbound_plan_write(message=message, text=text, plan=plan)
    if created_types:
        logger.info(
            "thread context recorded",
            extra={
                "bridge_id": message.bridge_id,
                "chat_id": message.chat_id,
                "root_msg_id": message.effective_root_msg_id,
                "message_id": message.message_id,
                "event_types": created_types,
            },
        )
        thread_context_prune_if_due()
    recorded = tuple(str(event.event_type) for event in events)
    is_request = ThreadEvent.EventType.USER_REQUEST in recorded
    return RecordOutcome(
        recorded=recorded,
        created=tuple(created_types),
        # Set whenever part of the message was not recorded, even next to a recorded topic_root (a stranger's @ on
        # an owner_only root records the root but is still not_owner).
        skipped_reason=skipped_reason or ("" if recorded else SKIP_EMPTY),
        request_text=text if is_request else "",
        triggers_selector=is_request,
        events=tuple(events),
    )


def thread_event_record_topic_root(
    *,
    bridge_id: str,
    bot_profile: str,
    chat_id: str,
    root_msg_id: str,
    text: str,
    sender_id: str = "",
    sender_type: str = SENDER_USER,
    sender_name: str = "",
    thread_id: str = "",
    mentions: Sequence[Mention] = (),
    secrets: Sequence[str] = (),
) -> tuple[ThreadEvent | None, bool]:
    """A topic root fetched online by root_msg_id (the fresh topic's root was not cached): record it as topic_root.

    Any sender type is accepted (the seed keeps the real actor_type). Returns (event, created); (None, False) when
    the text is empty after normalisation.
    """
    clean = secrets_redact(normalise_mentions(text, mentions), secrets)
    if not clean:
        return None, False
    event, created = thread_event_insert_once(
        bridge_id=bridge_id,
        message_id=root_msg_id,
        event_type=ThreadEvent.EventType.TOPIC_ROOT,
        defaults={
            "chat_id": chat_id,
            "root_msg_id": root_msg_id,
            "thread_id": thread_id,
            "actor_type": sender_type,
            "actor_id": sender_id,
            "bot_profile": bot_profile,
            "text": clean,
            "metadata": {"fetched_online": True, **({"sender_name": sender_name} if sender_name else {})},
        },
        item={
            "item_type": ThreadContextItem.ItemType.TOPIC_ROOT,
            "role": sender_type,
            "author_label": sender_name or sender_id,
            "text": clean,
        },
    )
    if created:
        thread_context_prune_if_due()
    return event, created


def agent_output_truncate(text: str, *, max_chars: int | None = None) -> tuple[str, bool]:
    """C6: keep the first `max_chars` characters (the seed's open question; head kept, no marker added)."""
    limit = settings.AMUX_MAX_AGENT_OUTPUT_CHARS if max_chars is None else max_chars
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def thread_event_record_agent_output(
    *,
    bridge_id: str,
    bot_profile: str,
    chat_id: str,
    root_msg_id: str,
    message_id: str,
    text: str,
    session_name: str = "",
    target_name: str = "",
    target_id: str = "",
    thread_id: str = "",
    chat_type: str = CHAT_TYPE_GROUP,
    secrets: Sequence[str] = (),
) -> tuple[ThreadEvent | None, bool]:
    """C2/C6: one round's final aggregated output, every round kept; truncated above AMUX_MAX_AGENT_OUTPUT_CHARS.

    message_id: the Feishu id of the delivered reply (or the turn's stable id when it was not sent to Feishu).
    Only final output comes here; the turn never passes streaming chunks or tool activity. DMs are refused.
    Returns (event, created); (None, False) when nothing was recorded.
    """
    if chat_type != CHAT_TYPE_GROUP or not text.strip():
        return None, False
    clean = secrets_redact(text, secrets)
    stored, truncated = agent_output_truncate(clean)
    metadata: dict = {}
    if truncated:
        metadata = {TRUNCATED_KEY: True, "original_chars": len(clean)}
    label = f"{bot_profile}/{session_name}" if session_name else bot_profile
    event, created = thread_event_insert_once(
        bridge_id=bridge_id,
        message_id=message_id,
        event_type=ThreadEvent.EventType.AGENT_OUTPUT,
        defaults={
            "chat_id": chat_id,
            "root_msg_id": root_msg_id or message_id,
            "thread_id": thread_id,
            "actor_type": SENDER_BOT,
            "actor_id": bridge_id,
            "bot_profile": bot_profile,
            "target_id": target_id,
            "target_name": target_name,
            "session_name": session_name,
            "text": stored,
            "metadata": metadata,
        },
        item={
            "item_type": ThreadContextItem.ItemType.AGENT_OUTPUT,
            "role": "assistant",
            "author_label": label,
            "text": stored,
            "metadata": metadata,
        },
    )
    if created:
        logger.info(
            "agent output recorded",
            extra={
                "bridge_id": bridge_id,
                "chat_id": chat_id,
                "root_msg_id": root_msg_id,
                "message_id": message_id,
                "truncated": truncated,
                "chars": len(stored),
            },
        )
        thread_context_prune_if_due()
    return event, created
