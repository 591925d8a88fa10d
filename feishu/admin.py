"""Admin lists of the bridge's durable state: inbound events (with "reprocess"), deliveries, discuss wakes.

All three are audit records (core.admin.AuditAdmin): read-only, deleted only by a superuser. Lists keep to
the columns an operator scans, so they fit 1440 px beside the sidebar; the rest is on the record's page.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from core.admin import (
    AuditAdmin,
    TranslatableText,
    change_link,
    compact_time,
    dict_table,
    list_url,
    model_names,
    pretty_json,
    related_links,
)
from feishu.admission import REFUSED_OUTCOME_WORDS
from feishu.channel.doclinks import (
    IDENTITY_BOT,
    READER_BOT_OWNER,
    READER_CHAT_OWNER,
    READER_DM_LISTED,
    READER_LISTED,
    READER_NOBODY,
    READER_NOT_LISTED,
)
from feishu.explain import ExplainNotFound, wake_explain_data, wake_messages
from feishu.inbound.intake import inbound_events_reprocess
from feishu.models import DiscussWake, InboundEvent, OutboundDelivery
from probe.admin import cause_explained, probe_mode_explained
from threadcontext.admin import exclusion_explained

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
        "related",
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

    @admin.display(description=_("related"))
    def related(self, obj: InboundEvent) -> str:
        links = [(reverse("admin:agents_bot_change", args=[obj.bot_id]), _("bot"))] if obj.bot_id else []
        if obj.message_id:
            links += [
                (list_url("agents.turn", source_message_id=obj.message_id), _("turns of this message")),
                (list_url("agents.message", external_message_id=obj.message_id), _("messages")),
                (list_url("threadcontext.threadcontextdecision", message_id=obj.message_id), _("context decisions")),
                (reverse("admin:feishu_inboundevent_explain", args=[obj.pk]), _("explain")),
            ]
        return related_links(links)

    @admin.display(description=_("error"))
    def short_error(self, obj: InboundEvent) -> str:
        refused = REFUSED_OUTCOME_WORDS.get(obj.error)  # U2: a door's refusal, in words
        return str(refused) if refused is not None else short(obj.error)

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
    readonly_fields = ["related", *(field.name for field in OutboundDelivery._meta.fields)]

    @admin.display(description=_("related"))
    def related(self, obj: OutboundDelivery) -> str:
        links = [(reverse("admin:agents_bot_change", args=[obj.bot_id]), _("bot"))]
        if obj.turn_id:
            links += [
                (reverse("admin:agents_turn_change", args=[obj.turn_id]), _("turn")),
                (reverse("admin:feishu_turn_explain", args=[obj.turn_id]), _("turn (explain)")),
                (list_url("feishu.outbounddelivery", turn__id__exact=obj.turn_id), _("deliveries of this turn")),
            ]
        return related_links(links)

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
    # The messages as who wrote what (their ids in small print), not a bare list of om_ ids (issue 27).
    readonly_fields = [
        "related",
        "messages_listed",
        *(field.name for field in DiscussWake._meta.fields if field.name != "message_ids"),
    ]
    exclude = ["message_ids"]

    @admin.display(description=_("messages"))
    def messages_listed(self, obj: DiscussWake) -> str:
        listed = wake_messages(bridge_id=obj.bot.bridge_id, message_ids=list(obj.message_ids or []))
        if not listed:
            return "–"
        return format_html(
            '<ol class="amux-wake-messages">{}</ol>',
            format_html_join(
                "",
                '<li>{}{} <small class="amux-code">{}</small></li>',
                (
                    (
                        f"{message['author']}: " if message["author"] and message["preview"] else "",
                        message["preview"],
                        message["message_id"],
                    )
                    for message in listed
                ),
            ),
        )

    @admin.display(description=_("related"))
    def related(self, obj: DiscussWake) -> str:
        links = [
            (reverse("admin:agents_bot_change", args=[obj.bot_id]), _("bot")),
            (reverse("admin:feishu_discusswake_explain", args=[obj.pk]), _("explain")),
            (list_url("probe.probejudgement", wake_id=obj.pk), _("judgements of this wake")),
        ]
        if obj.turn_id:
            links.append((reverse("admin:agents_turn_change", args=[obj.turn_id]), _("turn")))
        if obj.message_ids:
            links.append(
                (list_url("feishu.inboundevent", message_id__in=",".join(obj.message_ids)), _("inbound events"))
            )
        return related_links(links)

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
            path("event/<int:event_id>/explain/", view(self.explain_view), name="feishu_inboundevent_explain"),
        ] + super().get_urls()

    def explain_view(
        self, request: HttpRequest, wake_id: int | None = None, turn_id: int | None = None, event_id: int | None = None
    ):
        # admin_view only checks is_staff: the page shows context the operator may not be allowed to read.
        if not self.has_view_permission(request):
            raise PermissionDenied
        # A turn's explain shows its input, output and context: it needs the turn's own view permission too
        # (issue 30, finding 8), asked before the lookup so that a denied viewer learns nothing of which exist.
        if turn_id is not None and not request.user.has_perm("agents.view_turn"):
            raise PermissionDenied
        try:
            explain = wake_explain_data(wake_id=wake_id, turn_id=turn_id, event_id=event_id)
        except ExplainNotFound as error:
            raise Http404(str(error)) from error
        if explain["turn"] is not None and not request.user.has_perm("agents.view_turn"):
            raise PermissionDenied
        if wake_id is not None:
            title = _("Wake %(id)s") % {"id": wake_id}
        elif turn_id is not None:
            title = _("Turn %(id)s") % {"id": turn_id}
        else:
            title = _("Inbound event %(id)s") % {"id": event_id}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "explain": explain,
            **explain_in_words(explain),
        }
        return TemplateResponse(request, "admin/feishu/wake_explain.html", context)


def explain_in_words(explain: dict) -> dict:
    """What the explain page adds to the selector's data: codes as sentences, dicts as tables, the neighbours."""
    context = explain["context"]
    gate = [
        {
            **judgement,
            "cause_in_words": cause_explained(judgement["cause"]),
            "probe_mode_in_words": probe_mode_explained(judgement["probe_mode"]),
        }
        for judgement in explain["gate"]
    ]
    excluded = []
    if context is not None:
        excluded = [
            {
                **item,
                "why": exclusion_explained(
                    reason=item["reason"],
                    item_type=item["item_type"],
                    mode=context["mode"],
                    diagnostics=context["diagnostics"],
                ),
            }
            for item in context["excluded"]
        ]
    return {
        "gate": gate,
        "excluded": excluded,
        "documents": [
            {**record, "read_as": document_identity_explained(record), "why": document_rule_explained(record)}
            for record in explain["documents"]
        ],
        "trimmed_table": dict_table(context["trimmed"]) if context is not None else "",
        "usage_table": dict_table(explain["turn"]["usage"]) if explain["turn"] is not None else "",
        "related": related_links(explain_neighbours(explain)),
    }


