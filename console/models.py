"""The playground (issue 14 item 8, A5): a simulated Feishu group where an operator types as people and watches the
hub's bots answer through the real pipeline.

Each hub bot taking part is played by its sandbox stand-in (`Bot.is_sandbox`), kept in step with the hub bot's
settings: every Feishu call the stand-in makes is recorded on this machine (feishu/outbound/sandbox.py), and its
turns, judgements and deliveries are its own rows, so the hub bot's numbers on the dashboard are untouched.
"""

import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

CHAT_ID_PREFIX = "oc_playground_"
MESSAGE_ID_PREFIX = "om_playground_"


def playground_chat_id() -> str:
    return CHAT_ID_PREFIX + secrets.token_hex(10)


class PlaygroundGroup(models.Model):
    class Kind(models.TextChoices):
        GROUP = "group", _("Ordinary group (one main timeline)")
        TOPIC = "topic", _("Topic group (every message opens a topic)")

    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.GROUP)
    chat_id = models.CharField(_("chat id"), max_length=64, unique=True, default=playground_chat_id, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("playground group")
        verbose_name_plural = _("playground groups")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class PlaygroundMember(models.Model):
    class ReplyMode(models.TextChoices):
        MENTION = "mention", _("Only when @-mentioned")
        DISCUSS = "discuss", _("Discuss (may speak unasked, gated by the probe)")

    group = models.ForeignKey(PlaygroundGroup, on_delete=models.CASCADE, related_name="members")
    bot = models.ForeignKey(
        "agents.Bot",
        on_delete=models.CASCADE,
        related_name="+",
        limit_choices_to={"is_sandbox": False},
        verbose_name=_("hub bot"),
    )
    sandbox_bot = models.ForeignKey(
        "agents.Bot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    reply_mode = models.CharField(_("reply mode"), max_length=16, choices=ReplyMode.choices, default=ReplyMode.MENTION)

    class Meta:
        verbose_name = _("bot in the group")
        verbose_name_plural = _("bots in the group")
        constraints = [models.UniqueConstraint(fields=["group", "bot"], name="playground_member_unique_bot")]

    def __str__(self) -> str:
        return str(self.bot)


class PlaygroundMessage(models.Model):
    group = models.ForeignKey(PlaygroundGroup, on_delete=models.CASCADE, related_name="messages")
    message_id = models.CharField(max_length=64, unique=True)
    root_message_id = models.CharField(max_length=64, blank=True, help_text="The topic it belongs to, if any.")
    sender_name = models.CharField(max_length=64)
    sender_open_id = models.CharField(max_length=64)
    text = models.TextField()
    mentioned_bot_ids = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["group", "id"], name="playground_message_group")]

    def __str__(self) -> str:
        return f"{self.sender_name}: {self.text[:40]}"
