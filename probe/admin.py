"""Admin of the probe gate (P11): every judgement, and the bots whose gate has been failing closed."""

from datetime import timedelta
from typing import ClassVar

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from core.admin import (
    AuditAdmin,
    TranslatableText,
    change_link,
    compact_time,
    explained,
    list_url,
    model_names,
    related_links,
)
from probe.models import ProbeJudgement
from probe.rules import Cause
from probe.selectors import failing_closed_bots_list, misconfigured_bots_list

FAILING_WINDOW = timedelta(hours=24)
model_names(ProbeJudgement, _("probe judgement"), _("probe judgements"))

# Each gate exit (probe.services' exit table) in an operator's words; the code stays beside it in small print.
CAUSE_SENTENCES = {
    Cause.MODE_OFF: _("The bot's probe mode is off: the wake ran without the gate."),
    Cause.NOT_CONFIGURED: _("Probe mode inherit, and the owner has no title model: the wake ran without the gate."),
    Cause.FALLBACK_LOOKUP_FAILED: _(
        "Probe mode inherit, and reading the owner's title model failed: the wake ran without the gate."
    ),
    Cause.INHERITED_MODEL_CANNOT_CALL_TOOLS: _(
        "Probe mode inherit, and the owner's title model cannot call tools, so it cannot judge: the wake ran "
        "without the gate."
    ),
    Cause.CONFIG_UNREADABLE: _(
        "The gate's settings could not be read (or the judge's API key cannot be decrypted): the bot stayed silent "
        "(failed closed)."
    ),
    Cause.MODEL_UNRESOLVABLE: _(
        "The probe model is missing or disabled, or its provider is disabled: the bot stayed silent (failed closed)."
    ),
    Cause.CONFIGURED_MODEL_CANNOT_CALL_TOOLS: _(
        "The chosen probe model cannot call tools, so it cannot judge: the bot stayed silent (failed closed)."
    ),
    Cause.MODEL_WINDOW_TOO_SMALL: _(
        "The probe model's context window cannot hold a minimal judge request: the bot stayed silent (failed closed)."
    ),
    Cause.NO_VALID_WINDOW: _("Nothing in this wake could be judged: the bot stayed silent (failed closed)."),
    Cause.CREDENTIALS_UNRESOLVABLE: _(
        "No client could be built for the judge's provider (its credentials): the bot stayed silent (failed closed)."
    ),
    Cause.MODEL_CALL_FAILED: _(
        "The call to the probe model failed (provider error, timeout or overflow): the bot stayed silent (failed "
        "closed); an error worth retrying retries the wake."
    ),
    Cause.JUDGED: _("The probe model judged the wake; the outcome says whether the bot spoke."),
}
PROBE_MODE_WORDS = {
    "inherit": _("inherit (the owner's title model)"),
    "off": _("off (no gate)"),
    "model": _("model (the bot's probe model)"),
}


def cause_explained(cause: str) -> str:
    """A gate cause as a sentence with its code; an unknown code (an older row) as the code alone."""
    sentence = CAUSE_SENTENCES.get(cause)
    return explained(sentence, cause) if sentence is not None else cause


def probe_mode_explained(mode: str) -> TranslatableText:
    """The probe mode recorded on a judgement, in words; rows from before the field have none."""
    if not mode:
        return _("(not recorded)")
    return explained(PROBE_MODE_WORDS.get(mode, mode), mode)


@admin.register(ProbeJudgement)
class ProbeJudgementAdmin(AuditAdmin):
    """Read-only: judgements are records of what the gate decided, written only by probe_gate_run."""

    # Whether the gate ran and whether it activated (the outcome says it) are filters, not columns: the list has
    # to fit 1440 px beside the sidebar.
    list_display = [
        "created",
        "bot",
        "cause_code",
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
    # A tuple, so that the one sequence type-checks as both Django options (fields also takes nested groups).
    fields: ClassVar[tuple[str, ...]] = (
        "related",
        "bot",
        "created_at",
        "cause_in_words",
        "outcome",
        "gate_ran",
        "activated",
        "reason",
        "error",
        "probe_mode_in_words",
        "probe_model_name",
        "model",
        "input_tokens",
        "output_tokens",
        "duration_ms",
        "thread",
        "turn",
        "wake",
    )
    readonly_fields = fields
    change_list_template = "admin/probe/probejudgement/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProbeJudgement]:
        return super().get_queryset(request).annotate(total_tokens=F("input_tokens") + F("output_tokens"))

    @admin.display(description=_("related"))
    def related(self, judgement: ProbeJudgement) -> str:
        links = [
            (reverse("admin:agents_bot_change", args=[judgement.bot_id]), _("bot")),
            (list_url("probe.probejudgement", bot__id__exact=judgement.bot_id), _("the bot's judgements")),
        ]
        if judgement.wake_id is not None:
            links += [
                (reverse("admin:feishu_discusswake_explain", args=[judgement.wake_id]), _("wake (explain)")),
                (list_url("probe.probejudgement", wake_id=judgement.wake_id), _("judgements of this wake")),
            ]
        if judgement.turn_id is not None:
            links += [
                (reverse("admin:agents_turn_change", args=[judgement.turn_id]), _("turn")),
                (reverse("admin:feishu_turn_explain", args=[judgement.turn_id]), _("turn (explain)")),
            ]
        return related_links(links)

    # The list keeps the short code (the sentence is its tooltip): sentences would push the columns out of sight.
    @admin.display(description=_("cause"), ordering="cause")
    def cause_code(self, judgement: ProbeJudgement) -> str:
        return format_html('<span title="{}">{}</span>', CAUSE_SENTENCES.get(judgement.cause, ""), judgement.cause)

    @admin.display(description=_("cause"))
    def cause_in_words(self, judgement: ProbeJudgement) -> str:
        return cause_explained(judgement.cause)

    @admin.display(description=_("probe mode at the time"))
    def probe_mode_in_words(self, judgement: ProbeJudgement) -> TranslatableText:
        return probe_mode_explained(judgement.probe_mode)

    @admin.display(description=_("wake"))
    def wake(self, judgement: ProbeJudgement) -> str:
        # The wake lives in the bridge, which probe does not import: linked by its admin URL's name only.
        if judgement.wake_id is None:
            return "-"
        url = reverse("admin:feishu_discusswake_explain", args=[judgement.wake_id])
        return format_html('<a href="{}">{}</a>', url, judgement.wake_id)

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
        return format_html("{} / {}", self.wake(judgement), change_link(judgement.turn, judgement.turn_id))

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
        # admin_view only checks is_staff: the rows are judgements, and the misconfigured list is bots.
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows = failing_closed_bots_list(since=FAILING_WINDOW)
        may_see_bots = request.user.has_perm("agents.view_bot")
        changelist = reverse("admin:probe_probejudgement_changelist")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Bots whose probe gate failed closed in the last 24 hours"),
            "rows": [
                {
                    "row": row,
                    "bot_url": reverse("admin:agents_bot_change", args=[row.bot_id]),
                    "cause": cause_explained(row.cause),
                    "judgements_url": f"{changelist}?bot__id__exact={row.bot_id}&cause={row.cause}",
                }
                for row in rows
            ],
            "since": timezone.now() - FAILING_WINDOW,
            "may_see_bots": may_see_bots,
            # G2: bots that cannot answer as configured, listed with the cause instead of staying silent.
            "misconfigured": [
                {"row": row, "bot_url": reverse("admin:agents_bot_change", args=[row.bot_id])}
                for row in (misconfigured_bots_list() if may_see_bots else [])
            ],
        }
        return TemplateResponse(request, "admin/probe/failing_closed.html", context)
