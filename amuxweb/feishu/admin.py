"""Admin lists of the bridge's durable state: inbound events (with "reprocess"), deliveries, discuss wakes.

All three are audit records (amuxweb.admin.AuditAdmin): read-only, deleted only by a superuser. Lists keep to
the columns an operator scans, so they fit 1440 px beside the sidebar; the rest is on the record's page.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from amuxweb.admin import AuditAdmin, change_link, compact_time, model_names, pretty_json
from amuxweb.feishu.explain import ExplainNotFound, wake_explain_data
from amuxweb.feishu.models import DiscussWake, InboundEvent, OutboundDelivery

MAX_ERROR_COLUMN_CHARS = 60
model_names(InboundEvent, _("inbound event"), _("inbound events"))
model_names(DiscussWake, _("discuss wake"), _("discuss wakes"))
model_names(OutboundDelivery, _("outbound delivery"), _("outbound deliveries"))


def short(text: str, limit: int = MAX_ERROR_COLUMN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@admin.register(InboundEvent)
class InboundEventAdmin(AuditAdmin):
    list_display = ["id", "bot", "event_type", "message_id", "status", "attempts", "short_error", "received"]
    list_filter = ["status", "event_type", "bot"]
    search_fields = ["message_id", "event_id"]
    date_hierarchy = "received_at"
    list_select_related = ["bot"]
    readonly_fields = [
        "bot",
        "event_id",
        "message_id",
        "event_type",
        "status",
        "attempts",
        "error",
        "received_at",
        "claimed_at",
        "processed_at",
        "payload_pretty",
    ]
    exclude = ["payload"]
    actions = ["reprocess"]

    @admin.display(description=_("error"))
    def short_error(self, obj: InboundEvent) -> str:
        return short(obj.error)

    @admin.display(description=_("received"), ordering="received_at")
    def received(self, obj: InboundEvent) -> str:
        return compact_time(obj.received_at)

    @admin.display(description=_("payload"))
    def payload_pretty(self, obj: InboundEvent) -> str:
        return pretty_json(obj.payload)

    def has_reprocess_permission(self, request: HttpRequest) -> bool:
        # Re-running an event is an operation, not an edit: the record itself stays read-only.
        return request.user.has_perm("feishu.change_inboundevent")

    @admin.action(description=_("Reprocess the selected events"), permissions=["reprocess"])
    def reprocess(self, request: HttpRequest, queryset: QuerySet[InboundEvent]) -> None:
        from amuxweb.feishu.services import inbound_events_reprocess

        count = inbound_events_reprocess(event_pks=list(queryset.values_list("pk", flat=True)))
        message = ngettext(
            "%(count)d event queued for processing again.", "%(count)d events queued for processing again.", count
        )
        self.message_user(request, message % {"count": count}, messages.SUCCESS)


@admin.register(OutboundDelivery)
class OutboundDeliveryAdmin(AuditAdmin):
    list_display = ["id", "bot", "turn_link", "chunk_index", "status", "feishu_message_id", "attempts", "created"]
    list_filter = ["status", "bot", "reply_in_thread"]
    search_fields = ["uuid", "feishu_message_id", "reply_to_message_id", "chat_id"]
    list_select_related = ["bot", "turn"]
    readonly_fields = [field.name for field in OutboundDelivery._meta.fields]

    @admin.display(description=_("turn"), ordering="turn")
    def turn_link(self, obj: OutboundDelivery):
        return change_link(obj.turn, obj.turn_id)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: OutboundDelivery) -> str:
        return compact_time(obj.created_at)


@admin.register(DiscussWake)
class DiscussWakeAdmin(AuditAdmin):
    list_display = ["id", "bot", "chat_id", "root_msg_id", "status", "attempts", "due", "turn_link"]
    list_filter = ["status", "bot"]
    search_fields = ["chat_id", "root_msg_id", "last_message_id"]
    list_select_related = ["bot", "turn"]
    readonly_fields = [field.name for field in DiscussWake._meta.fields]

    @admin.display(description=_("due"), ordering="due_at")
    def due(self, obj: DiscussWake) -> str:
        return compact_time(obj.due_at)

    @admin.display(description=_("turn"), ordering="turn")
    def turn_link(self, obj: DiscussWake):
        return change_link(obj.turn, obj.turn_id)


# --- The one-screen explain page of a wake or turn: gate, context decision, delivery (engineer d, P11) ------
class DiscussWakeExplainAdmin(DiscussWakeAdmin):
    list_display = [*DiscussWakeAdmin.list_display, "explain_link"]

    @admin.display(description=_("explain"))
    def explain_link(self, obj: DiscussWake) -> str:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:feishu_discusswake_explain", args=[obj.pk]), _("explain")
        )

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:wake_id>/explain/", view(self.explain_view), name="feishu_discusswake_explain"),
            path("turn/<int:turn_id>/explain/", view(self.explain_view), name="feishu_turn_explain"),
        ] + super().get_urls()

    def explain_view(self, request: HttpRequest, wake_id: int | None = None, turn_id: int | None = None):
        # admin_view only checks is_staff: the page shows context the operator may not be allowed to read.
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            explain = wake_explain_data(wake_id=wake_id, turn_id=turn_id)
        except ExplainNotFound as error:
            raise Http404(str(error)) from error
        title = _("Wake %(id)s") % {"id": wake_id} if wake_id is not None else _("Turn %(id)s") % {"id": turn_id}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "explain": explain,
        }
        return TemplateResponse(request, "admin/feishu/wake_explain.html", context)


admin.site.unregister(DiscussWake)
admin.site.register(DiscussWake, DiscussWakeExplainAdmin)
