"""Automations: a bot's scheduled prompt, run by Celery beat into its own thread (agents.services.automations).

Re-exported by agents.models, which Django and every caller use (`agents.models.Automation`).
Related models are named by label ("agents.Bot"): agents.models imports this module, so it cannot import them.
"""

from django.db import models
from django.db.models import Q


class Automation(models.Model):
    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="automations")
    name = models.CharField(max_length=100)
    prompt = models.TextField()
    schedule = models.ForeignKey("django_celery_beat.CrontabSchedule", on_delete=models.PROTECT, related_name="+")
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    thread = models.OneToOneField(
        "agents.Thread", null=True, blank=True, on_delete=models.SET_NULL, related_name="automation"
    )
    feishu_chat_id = models.CharField(max_length=64, blank=True, help_text="Optional Feishu chat to post each run to.")
    # Issue 25 (K4): made from the chat with /schedule. Each run replies in the topic of this message (the topic's
    # root, or "" for the chat's main timeline), and the admin shows who asked for it.
    feishu_topic_message_id = models.CharField(
        max_length=64, blank=True, help_text="Post each run into the topic of this Feishu message (empty: the chat)."
    )
    created_by_open_id = models.CharField(
        max_length=64, blank=True, help_text="Who created it with /schedule in the chat (empty: made in the admin)."
    )
    # U4 (issue 35): where a /schedule was made, as Feishu typed the chat: "p2p" (a DM, admitted by the bot's DM
    # policy at each run) or "group" (by the chat's workspace). Stored, never inferred from a missing workspace.
    feishu_chat_type = models.CharField(
        max_length=16, blank=True, help_text="group or p2p for a /schedule (empty: made in the admin)."
    )
    is_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "name"], name="automation_unique_bot_name"),
            models.CheckConstraint(condition=~Q(prompt=""), name="automation_prompt_not_empty"),
        ]

    def __str__(self) -> str:
        return self.name
