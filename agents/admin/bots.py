"""ModelAdmins for providers, models, profiles, bots, threads and messages.

Secrets (Provider.api_key, Bot.feishu_app_secret / encrypt_key / verification_token) are write-only: the form
field renders empty, a blank submission keeps the stored value, "clear" empties it, and lists show only
"set" / "not set". Masks are derived (V4) and runtime modes are immutable, so neither is editable here.
"""

from django import forms
from django.contrib import admin
from django.contrib.admin.views.autocomplete import AutocompleteJsonView
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.validators import MaxValueValidator
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.admin.turns import test_connection
from agents.models import Bot, LLMModel, Message, Provider, Thread, UserProfile
from agents.services.threads import thread_create
from agents.tools.turns import tool_budget_max_seconds
from agents.visibility import CONTEXT_ASSEMBLY, UI_HISTORY
from core.admin import compact_time, explained, list_url, related_links

SECRET_HELP_TEXT = _("Write-only: never shown. Leave blank to keep the current value.")
PROVIDER_TIMEOUT_MIN_SECONDS = 1.0
PROVIDER_TIMEOUT_MAX_SECONDS = 600.0
PROVIDER_MAX_RETRIES = 5
PROBE_DEBOUNCE_MAX_MS = 10 * 60 * 1000
TOOL_MAX_STEPS_LIMIT = 50
MAX_KEY_COLUMN_CHARS = 32
MAX_CONTENT_COLUMN_CHARS = 60


def visibility_in_words(mask: int) -> str:
    """A message's visibility mask (V1) as words: which of /history and the model's context see it."""
    seen_by = [str(word) for bit, word in ((UI_HISTORY, _("history")), (CONTEXT_ASSEMBLY, _("context"))) if mask & bit]
    return explained(" + ".join(seen_by) if seen_by else _("hidden (neither history nor context)"), str(mask))


def model_choice_label(model: LLMModel) -> str:
    """A model as the bot form's selects show it: marked when its provider failed its last connection test."""
    if model.provider.last_test_ok is False:
        return gettext("⚠ %(model)s — its provider failed its last test") % {"model": model}
    return str(model)


class MarkedModelAutocompleteView(AutocompleteJsonView):
    """The model autocomplete of the bot form: Django's, with each model labelled by `model_choice_label`."""

    def get_queryset(self):
        return super().get_queryset().select_related("provider")

    def serialize_result(self, obj: LLMModel, to_field_name: str) -> dict:
        return {**super().serialize_result(obj, to_field_name), "text": model_choice_label(obj)}


class MarkedModelAutocompleteSelect(AutocompleteSelect):
    url_name = "%s:agents_llmmodel_marked_autocomplete"


def secret_state(value: str) -> str:
    return gettext("set") if value else gettext("not set")