DOCUMENT_RULES = {
    READER_BOT_OWNER: _("asked by the bot's owner"),
    READER_CHAT_OWNER: _("asked by the chat's owner"),
    READER_LISTED: _("asked by a person the chat lists"),
    READER_DM_LISTED: _("asked by a person listed for the bot's direct messages"),
    READER_NOT_LISTED: _("the person who asked is neither an owner nor listed: the bot read nothing for them"),
    READER_NOBODY: _("the request carries no person to read it for"),
}


def document_identity_explained(record: dict) -> TranslatableText:
    """U3: as whom a linked document was read, in words."""
    return _("the bot (its own identity)") if record.get("identity") == IDENTITY_BOT else _("nobody (not read)")


def document_rule_explained(record: dict) -> TranslatableText:
    return DOCUMENT_RULES.get(str(record.get("rule")), str(record.get("reason", "")))


def explain_neighbours(explain: dict) -> list[tuple[str, TranslatableText]]:
    """Every record the explain page is about, one link each: bot, workspace, wake, judgements, turn, messages,
    context decision, deliveries, inbound events."""
    bot, wake, turn, context = explain["bot"], explain["wake"], explain["turn"], explain["context"]
    chat_id = wake["chat_id"] if wake is not None else (context["chat_id"] if context is not None else "")
    links: list[tuple[str, TranslatableText]] = [(reverse("admin:agents_bot_change", args=[bot["id"]]), _("bot"))]
    if chat_id:
        links.append((list_url("threadcontext.workspace", bot_profile=bot["slug"], chat_id=chat_id), _("workspace")))
    if wake is not None:
        links.append((reverse("admin:feishu_discusswake_change", args=[wake["id"]]), _("wake")))
        links.append((list_url("probe.probejudgement", wake_id=wake["id"]), _("judgements of this wake")))
        if wake["message_ids"]:
            links.append(
                (list_url("feishu.inboundevent", message_id__in=",".join(wake["message_ids"])), _("inbound events"))
            )
    if turn is not None:
        links.append((reverse("admin:agents_turn_change", args=[turn["id"]]), _("turn")))
        if wake is None:
            links.append((list_url("probe.probejudgement", turn__id__exact=turn["id"]), _("judgements of this turn")))
        if turn["user_message_id"]:
            links.append((reverse("admin:agents_message_change", args=[turn["user_message_id"]]), _("user message")))
        if turn["reply_message_id"]:
            links.append((reverse("admin:agents_message_change", args=[turn["reply_message_id"]]), _("reply")))
        if turn["context_decision_id"]:
            url = reverse("admin:threadcontext_threadcontextdecision_explain", args=[turn["context_decision_id"]])
            links.append((url, _("context decision")))
        links.append((list_url("feishu.outbounddelivery", turn__id__exact=turn["id"]), _("deliveries")))
        if wake is None and turn["source_message_id"] and ":" not in turn["source_message_id"]:
            # A Feishu message id (REST and automation turns have "rest:…" / "automation:…"): its inbound event.
            links.append((list_url("feishu.inboundevent", message_id=turn["source_message_id"]), _("inbound event")))
    return links


admin.site.unregister(DiscussWake)
admin.site.register(DiscussWake, DiscussWakeExplainAdmin)
