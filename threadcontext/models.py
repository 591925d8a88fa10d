"""Seed 002's store: workspaces, thread events, context items, selection decisions, session bindings.

Bots are referred to by plain identifiers (bot_profile = the bot's slug, bridge_id = its Feishu app id),
as the seed's store does, so this app never imports `agents`.
"""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from core.timezones import time_zone_is_known

# G1: the root key of an ordinary group's main timeline. Un-addressed top-level messages (no thread_id) of a chat
# whose mode is not "topic" are recorded, woken, judged and answered under this key, so the collector, the
# selector, the judge's transcript, the discuss wake and an @ in the main timeline all read one timeline per chat.
# Feishu ids start "om_", so it never collides with a real root.
MAIN_TIMELINE_KEY = "main"


# A nullable switch of a workspace: "Unknown" in the admin means the hub-wide setting applies (issue 27).
HUB_DEFAULT = "Unknown (empty): the hub's default setting applies."


class Workspace(models.Model):
    class Mode(models.TextChoices):
        SHARED = "shared", "Shared"
        OWNER_ONLY = "owner_only", "Owner only"

    class SessionScope(models.TextChoices):
        TOPIC = "topic", "One session per topic"
        GROUP = "group", "One continuous session per group"

    bot_profile = models.SlugField(max_length=64, help_text="The bot's slug.")
    chat_id = models.CharField(max_length=64)
    name = models.CharField(max_length=200, blank=True)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.SHARED)
    owner_open_id = models.CharField(max_length=64, blank=True)
    thread_context_limit = models.PositiveSmallIntegerField(default=20)
    session_scope = models.CharField(max_length=16, choices=SessionScope.choices, default=SessionScope.TOPIC)
    # Null = the hub-wide setting (AMUX_FEISHU_TOPIC_ROOT_ENABLED / AMUX_FEISHU_SHARED_THREAD_ENABLED).
    topic_root_enabled = models.BooleanField(null=True, blank=True, help_text=HUB_DEFAULT)
    shared_thread_enabled = models.BooleanField(null=True, blank=True, help_text=HUB_DEFAULT)

    class ReplyMode(models.TextChoices):
        INHERIT = "", "The bot's group reply mode"
        MENTION = "mention", "Only when @-mentioned or replied to"
        DISCUSS = "discuss", "Discuss (may speak unasked, gated by the probe)"
        OFF = "off", "Off (records context, never replies here)"

    # G5 / issue 12 item 4: this group's reply policy, on top of the bot's.
    reply_mode = models.CharField(max_length=16, choices=ReplyMode.choices, default=ReplyMode.INHERIT, blank=True)
    respond_to_at_all = models.BooleanField(default=False, help_text="An @all counts as an @ of this bot.")
    # B2: consecutive bot-triggered turns (hand-offs) per Feishu thread before the hub pauses them; 0: no hand-offs.
    bot_chain_limit = models.PositiveSmallIntegerField(
        default=6, help_text="Bot-to-bot replies in a row before the bots pause; 0 turns hand-offs off."
    )

    class DiscussAnswers(models.TextChoices):
        ONE = "one", "One bot answers"
        EACH = "each", "Each activated bot answers"

    # B3: when one un-addressed message activates several discuss bots of this chat.
    discuss_answers = models.CharField(max_length=8, choices=DiscussAnswers.choices, default=DiscussAnswers.ONE)
    allowed_open_ids = models.JSONField(
        default=list,
        blank=True,
        help_text="Open ids of the people who may trigger the bot here; empty: everyone (owner_only still applies).",
    )
    # Issue 25 (K1): who may run the chat commands (/context ..., /schedule ...). Empty: the mode decides
    # (owner_only: the owner; shared: anyone in the group); otherwise exactly these open ids.
    command_open_ids = models.JSONField(
        default=list,
        blank=True,
        help_text="Open ids of the people who may run /context and /schedule here; empty: the mode decides.",
    )
    # K4: the time zone of /schedule times here ("" = the hub's TIME_ZONE).
    time_zone = models.CharField(max_length=64, blank=True, help_text="e.g. Asia/Shanghai; empty: the hub's.")
    # G1: the chat's mode from im.v1.chat.get, read once ("" = not known yet).
    chat_mode = models.CharField(max_length=16, blank=True)
    group_message_type = models.CharField(max_length=16, blank=True)
    chat_mode_checked_at = models.DateTimeField(null=True, blank=True)
    # G2: created by the hub (first group message, or the bot added to the group), not by an operator.
    is_created_automatically = models.BooleanField(default=False)
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When the bot was removed from the group; empty: it is still in the group."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot_profile", "chat_id"], name="workspace_unique_bot_chat"),
        ]

    def __str__(self) -> str:
        # One group has a workspace per bot in it: the bot tells two "Demo group" rows apart (issue 27).
        return f"{self.name or self.chat_id} · {self.bot_profile}"

    def clean(self) -> None:
        ids = self.allowed_open_ids
        if not isinstance(ids, list) or not all(isinstance(value, str) and value.strip() for value in ids):
            raise ValidationError({"allowed_open_ids": 'A JSON list of open ids, e.g. ["ou_1234"]; [] for everyone.'})
        self.allowed_open_ids = [value.strip() for value in ids]
        commanders = self.command_open_ids
        if not isinstance(commanders, list) or not all(
            isinstance(value, str) and value.strip() for value in commanders
        ):
            raise ValidationError({"command_open_ids": 'A JSON list of open ids, e.g. ["ou_1234"]; [] for the mode.'})
        self.command_open_ids = [value.strip() for value in commanders]
        if self.time_zone and not time_zone_is_known(self.time_zone):
            raise ValidationError({"time_zone": "An IANA time zone name, e.g. Asia/Shanghai; empty for the hub's."})

    @property
    def is_chat_mode_known(self) -> bool:
        return bool(self.chat_mode)

    @property
    def is_topic_chat(self) -> bool:
        """Every message is a topic: a topic group, or a group in topic form (Feishu's own fields, G1)."""
        return self.chat_mode == "topic" or self.group_message_type == "thread"


