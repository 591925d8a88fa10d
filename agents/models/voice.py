"""Voice messages a bot transcribed (issue 26, H3): one row per (bot, message), whatever came of it.

The row is what makes a transcription happen once (the discuss wake and the turn both ask; the first call stores
it, later ones read it), what explain shows (transcribed, or why not) and what counts a bot's audio seconds.
Re-exported by agents.models; related models are named by label ("agents.Bot") for the same reason as tools.py.
"""

from django.db import models


class VoiceTranscription(models.Model):
    class Status(models.TextChoices):
        TRANSCRIBED = "transcribed", "Transcribed"
        FAILED = "failed", "Not transcribed"

    bot = models.ForeignKey("agents.Bot", on_delete=models.CASCADE, related_name="voice_transcriptions")
    message_id = models.CharField(max_length=64, help_text="The Feishu voice message.")
    status = models.CharField(max_length=16, choices=Status.choices)
    # The transcript, secrets redacted; empty when not transcribed.
    text = models.TextField(blank=True)
    reason = models.CharField(max_length=300, blank=True, help_text="Why it was not transcribed.")
    # The message's duration as Feishu states it: what the provider was asked to transcribe (0 when failed).
    audio_seconds = models.PositiveIntegerField(default=0)
    audio_bytes = models.PositiveIntegerField(default=0)
    model_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "message_id"], name="voicetranscription_unique_bot_message")
        ]

    def __str__(self) -> str:
        return f"voice {self.message_id} ({self.status})"
