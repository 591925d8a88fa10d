"""Voice messages a bot transcribed (issue 26, H3): each attempt with its outcome, and the seconds it cost.

The transcript is shown (it is what the bot's thread context holds, secrets redacted); the audio never is (never
stored). Read-only: a row is what happened.
"""

from typing import ClassVar

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agents.models import VoiceTranscription
from core.admin import AuditAdmin, compact_time


@admin.register(VoiceTranscription)
class VoiceTranscriptionAdmin(AuditAdmin):
    list_display = ["id", "bot", "message_id", "status", "audio_seconds", "model_name", "reason", "created"]
    list_filter = ["status", "bot"]
    search_fields = ["message_id", "bot__slug"]
    list_select_related = ["bot"]
    fields: ClassVar[tuple[str, ...]] = (
        "bot",
        "message_id",
        "status",
        "reason",
        "text",
        "audio_seconds",
        "audio_bytes",
        "model_name",
    )
    readonly_fields = fields

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, row: VoiceTranscription) -> str:
        return compact_time(row.created_at)
