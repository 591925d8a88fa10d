"""Records of the discuss probe gate: one row per judgement, retained 30 days."""

from django.db import models


class ProbeJudgement(models.Model):
    class Outcome(models.TextChoices):
        # The reference's outcome vocabulary (probe.rules.Outcome): the same words in rows and in logs.
        ACT = "act", "Act (send)"
        NO_ACTION = "no_action", "No action"
        MISSING = "missing", "Missing verdict (failed closed)"
        MALFORMED = "malformed", "Malformed verdict (failed closed)"
        ERROR = "error", "Error (failed closed)"
        DISABLED = "disabled", "Disabled (gate did not run)"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="probe_judgements")
    thread = models.ForeignKey("agents.Thread", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    turn = models.ForeignKey("agents.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The bridge's discuss wake (feishu.DiscussWake); probe never imports the bridge: a plain id.
    wake_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    gate_ran = models.BooleanField()
    cause = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    activated = models.BooleanField()
    reason = models.TextField(blank=True)
    error = models.TextField(blank=True)
    model = models.ForeignKey("agents.LLMModel", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The bot's probe mode (inherit / off / model) and the judge's name when the gate ran: the bot's settings and
    # the model row change later (or the model is deleted, SET_NULL), and an explain page must show what was used.
    probe_mode = models.CharField(max_length=16, blank=True)
    probe_model_name = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["bot", "-created_at"], name="judgement_bot_newest"),
            # Every time range across bots (the dashboard's 24 h / 7 day windows, the retention purge). On
            # PostgreSQL it also holds the columns the dashboard aggregates, so its 7 day scan is index-only.
            models.Index(
                fields=["created_at"],
                include=["bot", "outcome", "input_tokens", "output_tokens"],
                name="judgement_window_covering",
            ),
        ]

    def __str__(self) -> str:
        return f"judgement {self.pk} ({self.cause})"
