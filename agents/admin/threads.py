"""ModelAdmins for threads and messages: a conversation's record.

A thread's runtime mode and bot are fixed once it exists (V4); messages are written by conversations, never by
hand, and a message's visibility mask is derived, so neither is editable here.
"""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agents.models import Message, Thread
from agents.services.threads import thread_create
from agents.visibility import CONTEXT_ASSEMBLY, UI_HISTORY
from core.admin import compact_time, explained, list_url, related_links

MAX_KEY_COLUMN_CHARS = 32
MAX_CONTENT_COLUMN_CHARS = 60


def visibility_in_words(mask: int) -> str:
    """A message's visibility mask (V1) as words: which of /history and the model's context see it."""
    seen_by = [str(word) for bit, word in ((UI_HISTORY, _("history")), (CONTEXT_ASSEMBLY, _("context"))) if mask & bit]
    return explained(" + ".join(seen_by) if seen_by else _("hidden (neither history nor context)"), str(mask))


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    # Whether a thread is retired is a filter, not a column: the list fits 1440 px beside the sidebar.
    list_display = ["id", "title", "bot", "runtime_mode", "channel", "short_external_key", "created"]
    list_filter = ["runtime_mode", "channel", "bot", ("retired_at", admin.EmptyFieldListFilter)]
    search_fields = ["title", "external_key", "bot__slug", "bot__name"]
    list_select_related = ["bot"]
    autocomplete_fields = ["bot"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "messages_link"]

    def get_readonly_fields(self, request, obj=None):
        # V4: a thread's runtime mode never changes, and it belongs to its bot for good. A Feishu thread's channel
        # and external key are its mapping to the chat: edited, the chat's next message opens another thread.
        if obj is not None and obj.channel == Thread.Channel.FEISHU:
            return [*self.readonly_fields, "bot", "runtime_mode", "channel", "external_key"]
        if obj is not None:
            return [*self.readonly_fields, "bot", "runtime_mode"]
        return self.readonly_fields

    @admin.display(description=_("external key"), ordering="external_key")
    def short_external_key(self, thread: Thread) -> str:
        key = thread.external_key
        return key if len(key) <= MAX_KEY_COLUMN_CHARS else key[: MAX_KEY_COLUMN_CHARS - 1] + "…"

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, thread: Thread) -> str:
        return compact_time(thread.created_at)

    @admin.display(description=_("Messages"))
    def messages_link(self, thread: Thread) -> str:
        if not thread.pk:
            return "-"
        url = reverse("admin:agents_message_changelist") + f"?thread__id__exact={thread.pk}"
        return format_html('<a href="{}">{}</a>', url, _("messages of this thread"))

    def save_model(self, request, obj: Thread, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created = thread_create(
            bot=obj.bot,
            runtime_mode=obj.runtime_mode,
            channel=obj.channel,
            title=obj.title,
            external_key=obj.external_key,
        )
        obj.pk, obj.created_at = created.pk, created.created_at
        obj._state.adding, obj._state.db = False, created._state.db


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    """Messages are written by conversations (agents.services.threads.message_create), never by hand."""

    list_display = [
        "id",
        "thread_link",
        "thread_runtime_mode",
        "kind",
        "visibility",
        "author",
        "excerpt",
        "created",
    ]
    list_filter = ["kind", "visibility_mask", "thread__runtime_mode", "thread__bot"]
    search_fields = ["content", "author", "external_message_id"]
    search_help_text = _("Content, author or external message id. Filter by thread with ?thread__id__exact=N.")
    list_select_related = ["thread", "thread__bot"]
    # No date_hierarchy and no full count: this table is the big one (millions of rows).
    show_full_result_count = False
    fields = [
        "related",
        "thread",
        "kind",
        "visibility",
        "author",
        "external_message_id",
        "content",
        "prompt",
        "usage",
        "created_at",
    ]
    readonly_fields = ["related", "visibility"]

    @admin.display(description=_("related"))
    def related(self, message: Message) -> str:
        # The bridge is not imported by agents: its inbound event list is linked by URL name.
        links = [
            (reverse("admin:agents_thread_change", args=[message.thread_id]), _("thread")),
            (list_url("agents.message", thread__id__exact=message.thread_id), _("messages of this thread")),
            (list_url("agents.turn", user_message__id__exact=message.pk), _("turn it started")),
            (list_url("agents.turn", reply_message__id__exact=message.pk), _("turn that wrote it")),
        ]
        if message.external_message_id:
            links.append((list_url("feishu.inboundevent", message_id=message.external_message_id), _("inbound event")))
        return related_links(links)

    @admin.display(description=_("visibility"), ordering="visibility_mask")
    def visibility(self, message: Message) -> str:
        return visibility_in_words(message.visibility_mask)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser  # a conversation's record: deleted by a superuser only (A4)

    @admin.display(description=_("Thread"), ordering="thread")
    def thread_link(self, message: Message) -> str:
        url = reverse("admin:agents_thread_change", args=[message.thread_id])
        return format_html('<a href="{}">{}</a>', url, message.thread_id)

    @admin.display(description=_("Runtime mode"), ordering="thread__runtime_mode")
    def thread_runtime_mode(self, message: Message) -> str:
        return message.thread.get_runtime_mode_display()

    @admin.display(description=_("Content"))
    def excerpt(self, message: Message) -> str:
        content = message.content
        return content if len(content) <= MAX_CONTENT_COLUMN_CHARS else content[: MAX_CONTENT_COLUMN_CHARS - 1] + "…"

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, message: Message) -> str:
        return compact_time(message.created_at)
