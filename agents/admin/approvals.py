"""Approvals of tool calls (H1) in the admin: every pending approval in one list, and on each turn's page its
approvals with their decisions (who, how, when). Read-only: a decision is made on the card or through the API."""

from typing import ClassVar

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.models import ToolApproval
from agents.services.turns.approvals import arguments_shown, decision_of
from core.admin import AuditAdmin, compact_time


def decision_text(approval: ToolApproval) -> str:
    decision = decision_of(approval)
    if decision is None:
        return gettext("pending until %(time)s") % {"time": compact_time(approval.expires_at)}
    who = decision.decided_by or decision.get_via_display()
    return f"{decision.get_outcome_display()} · {who} · {compact_time(decision.decided_at)}"


class DecisionFilter(admin.SimpleListFilter):
    title = _("decision")
    parameter_name = "decided"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("no", gettext("pending")), ("yes", gettext("decided"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(decision__isnull=self.value() == "no")
        return queryset


@admin.register(ToolApproval)
class ToolApprovalAdmin(AuditAdmin):
    list_display = ["id", "turn_link", "server", "tool", "requested_by", "decision_view", "created"]
    list_filter = [DecisionFilter, "server"]
    search_fields = ["tool", "server", "requested_by", "turn__bot__slug"]
    list_select_related = ["turn", "decision"]
    fields: ClassVar[tuple[str, ...]] = (
        "turn_link",
        "server",
        "tool",
        "arguments_view",
        "requested_by",
        "expires_at",
        "card_message_id",
        "decision_view",
    )
    readonly_fields = fields

    @admin.display(description=_("turn"))
    def turn_link(self, approval: ToolApproval) -> str:
        url = reverse("admin:agents_turn_change", args=[approval.turn_id])
        return format_html('<a href="{}">{}</a>', url, approval.turn_id)

    @admin.display(description=_("decision"))
    def decision_view(self, approval: ToolApproval) -> str:
        return decision_text(approval)

    @admin.display(description=_("Arguments"))
    def arguments_view(self, approval: ToolApproval) -> str:
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', arguments_shown(approval.arguments))

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, approval: ToolApproval) -> str:
        return compact_time(approval.created_at)


class ToolApprovalInline(admin.TabularInline):
    """The turn page's approvals and their decisions, in order; read-only."""

    model = ToolApproval
    extra = 0
    can_delete = False
    verbose_name = _("approval")
    verbose_name_plural = _("Approvals")
    fields: ClassVar[tuple[str, ...]] = ("step", "index", "server", "tool", "requested_by", "decision_view")
    readonly_fields = fields
    ordering = ["step", "index"]

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description=_("decision"))
    def decision_view(self, approval: ToolApproval) -> str:
        return decision_text(approval)
