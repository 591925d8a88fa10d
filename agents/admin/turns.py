"""ModelAdmins for turns and automations.

The turn detail page is read-only and shows what an operator needs to answer "what did the model get and
what did it say": the request as sent, the output, usage, timings and every attempt.
"""

from typing import ClassVar

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from agents.admin.approvals import ToolApprovalInline
from agents.admin.tool_calls import TurnToolCallInline
from agents.models import Automation, Turn
from agents.principals import acts_for_in_words
from agents.services.automations import automation_delete, automation_run_now, automation_save
from core.admin import AuditAdmin, compact_time, dict_table, list_url, pretty_json, related_links

MAX_ERROR_COLUMN_CHARS = 64


def pre(text: str) -> str:
    return format_html('<pre style="white-space: pre-wrap; max-width: 100em">{}</pre>', text or "-")


@admin.register(Turn)
class TurnAdmin(AuditAdmin):
    list_display = [
        "id",
        "status",
        "trigger",
        "bot",
        "thread_link",
        "duration",
        "tokens",
        "short_error",
        "queued",
    ]
    list_filter = ["status", "trigger", "bot"]
    search_fields = ["source_message_id", "bot__slug", "error"]
    list_select_related = ["bot", "thread"]
    date_hierarchy = "queued_at"
    # A tuple, so that the one sequence type-checks as both Django options (fields also takes nested groups).
    fields: ClassVar[tuple[str, ...]] = (
        "related",
        "bot",
        "thread_link",
        "trigger",
        "acts_for",
        "source_message_id",
        "status",
        "error",
        "attempts",
        "delivery_attempts",
        "redaction_count",
        "queued_at",
        "started_at",
        "replied_at",
        "finished_at",
        "duration",
        "user_message_view",
        "output",
        "usage_view",
        "model_input_view",
        "retry_history_view",
        "context_decision_link",
    )
    readonly_fields = fields
    inlines = [TurnToolCallInline, ToolApprovalInline]

    @admin.display(description=_("acts for"))
    def acts_for(self, turn: Turn) -> str:
        """U1: the person this turn acts for, the door they came through and why they were admitted (U2)."""
        words = acts_for_in_words(turn)
        return f"{words} · {gettext('admitted')}" if (turn.admission or {}).get("allowed") else words

    @admin.display(description=_("queued"), ordering="queued_at")
    def queued(self, turn: Turn) -> str:
        return compact_time(turn.queued_at)

    @admin.display(description=_("related"))
    def related(self, turn: Turn) -> str:
        # probe, threadcontext and the bridge are not imported by agents: linked by their admin URL names only.
        links = [
            (reverse("admin:feishu_turn_explain", args=[turn.pk]), _("explain (gate, context, delivery)")),
            (reverse("admin:agents_bot_change", args=[turn.bot_id]), _("bot")),
            (list_url("feishu.discusswake", turn__id__exact=turn.pk), _("wake")),
            (list_url("probe.probejudgement", turn__id__exact=turn.pk), _("judgements")),
        ]
        if turn.context_decision_id:
            url = reverse("admin:threadcontext_threadcontextdecision_explain", args=[turn.context_decision_id])
            links.append((url, _("context decision")))
        if turn.user_message_id:
            links.append((reverse("admin:agents_message_change", args=[turn.user_message_id]), _("user message")))
        if turn.reply_message_id:
            links.append((reverse("admin:agents_message_change", args=[turn.reply_message_id]), _("reply")))
        links.append((list_url("feishu.outbounddelivery", turn__id__exact=turn.pk), _("deliveries")))
        if turn.source_message_id and ":" not in turn.source_message_id:
            # A Feishu message id (REST and automation turns have "rest:…" / "automation:…"): its inbound event.
            links.append((list_url("feishu.inboundevent", message_id=turn.source_message_id), _("inbound event")))
        return related_links(links)

    @admin.display(description=_("Context decision"))
    def context_decision_link(self, turn: Turn) -> str:
        # The decision lives in threadcontext, which agents does not import: linked by its admin URL's name.
        if not turn.context_decision_id:
            return "-"
        url = reverse("admin:threadcontext_threadcontextdecision_explain", args=[turn.context_decision_id])
        return format_html(
            '<a href="{}">{}</a>', url, _("decision %(id)s (explain)") % {"id": turn.context_decision_id}
        )

    @admin.display(description=_("Thread"))
    def thread_link(self, turn: Turn) -> str:
        url = reverse("admin:agents_thread_change", args=[turn.thread_id])
        return format_html('<a href="{}">{}</a>', url, turn.thread_id)

    @admin.display(description=_("Duration"))
    def duration(self, turn: Turn) -> str:
        return "-" if turn.duration_ms is None else f"{turn.duration_ms} ms"

    @admin.display(description=_("Tokens in / out"))
    def tokens(self, turn: Turn) -> str:
        if not turn.usage:
            return "-"
        return f"{turn.usage.get('input_tokens', 0)} / {turn.usage.get('output_tokens', 0)}"

    @admin.display(description=_("Error"))
    def short_error(self, turn: Turn) -> str:
        if len(turn.error) <= MAX_ERROR_COLUMN_CHARS:
            return turn.error
        return turn.error[: MAX_ERROR_COLUMN_CHARS - 1] + "…"

    @admin.display(description=_("User message (what the person wrote)"))
    def user_message_view(self, turn: Turn) -> str:
        # What the model saw (the prompt with its thread context) is in the model input below, shown there once.
        message = turn.user_message
        return "-" if message is None else pre(message.content)

    @admin.display(description=_("Output"))
    def output(self, turn: Turn) -> str:
        return pre(turn.reply_message.content) if turn.reply_message else "-"

    @admin.display(description=_("Usage"))
    def usage_view(self, turn: Turn) -> str:
        return dict_table(turn.usage)

    @admin.display(description=_("Model input (as sent)"))
    def model_input_view(self, turn: Turn) -> str:
        # The runner stores the messages twice: neutral (`messages`) and in the provider's body (`request`). The
        # page shows them once: the request as sent when there is one, the neutral messages otherwise.
        model_input = dict(turn.model_input or {})
        body = model_input.pop("request", None) if "request" in model_input else model_input.pop("messages", None)
        model_input.pop("messages", None)
        return format_html("{}{}", dict_table(model_input), pretty_json(body))

    @admin.display(description=_("Attempts and retries"))
    def retry_history_view(self, turn: Turn) -> str:
        return pretty_json(turn.retry_history)


