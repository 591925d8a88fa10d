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

from core.admin import (
    AuditAdmin,
    OpenIdListField,
    TranslatableText,
    compact_time,
    dict_table,
    explained,
    list_url,
    model_names,
    related_links,
)
from threadcontext.explain import decision_explain_data
from threadcontext.models import (
    ContextClear,
    ContextPin,
    SessionBinding,
    ThreadContextDecision,
    ThreadContextItem,
    ThreadEvent,
    Workspace,
)
from threadcontext.selectors import workspace_cache_forget
from threadcontext.trimming import (
    EXCLUDED_CHAR_BUDGET,
    EXCLUDED_CLEARED,
    EXCLUDED_CURRENT_REQUEST,
    EXCLUDED_DUPLICATE,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_NOT_IN_MODE,
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_PIN_OVER_BUDGET,
    EXCLUDED_SLASH_COMMAND,
    EXCLUDED_SUMMARISED,
    EXCLUDED_SUPERSEDED,
    ITEM_HUMAN_MESSAGE,
    MODE_SHARED,
    text_preview,
)

ROOT_FILTER_CHOICES = 30

# Each exclusion code of the selector (threadcontext.trimming) in an operator's words. not_in_mode covers three
# different causes; `exclusion_explained` tells them apart from the decision's diagnostics and mode.
EXCLUSION_SENTENCES = {
    EXCLUDED_OWN_OUTPUT: _("This bot's own earlier reply: a bot is never fed its own output."),
    EXCLUDED_ITEM_LIMIT: _(
        "Older than the newest %(item_limit)s items this workspace keeps (its thread context limit)."
    ),
    EXCLUDED_CHAR_BUDGET: _(
        "Did not fit the context budget of %(max_chars)s characters (or is older than an item that did not)."
    ),
    EXCLUDED_SLASH_COMMAND: _("The request is a slash command, and a command carries no thread context."),
    EXCLUDED_CURRENT_REQUEST: _("The request's own message: it is sent as the question, not as context."),
    EXCLUDED_DUPLICATE: _("The same Feishu message is already selected as another kind of item."),
    EXCLUDED_SUMMARISED: _("Covered by the summary this request carries (it is in the summary's sources)."),
    EXCLUDED_SUPERSEDED: _("An older summary: the newest one covers what it covered."),
    EXCLUDED_CLEARED: _("Someone sent /context clear after it: it stays stored but is no longer carried."),
    EXCLUDED_PIN_OVER_BUDGET: _(
        "Pinned, but the pins alone were over the limit of %(item_limit)s items or %(max_chars)s characters: "
        "the newest pins were kept."
    ),
}
THREAD_CONTEXT_OFF_SENTENCE = _(
    "Shared thread context is off here (the workspace's setting, or the hub's AMUX_FEISHU_SHARED_THREAD_ENABLED "
    "when the workspace leaves it unset, or a group-wide session): nothing from the thread is injected."
)
OWNER_ONLY_SENTENCE = _("The workspace is owner only: other people's messages are not injected.")
NOT_IN_MODE_SENTENCE = _("Another bot's copy of this message, or a kind of item this workspace mode does not inject.")


MODE_NOT_APPLIED_SENTENCE = _(
    "Not applied: shared thread context is off here, and that setting wins over the mode. Turn it on in this "
    "workspace's page (Shared thread enabled), or hub-wide with AMUX_FEISHU_SHARED_THREAD_ENABLED."
)


def mode_in_words(*, mode: str, diagnostics: dict):
    """The workspace mode, and, when shared thread context is off, that the mode is not applied and why."""
    words = explained(Workspace.Mode(mode).label, mode) if mode in Workspace.Mode.values else mode
    if diagnostics.get("thread_context_enabled") is False:
        return format_html("{} — {}", words, MODE_NOT_APPLIED_SENTENCE)
    return words


def exclusion_explained(*, reason: str, item_type: str, mode: str, diagnostics: dict) -> str:
    """Why one item was left out, as a sentence with its code in small print."""
    if reason == EXCLUDED_NOT_IN_MODE:
        if diagnostics.get("thread_context_enabled") is False:
            sentence = THREAD_CONTEXT_OFF_SENTENCE
        elif item_type == ITEM_HUMAN_MESSAGE and mode != MODE_SHARED:
            sentence = OWNER_ONLY_SENTENCE
        else:
            sentence = NOT_IN_MODE_SENTENCE
        return explained(sentence, reason)
    template = EXCLUSION_SENTENCES.get(reason)
    if template is None:
        return reason
    limits = {"item_limit": diagnostics.get("item_limit", "?"), "max_chars": diagnostics.get("max_chars", "?")}
    return explained(template % limits, reason)


model_names(Workspace, _("workspace"), _("workspaces"))
model_names(ThreadEvent, _("thread event"), _("thread events"))
model_names(ThreadContextItem, _("thread context item"), _("thread context items"))
model_names(ThreadContextDecision, _("context decision"), _("context decisions"))
model_names(SessionBinding, _("session binding"), _("session bindings"))
model_names(ContextPin, _("context pin"), _("context pins"))
model_names(ContextClear, _("context clear"), _("context clears"))


