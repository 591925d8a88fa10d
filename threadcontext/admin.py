"""Admin for the thread-context store, with an explain page per decision (ARCHITECTURE C12).

Events, items and decisions are records of what happened: read-only here (retention removes them). Workspaces and
session bindings are the operator's settings.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from amuxweb.admin import AuditAdmin, compact_time, model_names
from threadcontext.explain import decision_explain_data
from threadcontext.models import SessionBinding, ThreadContextDecision, ThreadContextItem, ThreadEvent, Workspace
from threadcontext.selection import text_preview
from threadcontext.selectors import workspace_cache_forget

ROOT_FILTER_CHOICES = 30

model_names(Workspace, _("workspace"), _("workspaces"))
model_names(ThreadEvent, _("thread event"), _("thread events"))
model_names(ThreadContextItem, _("thread context item"), _("thread context items"))
model_names(ThreadContextDecision, _("context decision"), _("context decisions"))
model_names(SessionBinding, _("session binding"), _("session bindings"))


class WorkspaceFilter(admin.SimpleListFilter):
    """Decisions of one workspace: a (bot profile, chat) pair."""

    title = _("workspace")
    parameter_name = "workspace"

    def lookups(self, request, model_admin):
        return [(str(workspace.pk), f"{workspace.bot_profile} · {workspace}") for workspace in Workspace.objects.all()]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if not self.value().isdigit():
            return queryset.none()
        workspace = Workspace.objects.filter(pk=int(self.value())).first()
        if workspace is None:
            return queryset.none()
        return queryset.filter(bot_profile=workspace.bot_profile, chat_id=workspace.chat_id)


class RootFilter(admin.SimpleListFilter):
    """Decisions of one topic (the most recent roots are offered; any root works as ?root_msg_id=)."""

    title = _("topic root")
    parameter_name = "root_msg_id"

    def lookups(self, request, model_admin):
        roots = ThreadContextDecision.objects.order_by("-id").values_list("root_msg_id", flat=True)[:200]
        unique = list(dict.fromkeys(roots))[:ROOT_FILTER_CHOICES]
        if self.value() and self.value() not in unique:
            unique.insert(0, self.value())
        return [(root, root) for root in unique]

    def queryset(self, request, queryset):
        return queryset.filter(root_msg_id=self.value()) if self.value() else queryset


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "bot_profile",
        "chat_id",
        "mode",
        "reply_mode",
        "chat_mode",
        "thread_context_limit",
        "session_scope",
        "is_created_automatically",
        "retired_at",
    ]
    list_filter = ["mode", "reply_mode", "is_created_automatically", "session_scope", "bot_profile"]
    search_fields = ["name", "chat_id", "bot_profile"]
    readonly_fields = [
        "chat_mode",
        "group_message_type",
        "chat_mode_checked_at",
        "is_created_automatically",
        "retired_at",
    ]
    fieldsets = [
        (None, {"fields": ["bot_profile", "chat_id", "name", "mode", "owner_open_id", "thread_context_limit"]}),
        ("Reply policy (G5)", {"fields": ["reply_mode", "respond_to_at_all", "allowed_open_ids"]}),
        ("Sessions and context", {"fields": ["session_scope", "topic_root_enabled", "shared_thread_enabled"]}),
        (
            "From Feishu",
            {
                "fields": [
                    "chat_mode",
                    "group_message_type",
                    "chat_mode_checked_at",
                    "is_created_automatically",
                    "retired_at",
                ]
            },
        ),
    ]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        # The reply policy is read from a cache (G5): the next message of this group reads the saved row.
        workspace_cache_forget(bot_profile=obj.bot_profile, chat_id=obj.chat_id)
        if change and ("bot_profile" in form.changed_data or "chat_id" in form.changed_data):
            workspace_cache_forget(
                bot_profile=form.initial.get("bot_profile", ""), chat_id=form.initial.get("chat_id", "")
            )

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        workspace_cache_forget(bot_profile=obj.bot_profile, chat_id=obj.chat_id)


@admin.register(ThreadEvent)
class ThreadEventAdmin(AuditAdmin):
    list_display = ["id", "event_type", "bot_profile", "chat_id", "root_msg_id", "message_id", "actor_type", "preview"]
    list_filter = ["event_type", "actor_type", "bot_profile"]
    search_fields = ["root_msg_id", "message_id", "chat_id"]

    @admin.display(description=_("text"))
    def preview(self, obj: ThreadEvent) -> str:
        return text_preview(obj.text)


@admin.register(ThreadContextItem)
class ThreadContextItemAdmin(AuditAdmin):
    list_display = ["id", "item_type", "author_label", "bridge_id", "root_msg_id", "chars", "preview"]
    list_filter = ["item_type", "bridge_id"]
    search_fields = ["root_msg_id", "message_id", "chat_id"]

    @admin.display(description=_("chars"))
    def chars(self, obj: ThreadContextItem) -> int:
        return len(obj.text)

    @admin.display(description=_("text"))
    def preview(self, obj: ThreadContextItem) -> str:
        return text_preview(obj.text)


@admin.register(ThreadContextDecision)
class ThreadContextDecisionAdmin(AuditAdmin):
    list_display = ["id", "created", "bot_profile", "chat_id", "root_msg_id", "message_id", "selected", "explain"]
    list_filter = [WorkspaceFilter, RootFilter, "workspace_mode", "bot_profile"]
    search_fields = ["root_msg_id", "message_id", "chat_id", "request_text"]

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: ThreadContextDecision) -> str:
        return compact_time(obj.created_at)

    @admin.display(description=_("selected"))
    def selected(self, obj: ThreadContextDecision) -> int:
        return len(obj.selected_item_ids or [])

    @admin.display(description=_("explain"))
    def explain(self, obj: ThreadContextDecision) -> str:
        url = reverse("admin:threadcontext_threadcontextdecision_explain", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("explain"))

    def get_urls(self):
        return [
            path(
                "<int:decision_id>/explain/",
                self.admin_site.admin_view(self.explain_view),
                name="threadcontext_threadcontextdecision_explain",
            )
        ] + super().get_urls()

    def explain_view(self, request: HttpRequest, decision_id: int) -> HttpResponse:
        decision = get_object_or_404(ThreadContextDecision, pk=decision_id)
        if not self.has_view_permission(request, decision):
            return HttpResponse(status=403)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Context decision %(id)s") % {"id": decision.pk},
            "decision": decision,
            "explain": decision_explain_data(decision=decision),
        }
        return TemplateResponse(request, "admin/threadcontext/decision_explain.html", context)


@admin.register(SessionBinding)
class SessionBindingAdmin(admin.ModelAdmin):
    list_display = ["id", "bot_profile", "chat_id", "scope_key", "agent_thread_id", "topic_root_prompt_delivered"]
    list_filter = ["topic_root_prompt_delivered", "bot_profile", ("retired_at", admin.EmptyFieldListFilter)]
    search_fields = ["chat_id", "scope_key"]
    readonly_fields = ["created_at"]
