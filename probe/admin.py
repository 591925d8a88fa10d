"""Admin of the probe gate (P11): every judgement, and the bots whose gate has been failing closed."""

from datetime import timedelta

from django.contrib import admin
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from amuxweb.admin import AuditAdmin, change_link, compact_time, model_names
from probe.models import ProbeJudgement
from probe.selectors import failing_closed_bots_list, misconfigured_bots_list

FAILING_WINDOW = timedelta(hours=24)
model_names(ProbeJudgement, _("probe judgement"), _("probe judgements"))


@admin.register(ProbeJudgement)
class ProbeJudgementAdmin(AuditAdmin):
    """Read-only: judgements are records of what the gate decided, written only by probe_gate_run."""

    # Whether the gate ran and whether it activated (the outcome says it) are filters, not columns: the list has
    # to fit 1440 px beside the sidebar.
    list_display = [
        "created",
        "bot",
        "cause",
        "outcome",
        "model",
        "tokens",
        "duration",
        "wake_and_turn",
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

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, judgement: ProbeJudgement) -> str:
        return compact_time(judgement.created_at)

    @admin.display(description=_("tokens (in + out)"), ordering="total_tokens")
    def tokens(self, judgement: ProbeJudgement) -> str:
        return f"{judgement.input_tokens} + {judgement.output_tokens}"

    @admin.display(description=_("duration"), ordering="duration_ms")
    def duration(self, judgement: ProbeJudgement) -> str:
        return f"{judgement.duration_ms} ms"

    @admin.display(description=_("wake / turn"), ordering="wake_id")
    def wake_and_turn(self, judgement: ProbeJudgement) -> str:
        # The wake lives in the bridge, which probe does not import: linked by its admin URL's name only.
        wake = "-"
        if judgement.wake_id is not None:
            url = reverse("admin:feishu_discusswake_explain", args=[judgement.wake_id])
            wake = format_html('<a href="{}">{}</a>', url, judgement.wake_id)
        return format_html("{} / {}", wake, change_link(judgement.turn, judgement.turn_id))

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
            "title": _("Bots whose probe gate failed closed in the last 24 hours"),
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
