"""ModelAdmins for bots and user profiles.

A bot's Feishu secrets (app secret, encrypt key, verification token) are write-only (agents.admin.secrets); the
list shows only how many are set. Its two model selects mark a model whose provider failed its last test.
"""

from django import forms
from django.contrib import admin
from django.core.validators import MaxValueValidator
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.admin.providers import MarkedModelAutocompleteSelect, model_choice_label
from agents.admin.secrets import ClearSecretField, SecretField, SecretFieldsForm, WriteOnlySecretsAdmin, secret_state
from agents.models import Bot, UserProfile
from agents.tools.budget import tool_budget_max_seconds
from core.admin import OpenIdListField

PROBE_DEBOUNCE_MAX_MS = 10 * 60 * 1000
TOOL_MAX_STEPS_LIMIT = 50
MAX_KEY_COLUMN_CHARS = 32


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
    # U2: one id per line, as the workspace's lists are edited; never JSON typed by hand.
    dm_open_ids = OpenIdListField(
        required=False,
        label=capfirst(_("people for direct messages")),
        help_text=_("Open ids (or union ids) of the people who may message the bot directly, for the listed policy."),
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
            assert isinstance(field, forms.FloatField)  # both are FloatFields on the model
            limit = tool_budget_max_seconds()
            # django-stubs types every number field's bound as IntegerField's int; a FloatField takes a float.
            field.max_value = limit  # type: ignore[assignment]
            field.validators.append(MaxValueValidator(limit))
            field.widget.attrs["max"] = limit


@admin.register(UserProfile)
class UserProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "title_model"]
    search_fields = ["user__username", "user__email", "title_model__name"]
    list_filter = ["title_model__provider"]
    list_select_related = ["user", "title_model", "title_model__provider"]
    autocomplete_fields = ["user", "title_model"]


@admin.register(Bot)
class BotAdmin(WriteOnlySecretsAdmin):
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
        "is_sandbox",  # the playground's stand-ins (each linked to its hub bot by sandbox_of)
    ]
    search_fields = ["slug", "name", "owner__username", "feishu_app_id"]
    list_select_related = ["owner", "primary_model", "primary_model__provider"]
    autocomplete_fields = ["owner", "primary_model", "discuss_probe_model", "summary_model", "transcription_model"]
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
                    "summary_model",
                    "probe_debounce_initial_ms",
                    "probe_debounce_max_ms",
                ]
            },
        ),
        (
            _("Who may use the bot"),
            {
                "fields": ["feishu_owner_open_id", "dm_policy", "dm_open_ids"],
                "description": _(
                    "Every turn acts for a person and is admitted for that person, whoever delivered the message: "
                    "a hand-off from another bot counts as the person who started the chain. Groups: each chat's "
                    "own settings (reply mode, people, owner only). Direct messages: the policy below."
                ),
            },
        ),
        (_("Voice messages"), {"fields": ["transcription_model"]}),
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
                "fields": ["reply_format", "queue_mode", "receipt_emoji", "failure_emoji"],
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
        if connection.deaf_since:  # D1: connected but hearing nothing since its last frame
            parts.append(gettext("deaf since %(at)s") % {"at": f"{connection.deaf_since:{when}}"})
        if connection.last_reconnect_at:
            parts.append(
                gettext("last reconnect %(at)s: %(why)s")
                % {"at": f"{connection.last_reconnect_at:{when}}", "why": connection.last_reconnect_reason}
            )
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

    @admin.display(description=_("Feishu app secret"))
    def feishu_app_secret_state(self, bot: Bot) -> str:
        return secret_state(bot.feishu_app_secret)

    @admin.display(description=_("Feishu encrypt key"))
    def feishu_encrypt_key_state(self, bot: Bot) -> str:
        return secret_state(bot.feishu_encrypt_key)

    @admin.display(description=_("Feishu verification token"))
    def feishu_verification_token_state(self, bot: Bot) -> str:
        return secret_state(bot.feishu_verification_token)

    @admin.display(description=_("Feishu secrets"))
    def feishu_secrets_state(self, bot: Bot) -> str:
        # One column for three secrets: how many of app secret, encrypt key, verification token are set.
        secrets = (bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token)
        return gettext("%(set)d of %(total)d set") % {"set": sum(1 for value in secrets if value), "total": 3}
