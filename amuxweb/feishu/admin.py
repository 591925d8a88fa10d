"""Admin lists of the bridge's durable state: inbound events (with "reprocess"), deliveries, discuss wakes."""

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from amuxweb.feishu.models import DiscussWake, InboundEvent, OutboundDelivery


def _pretty(value) -> str:
    return format_html(
        '<pre style="white-space: pre-wrap; max-width: 100em">{}</pre>', json.dumps(value, indent=2, ensure_ascii=False)
    )


class ReadOnlyAdmin(admin.ModelAdmin):
    """The rows are written by the bridge only; an operator reads them and uses the actions."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(InboundEvent)
class InboundEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "bot", "event_type", "message_id", "status", "attempts", "short_error", "received_at"]
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

    @admin.display(description="error")
    def short_error(self, obj: InboundEvent) -> str:
        return obj.error[:80]

    @admin.display(description="payload")
    def payload_pretty(self, obj: InboundEvent) -> str:
        return _pretty(obj.payload)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        # the reprocess action needs change permission; the form itself is all read-only fields
        return request.user.has_perm("feishu.change_inboundevent")

    @admin.action(description="Reprocess the selected events")
    def reprocess(self, request: HttpRequest, queryset: QuerySet[InboundEvent]) -> None:
        from amuxweb.feishu.services import inbound_events_reprocess

        count = inbound_events_reprocess(event_pks=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} event(s) queued for processing again.", messages.SUCCESS)


@admin.register(OutboundDelivery)
class OutboundDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "bot", "turn", "chunk_index", "status", "reply_in_thread", "feishu_message_id", "created_at"]
    list_filter = ["status", "bot", "reply_in_thread"]
    search_fields = ["uuid", "feishu_message_id", "reply_to_message_id", "chat_id"]
    list_select_related = ["bot", "turn"]
    readonly_fields = [field.name for field in OutboundDelivery._meta.fields]


@admin.register(DiscussWake)
class DiscussWakeAdmin(ReadOnlyAdmin):
    list_display = ["id", "bot", "chat_id", "root_msg_id", "status", "attempts", "due_at", "turn", "updated_at"]
    list_filter = ["status", "bot"]
    search_fields = ["chat_id", "root_msg_id", "last_message_id"]
    list_select_related = ["bot", "turn"]
    readonly_fields = [field.name for field in DiscussWake._meta.fields]


# --- The one-screen explain page of a wake or turn: gate, context decision, delivery (engineer d, P11) ------
class DiscussWakeExplainAdmin(DiscussWakeAdmin):
    list_display = [*DiscussWakeAdmin.list_display, "explain_link"]

    @admin.display(description="explain")
    def explain_link(self, obj: DiscussWake) -> str:
        from django.urls import reverse

        return format_html('<a href="{}">explain</a>', reverse("admin:feishu_discusswake_explain", args=[obj.pk]))

    def get_urls(self):
        from django.urls import path

        view = self.admin_site.admin_view
        return [
            path("<int:wake_id>/explain/", view(self.explain_view), name="feishu_discusswake_explain"),
            path("turn/<int:turn_id>/explain/", view(self.explain_view), name="feishu_turn_explain"),
        ] + super().get_urls()

    def explain_view(self, request: HttpRequest, wake_id: int | None = None, turn_id: int | None = None):
        from django.core.exceptions import PermissionDenied
        from django.http import Http404
        from django.template.response import TemplateResponse

        from amuxweb.feishu.explain import ExplainNotFound, wake_explain_data

        # admin_view only checks is_staff: the page shows context the operator may not be allowed to read.
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            explain = wake_explain_data(wake_id=wake_id, turn_id=turn_id)
        except ExplainNotFound as error:
            raise Http404(str(error)) from error
        title = f"Wake {wake_id}" if wake_id is not None else f"Turn {turn_id}"
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "explain": explain,
        }
        return TemplateResponse(request, "admin/feishu/wake_explain.html", context)


admin.site.unregister(DiscussWake)
admin.site.register(DiscussWake, DiscussWakeExplainAdmin)
