"""Admin of the probe gate (P11): every judgement, and the bots whose gate has been failing closed."""

from datetime import timedelta

from django.contrib import admin
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from probe.models import ProbeJudgement
from probe.selectors import failing_closed_bots_list, misconfigured_bots_list

FAILING_WINDOW = timedelta(hours=24)


@admin.register(ProbeJudgement)
class ProbeJudgementAdmin(admin.ModelAdmin):
    """Read-only: judgements are records of what the gate decided, written only by probe_gate_run."""

    list_display = [
        "created_at",
        "bot",
        "cause",
        "outcome",
        "activated",
        "gate_ran",
        "model",
        "tokens",
        "duration_ms",
        "wake_id",
        "turn",
    ]
    list_filter = ["outcome", "cause", "activated", "gate_ran", "bot"]
    search_fields = ["bot__slug", "bot__name", "reason", "error"]
    list_select_related = ["bot", "model", "turn"]
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    readonly_fields = [field.name for field in ProbeJudgement._meta.fields]
    change_list_template = "admin/probe/probejudgement/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProbeJudgement]:
        return super().get_queryset(request).annotate(total_tokens=F("input_tokens") + F("output_tokens"))

    @admin.display(description="Tokens (in + out)", ordering="total_tokens")
    def tokens(self, judgement: ProbeJudgement) -> str:
        return f"{judgement.input_tokens} + {judgement.output_tokens}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ProbeJudgement | None = None) -> bool:
        return False

    def get_urls(self):
        urls = [
            path(
                "failing/",
                self.admin_site.admin_view(self.failing_view),
                name="probe_probejudgement_failing",
            )
        ]
        return urls + super().get_urls()

    def failing_view(self, request: HttpRequest) -> TemplateResponse:
        """Bots whose gate failed closed in the last 24 h, by cause and count (P10)."""
        rows = failing_closed_bots_list(since=FAILING_WINDOW)
        changelist = reverse("admin:probe_probejudgement_changelist")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Bots whose probe gate failed closed in the last 24 hours",
            "rows": [
                {
                    "row": row,
                    "bot_url": reverse("admin:agents_bot_change", args=[row.bot_id]),
                    "judgements_url": f"{changelist}?bot__id__exact={row.bot_id}&cause={row.cause}",
                }
                for row in rows
            ],
            "since": timezone.now() - FAILING_WINDOW,
            # G2: bots that cannot answer as configured, listed with the cause instead of staying silent.
            "misconfigured": [
                {"row": row, "bot_url": reverse("admin:agents_bot_change", args=[row.bot_id])}
                for row in misconfigured_bots_list()
            ],
        }
        return TemplateResponse(request, "admin/probe/failing_closed.html", context)