@admin.register(Automation)
class AutomationAdmin(admin.ModelAdmin):
    # Issue 25: automations made with /schedule show who made them and where they post (chat, topic).
    list_display = [
        "name",
        "bot",
        "schedule",
        "is_enabled",
        "feishu_chat_id",
        "feishu_topic_message_id",
        "created_by_open_id",
        "thread_link",
        "created_at",
    ]
    list_filter = ["is_enabled", "bot", ("created_by_open_id", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prompt", "bot__slug", "feishu_chat_id", "created_by_open_id"]
    list_select_related = ["bot", "schedule", "thread"]
    fields = [
        "bot",
        "name",
        "prompt",
        "schedule",
        "feishu_chat_id",
        "feishu_topic_message_id",
        "created_by_open_id",
        "feishu_chat_type",
        "is_enabled",
        "thread_link",
        "periodic_task",
    ]
    # U4: who made a /schedule and in which kind of chat decide its admission at every run: not edited here.
    readonly_fields = ["thread_link", "periodic_task", "created_by_open_id", "feishu_chat_type"]
    actions = ["run_now"]

    @admin.display(description=_("Thread"))
    def thread_link(self, automation: Automation) -> str:
        if not automation.thread_id:
            return gettext("- (created on the first run)")
        url = reverse("admin:agents_thread_change", args=[automation.thread_id])
        return format_html('<a href="{}">{}</a>', url, automation.thread)

    def save_model(self, request, obj: Automation, form, change: bool) -> None:
        automation_save(automation=obj)  # saves and syncs the beat schedule

    def delete_model(self, request, obj: Automation) -> None:
        automation_delete(automation=obj)

    def delete_queryset(self, request, queryset: QuerySet[Automation]) -> None:
        for automation in queryset:
            automation_delete(automation=automation)

    @admin.action(description=_("Run now"))
    def run_now(self, request: HttpRequest, queryset: QuerySet[Automation]) -> None:
        queued = 0
        for automation in queryset:
            if automation_run_now(automation=automation):
                queued += 1
                continue
            # The broker is down: say so instead of a 500.
            message = gettext("%(name)s: the task queue is unreachable, try again later.")
            self.message_user(request, message % {"name": automation.name}, messages.ERROR)
        if queued:
            message = ngettext("Queued %(count)d automation run.", "Queued %(count)d automation runs.", queued)
            self.message_user(request, message % {"count": queued}, messages.SUCCESS)