class ThreadEvent(models.Model):
    class EventType(models.TextChoices):
        TOPIC_ROOT = "topic_root", "Topic root"
        HUMAN_MESSAGE = "human_message", "Human message"
        USER_REQUEST = "user_request", "User request"
        AGENT_OUTPUT = "agent_output", "Agent output"
        COMMAND = "command", "Command"
        SUMMARY = "summary", "Summary"

    source = models.CharField(max_length=16, default="feishu")
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    thread_id = models.CharField(max_length=64, blank=True)
    message_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=16, choices=EventType.choices)
    actor_type = models.CharField(max_length=16, blank=True, help_text="user, bot or app")
    actor_id = models.CharField(max_length=64, blank=True)
    bridge_id = models.CharField(max_length=64)
    bot_profile = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    target_name = models.CharField(max_length=200, blank=True)
    session_name = models.CharField(max_length=200, blank=True)
    text = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bridge_id", "message_id", "event_type"], name="threadevent_unique_bridge_message_type"
            ),
        ]
        indexes = [models.Index(fields=["chat_id", "root_msg_id", "id"], name="threadevent_thread")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id}"


class ThreadContextItem(models.Model):
    class ItemType(models.TextChoices):
        TOPIC_ROOT = "topic_root", "Topic root"
        HUMAN_MESSAGE = "human_message", "Human message"
        AGENT_OUTPUT = "agent_output", "Agent output"
        SUMMARY = "summary", "Summary"  # K3: written by a task after a turn; metadata lists what it covers

    event = models.ForeignKey(ThreadEvent, on_delete=models.CASCADE, related_name="items")
    # Copied from the event so the selector reads one thread's items with one index range scan.
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    bridge_id = models.CharField(max_length=64)
    # The Feishu message the item came from (copied from the event, like the three fields above): the selector
    # de-duplicates by it and drops the current request's own message without joining the event table.
    message_id = models.CharField(max_length=64, blank=True, default="")
    item_type = models.CharField(max_length=16, choices=ItemType.choices)
    role = models.CharField(max_length=16, blank=True)
    author_label = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    token_estimate = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["chat_id", "root_msg_id", "-id"], name="contextitem_thread_newest"),
            # The selector's branches: one thread, one item type, newest first (threadcontext.selectors).
            models.Index(fields=["chat_id", "root_msg_id", "item_type", "-id"], name="contextitem_thread_type_newest"),
            # C7: a quoted card without inline text is filled from the local item of that message.
            models.Index(fields=["message_id"], name="contextitem_message"),
            # A7/K3: the console's cost of summaries over the last 30 days, across bots.
            models.Index(fields=["item_type", "created_at"], name="contextitem_type_created"),
        ]

    def __str__(self) -> str:
        return f"{self.item_type} item {self.pk}"