class SecretField(forms.CharField):
    """A password input that never renders a value; blank means "keep the stored one"."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}))
        kwargs.setdefault("help_text", SECRET_HELP_TEXT)
        super().__init__(**kwargs)


class ClearSecretField(forms.BooleanField):
    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", _("Tick to remove the stored value."))
        super().__init__(**kwargs)


class SecretFieldsForm(forms.ModelForm):
    """A ModelForm whose `secret_fields` are SecretFields, each with a `<name>_clear` ClearSecretField."""

    secret_fields: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in self.secret_fields:
            # The stored secret never enters the form: blank initial, so "left blank" is also "unchanged".
            self.initial[name] = ""
            if name in self.fields:
                is_set = bool(self.instance.pk and getattr(self.instance, name))
                self.fields[name].help_text = gettext("%(help)s Currently %(state)s.") % {
                    "help": SECRET_HELP_TEXT,
                    "state": secret_state(is_set),
                }

    def clean(self) -> dict:
        cleaned = super().clean()
        for name in self.secret_fields:
            if cleaned.get(f"{name}_clear"):
                cleaned[name] = ""
            elif not cleaned.get(name):
                # Blank means "unchanged": keep what is stored (the form never had it to send back).
                cleaned[name] = getattr(self.instance, name) if self.instance.pk else ""
        return cleaned


class ProviderForm(SecretFieldsForm):
    secret_fields = ("api_key",)
    base_url = forms.URLField(required=False, assume_scheme="https", help_text=_("Empty: the SDK's default endpoint."))
    api_key = SecretField(label=_("API key"))
    api_key_clear = ClearSecretField(label=_("Clear API key"))
    # Bounds a provider client can work with: a zero timeout fails every call at once, a large retry count
    # multiplies each attempt (worst case per attempt = timeout × (retries + 1), see agents/llm/registry.py).
    timeout_seconds = forms.FloatField(
        min_value=PROVIDER_TIMEOUT_MIN_SECONDS,
        max_value=PROVIDER_TIMEOUT_MAX_SECONDS,
        initial=Provider._meta.get_field("timeout_seconds").default,
    )
    max_retries = forms.IntegerField(
        min_value=0,
        max_value=PROVIDER_MAX_RETRIES,
        initial=Provider._meta.get_field("max_retries").default,
        help_text=_("Retries the SDK itself makes."),
    )

    class Meta:
        model = Provider
        fields = "__all__"


class BotForm(SecretFieldsForm):
    secret_fields = ("feishu_app_secret", "feishu_encrypt_key", "feishu_verification_token")
    # A discuss wake waits at most this long (P10): a mistyped delay would otherwise mute the bot for days.
    probe_debounce_initial_ms = forms.IntegerField(
        required=False, min_value=0, max_value=PROBE_DEBOUNCE_MAX_MS, help_text=_("Empty: the hub's default.")
    )
    probe_debounce_max_ms = forms.IntegerField(
        required=False, min_value=0, max_value=PROBE_DEBOUNCE_MAX_MS, help_text=_("Empty: the hub's default.")
    )
    tool_max_steps = forms.IntegerField(
        required=False, min_value=1, max_value=TOOL_MAX_STEPS_LIMIT, help_text=_("Empty: the hub's default.")
    )
    tool_time_budget_seconds = forms.FloatField(
        required=False,
        min_value=1.0,
        help_text=_("Empty: the hub's default. Must leave the final answer time within the task's soft time limit."),
    )
    tool_call_timeout_seconds = forms.FloatField(
        required=False, min_value=1.0, help_text=_("Empty: the hub's default.")
    )
    feishu_app_secret = SecretField(label=_("Feishu app secret"))
    feishu_app_secret_clear = ClearSecretField(label=_("Clear Feishu app secret"))
    feishu_encrypt_key = SecretField(label=_("Feishu encrypt key"))
    feishu_encrypt_key_clear = ClearSecretField(label=_("Clear Feishu encrypt key"))
    feishu_verification_token = SecretField(label=_("Feishu verification token"))
    feishu_verification_token_clear = ClearSecretField(label=_("Clear Feishu verification token"))

    class Meta:
        model = Bot
        fields = "__all__"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Read per form, not at import: the soft limit is a setting. A budget at or over it could never finish.
        for name in ("tool_time_budget_seconds", "tool_call_timeout_seconds"):
            field = self.fields[name]
            field.max_value = tool_budget_max_seconds()
            field.validators.append(MaxValueValidator(field.max_value))
            field.widget.attrs["max"] = field.max_value


class LLMModelInline(admin.TabularInline):
    model = LLMModel
    extra = 0
    fields = ["name", "display_name", "context_window", "max_output_tokens", "supports_tool_calls", "is_enabled"]
    show_change_link = True


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    form = ProviderForm
    list_display = [
        "name",
        "kind",
        "base_url",
        "api_key_state",
        "timeout_seconds",
        "max_retries",
        "is_enabled",
        "last_test_state",
    ]
    change_form_template = "admin/agents/provider/change_form_with_test.html"
    list_filter = ["kind", "is_enabled"]
    search_fields = ["name", "base_url"]
    fields = [
        "name",
        "kind",
        "base_url",
        "api_key",
        "api_key_clear",
        "timeout_seconds",
        "max_retries",
        "is_enabled",
    ]
    inlines = [LLMModelInline]
    actions = [test_connection]

    @admin.display(description=_("API key"))
    def api_key_state(self, provider: Provider) -> str:
        return secret_state(provider.api_key)

    @admin.display(description=_("Last test"), ordering="last_test_at")
    def last_test_state(self, provider: Provider) -> str:
        if provider.last_test_ok is None:
            return gettext("never tested")
        template = (
            gettext("ok at %(at)s UTC: %(detail)s")
            if provider.last_test_ok
            else gettext("FAILED at %(at)s UTC: %(detail)s")
        )
        return template % {"at": f"{provider.last_test_at:%Y-%m-%d %H:%M}", "detail": provider.last_test_detail}


@admin.register(LLMModel)
class LLMModelAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "display_name",
        "provider",
        "context_window",
        "max_output_tokens",
        "supports_tool_calls",
        "supports_vision",
        "is_enabled",
    ]
    list_filter = ["provider__kind", "provider", "supports_tool_calls", "supports_vision", "is_enabled"]
    search_fields = ["name", "display_name", "provider__name"]
    ordering = ["provider__name", "name"]  # stable pages in the list and the probe-model autocomplete
    list_select_related = ["provider"]
    autocomplete_fields = ["provider"]
    actions = [test_connection]

    def get_urls(self):
        view = MarkedModelAutocompleteView.as_view(admin_site=self.admin_site)
        return [
            path("marked-autocomplete/", self.admin_site.admin_view(view), name="agents_llmmodel_marked_autocomplete")
        ] + super().get_urls()


@admin.register(UserProfile)
class UserProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "title_model"]
    search_fields = ["user__username", "user__email", "title_model__name"]
    list_filter = ["title_model__provider"]
    list_select_related = ["user", "title_model", "title_model__provider"]
    autocomplete_fields = ["user", "title_model"]


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    form = BotForm
    list_display = [
        "slug",
        "name",
        "owner",
        "primary_model",
        "reply_mode",
        "probe_mode",
        "short_feishu_app_id",
        "feishu_secrets_state",
        "is_enabled",
    ]
    list_filter = [
        "is_enabled",
        "group_reply_mode",
        "discuss_probe_mode",
        "feishu_event_mode",
        "primary_model__provider",
        "is_sandbox",  # the playground's stand-ins (slug playground-<hub bot>)
    ]
    search_fields = ["slug", "name", "owner__username", "feishu_app_id"]
    list_select_related = ["owner", "primary_model", "primary_model__provider"]
    autocomplete_fields = ["owner", "primary_model", "discuss_probe_model"]
    prepopulated_fields = {"slug": ["name"]}
    fieldsets = [
        (None, {"fields": ["slug", "name", "owner", "primary_model", "system_prompt", "language", "is_enabled"]}),
        (
            _("Group behaviour"),
            {
                "fields": [
                    "group_reply_mode",
                    "discuss_probe_mode",
                    "discuss_probe_model",
                    "probe_debounce_initial_ms",
                    "probe_debounce_max_ms",
                ]
            },
        ),
        (_("Tools"), {"fields": ["tool_max_steps", "tool_time_budget_seconds", "tool_call_timeout_seconds"]}),
        (
            _("Feishu app"),
            {
                "fields": [
                    "feishu_event_mode",
                    "feishu_connection_state",
                    "feishu_app_id",
                    "feishu_bot_open_id",
                    "feishu_app_secret",
                    "feishu_app_secret_clear",
                    "feishu_encrypt_key",
                    "feishu_encrypt_key_clear",
                    "feishu_verification_token",
                    "feishu_verification_token_clear",
                ]
            },
        ),
        (
            _("Feishu replies"),
            {
                "fields": ["reply_format", "receipt_emoji", "failure_emoji"],
                "description": _(
                    "Markdown card: the answer is written into a card while the model streams, and its headings, "
                    "lists, tables and code render; choose it for most bots. Plain text: one text message per "
                    "answer, for short plain answers. The receipt emoji is added to an @-mention, a reply to the "
                    "bot or a DM when its turn starts and removed when the answer is there; the failure emoji "
                    "replaces it when the turn fails. Both take a Feishu emoji_type such as OnIt, CrossMark, "
                    "THUMBSUP or DONE; leave one empty for no reaction."
                ),
            },
        ),
    ]

    readonly_fields = ["feishu_connection_state"]
    # The two model selects mark a model whose provider failed its last test (issue 14): chosen knowingly.
    MARKED_MODEL_FIELDS = ("primary_model", "discuss_probe_model")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name in self.MARKED_MODEL_FIELDS:
            kwargs["widget"] = MarkedModelAutocompleteSelect(db_field, self.admin_site, using=kwargs.get("using"))
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name in self.MARKED_MODEL_FIELDS:
            formfield.label_from_instance = model_choice_label
        return formfield

    @admin.display(description=_("Long connection"))
    def feishu_connection_state(self, bot: Bot) -> str:
        # Written by `manage.py feishu_connect` (the bridge's FeishuConnection row, read through the reverse
        # relation: agents never imports the bridge).
        connection = getattr(bot, "feishu_connection", None) if bot.pk else None
        if connection is None:
            if bot.feishu_event_mode == Bot.FeishuEventMode.LONG_CONNECTION:
                return gettext("Not connected yet: is `manage.py feishu_connect` (started by `make run`) running?")
            return "-"
        when = "%Y-%m-%d %H:%M:%S %Z"
        parts = [connection.get_state_display()]
        if connection.connected_since:
            parts.append(gettext("since %(at)s") % {"at": f"{connection.connected_since:{when}}"})
        parts.append(
            gettext("last event %(at)s") % {"at": f"{connection.last_event_at:{when}}"}
            if connection.last_event_at
            else gettext("no event yet")
        )
        parts.append(
            gettext("%(events)s event(s), %(reconnects)s reconnect(s)")
            % {"events": connection.events_received, "reconnects": connection.reconnects}
        )
        if connection.hostname:
            parts.append(gettext("on %(host)s (pid %(pid)s)") % {"host": connection.hostname, "pid": connection.pid})
        if connection.last_error:
            parts.append(
                gettext("last error at %(at)s: %(error)s")
                % {"at": f"{connection.last_error_at:{when}}", "error": connection.last_error}
            )
        return "; ".join(parts)

    # The list shows the modes' codes (the label is the tooltip): the labels are sentences that push columns out.
    @admin.display(description=_("reply mode"), ordering="group_reply_mode")
    def reply_mode(self, bot: Bot) -> str:
        return format_html('<span title="{}">{}</span>', bot.get_group_reply_mode_display(), bot.group_reply_mode)

    @admin.display(description=_("probe mode"), ordering="discuss_probe_mode")
    def probe_mode(self, bot: Bot) -> str:
        return format_html('<span title="{}">{}</span>', bot.get_discuss_probe_mode_display(), bot.discuss_probe_mode)

    @admin.display(description=_("Feishu app id"), ordering="feishu_app_id")
    def short_feishu_app_id(self, bot: Bot) -> str:
        app_id = bot.feishu_app_id
        return app_id if len(app_id) <= MAX_KEY_COLUMN_CHARS else app_id[: MAX_KEY_COLUMN_CHARS - 1] + "…"

    @admin.display(description=_("Feishu secrets"))
    def feishu_secrets_state(self, bot: Bot) -> str:
        # One column for three secrets: how many of app secret, encrypt key, verification token are set.
        secrets = (bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token)
        return gettext("%(set)d of %(total)d set") % {"set": sum(1 for value in secrets if value), "total": 3}


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
        # V4: a thread's runtime mode never changes, and it belongs to its bot for good.
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