class WorkspaceFilter(admin.SimpleListFilter):
    """Decisions of one workspace: a (bot profile, chat) pair."""

    title = _("workspace")
    parameter_name = "workspace"

    def lookups(self, request, model_admin):
        return [(str(workspace.pk), str(workspace)) for workspace in Workspace.objects.all()]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            return queryset.none()
        workspace = Workspace.objects.filter(pk=int(value)).first()
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
        value = self.value()
        if value and value not in unique:
            unique.insert(0, value)
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
        # The bots-together settings (bot_chain_limit, discuss_answers) are on the change page: the list fits 1440 px.
        "chat_mode",
        "thread_context_limit",
        "session_scope",
        "is_created_automatically",
        "retired_at",
    ]
    list_filter = ["mode", "reply_mode", "is_created_automatically", "session_scope", "bot_profile"]
    search_fields = ["name", "chat_id", "bot_profile"]
    readonly_fields = [
        "related",
        "chat_mode",
        "group_message_type",
        "chat_mode_checked_at",
        "is_created_automatically",
        "retired_at",
    ]
    fieldsets = [
        (
            None,
            {"fields": ["related", "bot_profile", "chat_id", "name", "mode", "owner_open_id", "thread_context_limit"]},
        ),
        (_("Reply policy"), {"fields": ["reply_mode", "respond_to_at_all", "allowed_open_ids"]}),
        (_("Chat commands"), {"fields": ["command_open_ids", "time_zone"]}),
        # B2/B3: the chat's rules for its bots together (the strictest of the chat's workspaces applies).
        (_("Bots together"), {"fields": ["bot_chain_limit", "discuss_answers"]}),
        (_("Sessions and context"), {"fields": ["session_scope", "topic_root_enabled", "shared_thread_enabled"]}),
        (
            _("From Feishu"),
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

    @admin.display(description=_("related"))
    def related(self, workspace: Workspace) -> str:
        if not workspace.pk:
            return "-"
        return related_links(
            [
                (list_url("agents.bot", slug=workspace.bot_profile), _("bot")),
                (list_url("threadcontext.threadcontextdecision", workspace=workspace.pk), _("context decisions")),
                (list_url("feishu.discusswake", chat_id=workspace.chat_id), _("discuss wakes of this chat")),
                (
                    list_url(
                        "threadcontext.sessionbinding", bot_profile=workspace.bot_profile, chat_id=workspace.chat_id
                    ),
                    _("session bindings"),
                ),
            ]
        )

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and db_field.name in ("allowed_open_ids", "command_open_ids"):  # one id per line, no JSON
            return OpenIdListField(required=False, label=field.label, help_text=field.help_text)
        return field

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


@admin.register(ContextPin)
class ContextPinAdmin(AuditAdmin):
    """K2: who pinned what for which bot's conversation (people pin and unpin from the chat)."""

    list_display = ["id", "created_at", "bot_profile", "chat_id", "root_msg_id", "message_id", "item", "pinned_by"]
    list_filter = ["bot_profile"]
    search_fields = ["root_msg_id", "message_id", "chat_id"]


@admin.register(ContextClear)
class ContextClearAdmin(AuditAdmin):
    """K1: each `/context clear`: the items up to `through_item_id` are left out from then on (none deleted)."""

    list_display = ["id", "created_at", "bot_profile", "chat_id", "root_msg_id", "through_item_id", "includes_pins"]
    list_filter = ["bot_profile", "includes_pins"]
    search_fields = ["root_msg_id", "chat_id"]


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

    def decision_neighbours(self, decision: ThreadContextDecision) -> list[tuple[str, TranslatableText]]:
        """The bot, its workspace, the turn that used the decision, the inbound event of its message, its topic."""
        links: list[tuple[str, TranslatableText]] = [
            (list_url("agents.bot", slug=decision.bot_profile), _("bot")),
            (list_url("agents.turn", context_decision_id=decision.pk), _("the turn that used it")),
        ]
        workspace = Workspace.objects.filter(bot_profile=decision.bot_profile, chat_id=decision.chat_id).first()
        if workspace is not None:
            links.append((reverse("admin:threadcontext_workspace_change", args=[workspace.pk]), _("workspace")))
        if decision.message_id:
            links.append((list_url("feishu.inboundevent", message_id=decision.message_id), _("inbound event")))
        if decision.root_msg_id:
            links.append(
                (
                    list_url("threadcontext.threadcontextdecision", root_msg_id=decision.root_msg_id),
                    _("decisions of this topic"),
                )
            )
        return links

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
        explain = decision_explain_data(decision=decision)
        excluded = [
            {
                **item,
                "why": exclusion_explained(
                    reason=item["reason"],
                    item_type=item["item_type"],
                    mode=explain["mode"],
                    diagnostics=explain["diagnostics"],
                ),
            }
            for item in explain["excluded"]
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Context decision %(id)s") % {"id": decision.pk},
            "decision": decision,
            "explain": explain,
            "excluded": excluded,
            "mode_in_words": mode_in_words(mode=explain["mode"], diagnostics=explain["diagnostics"]),
            "diagnostics_table": dict_table(explain["diagnostics"]),
            "related": related_links(self.decision_neighbours(decision)),
        }
        return TemplateResponse(request, "admin/threadcontext/decision_explain.html", context)


@admin.register(SessionBinding)
class SessionBindingAdmin(admin.ModelAdmin):
    list_display = ["id", "bot_profile", "chat_id", "scope_key", "agent_thread_id", "topic_root_prompt_delivered"]
    list_filter = ["topic_root_prompt_delivered", "bot_profile", ("retired_at", admin.EmptyFieldListFilter)]
    search_fields = ["chat_id", "scope_key"]
    readonly_fields = ["created_at"]