class ThreadContextDecision(models.Model):
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64, blank=True)
    bridge_id = models.CharField(max_length=64)
    bot_profile = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    workspace_mode = models.CharField(max_length=16, blank=True)
    request_text = models.TextField(blank=True)
    thread_context = models.TextField(blank=True)
    selected_item_ids = models.JSONField(default=list, blank=True)
    excluded = models.JSONField(default=list, blank=True)
    prompt_preview = models.TextField(blank=True)
    diagnostics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["root_msg_id", "bot_profile", "-id"], name="decision_root_profile_newest"),
            # Retention (C13) looks for expired decisions on every throttled write: without this index each look
            # walks the whole table when nothing has expired.
            models.Index(fields=["created_at"], name="decision_created"),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk}"


class SessionBinding(models.Model):
    """(bot, chat, topic root or the group key) -> the agents.Thread that carries the session."""

    GROUP_SCOPE_KEY = "group"

    bot_profile = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=64)
    # The topic's root_msg_id (topic scope) or GROUP_SCOPE_KEY (group scope).
    scope_key = models.CharField(max_length=64)
    agent_thread_id = models.BigIntegerField(help_text="agents.Thread id (a plain id: no import of agents).")
    topic_root_prompt_delivered = models.BooleanField(default=False)
    retired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # At most one live binding per entry point; /new retires it and the next message creates another.
            models.UniqueConstraint(
                fields=["bot_profile", "chat_id", "scope_key"],
                condition=Q(retired_at__isnull=True),
                name="sessionbinding_unique_live_entry",
            ),
        ]
        indexes = [
            # The turn's live binding of its thread, newest first (served in order, not by walking the pk).
            models.Index(fields=["agent_thread_id", "-id"], name="sessionbinding_thread_newest"),
            # Issue 11: a topic's first message looks for a retired binding of its entry point (C14); the live
            # constraint's partial index does not cover retired rows, so without this each look walked the table.
            models.Index(fields=["bot_profile", "chat_id", "scope_key", "-id"], name="sessionbinding_entry_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.bot_profile}:{self.chat_id}:{self.scope_key}"


class ContextPin(models.Model):
    """K2: an item a person pinned for one bot's conversation (chat + timeline key); selected first, never trimmed."""

    bridge_id = models.CharField(max_length=64)
    bot_profile = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=64)
    item = models.ForeignKey(ThreadContextItem, on_delete=models.CASCADE, related_name="pins")
    pinned_by = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bridge_id", "chat_id", "root_msg_id", "message_id"], name="contextpin_unique_message"
            ),
        ]
        indexes = [
            # The selector's pin branch and `/context pins`: one conversation's pins, newest first.
            models.Index(fields=["bridge_id", "chat_id", "root_msg_id", "-id"], name="contextpin_conversation"),
            models.Index(fields=["item", "bridge_id"], name="contextpin_item"),
        ]

    def __str__(self) -> str:
        return f"pin {self.message_id}"


class ContextClear(models.Model):
    """K1: `/context clear`: items up to `through_item_id` are excluded as `cleared` from now on (none deleted)."""

    bridge_id = models.CharField(max_length=64)
    bot_profile = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=64)
    root_msg_id = models.CharField(max_length=64)
    through_item_id = models.BigIntegerField(default=0)
    includes_pins = models.BooleanField(default=False, help_text="/context clear all: the pins were removed too.")
    cleared_by = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["bridge_id", "chat_id", "root_msg_id", "-id"], name="contextclear_conversation"),
        ]

    def __str__(self) -> str:
        return f"clear through {self.through_item_id}"
