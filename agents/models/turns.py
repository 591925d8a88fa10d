"""A bot's turns: one request answered, its lifecycle (queued, running, replied, delivered, ...), its usage.

Re-exported by agents.models, which Django and every caller use (`agents.models.Turn`). Related models are named by
label ("agents.Bot"): agents.models imports this module, so it cannot import them.
"""

from django.conf import settings
from django.db import models


class Turn(models.Model):
    class Trigger(models.TextChoices):
        MENTION = "mention", "Mention"
        REPLY = "reply", "Reply to the bot"
        DM = "dm", "Direct message"
        DISCUSS = "discuss", "Discuss wake"
        REST = "rest", "REST"
        AUTOMATION = "automation", "Automation"
        HANDOFF = "handoff", "Hand-off from another bot"

    class Status(models.TextChoices):
        # L1: queued -> running -> replied -> delivered | delivery_failed | failed (+ skipped). "Delivered" means a
        # person can see it: a Feishu reply posted, a REST or automation reply stored (nothing more to deliver).
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        # H1: paused on a tool call a person must allow; no worker holds it (a decision enqueues it again).
        AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
        REPLIED = "replied", "Replied (not delivered yet)"
        DELIVERED = "delivered", "Delivered"
        DELIVERY_FAILED = "delivery_failed", "Delivery failed"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="turns")
    thread = models.ForeignKey("agents.Thread", on_delete=models.CASCADE, related_name="turns")
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    # The message that caused the turn (Feishu message id, "rest:<message pk>", "automation:<run>").
    source_message_id = models.CharField(max_length=100)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.QUEUED)
    user_message = models.ForeignKey(
        "agents.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reply_message = models.ForeignKey(
        "agents.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # threadcontext refers to bots by plain ids and agents does not import it: a plain id, not a FK.
    context_decision_id = models.BigIntegerField(null=True, blank=True)
    model_input = models.JSONField(default=dict, blank=True, help_text="The provider request as sent.")
    usage = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    retry_history = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    redaction_count = models.PositiveIntegerField(
        default=0, help_text="Secrets masked in this turn's input, tool output, reply and errors."
    )
    queued_at = models.DateTimeField(auto_now_add=True)
    # When turn_run_task was last handed to the broker (on creation or by the sweeper); null when never, or when
    # the broker refused it. turns_sweep re-enqueues only once a healthy broker could no longer be holding it.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # When a run last claimed the turn (turn_run's step 1); started_at keeps the first claim.
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # How many times turns_sweep re-enqueued the turn after it was left running; capped, then the turn fails.
    sweeps = models.PositiveSmallIntegerField(default=0)
    # When the reply was stored (status replied); the sweeper resumes delivery of a reply left undelivered.
    replied_at = models.DateTimeField(null=True, blank=True)
    # Delivery attempts of the stored reply (same uuids each time); capped, then delivery_failed.
    delivery_attempts = models.PositiveSmallIntegerField(default=0)
    # What the channel noted when it prepared the turn, for its delivery (Feishu: whether the topic root went in).
    channel_state = models.JSONField(default=dict, blank=True)
    # B1: the turn of the bot whose reply @-mentioned this turn's bot (a hand-off); null for a person's request.
    asked_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="handoffs")
    # B2: consecutive bot-triggered turns in this Feishu thread up to and including this one (0: a person asked).
    chain_length = models.PositiveSmallIntegerField(default=0)
    # U1: the person this turn acts for (agents.principals): a Feishu user (open_id as the bot's app knows them,
    # union_id across one developer's apps) or a hub user (REST, console automations). Set once, at creation.
    principal_open_id = models.CharField(max_length=64, blank=True)
    principal_union_id = models.CharField(max_length=64, blank=True)
    principal_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # U2: the admission decision that let the turn run (door, rule, reason: agents.principals.Admission).
    admission = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            # One turn per (bot, source message): a duplicate trigger never creates a second turn (T2).
            models.UniqueConstraint(fields=["bot", "source_message_id"], name="turn_unique_bot_source_message"),
        ]
        indexes = [
            models.Index(fields=["status", "queued_at"], name="turn_status_queued"),
            # The dashboard's bounded windows (24 h, 7 days) over all bots.
            models.Index(fields=["queued_at"], name="turn_queued"),
        ]

    def __str__(self) -> str:
        return f"turn {self.pk} ({self.trigger}, {self.status})"

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return int((self.finished_at - self.started_at).total_seconds() * 1000)
        return None
