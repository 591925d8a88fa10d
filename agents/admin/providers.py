"""ModelAdmins for providers and their models, and the "test connection" action both changelists offer.

A provider's API key is write-only (agents.admin.secrets). The model selects of other forms (the bot's) label a
model whose provider failed its last connection test, through the autocomplete view registered here.
"""

import textwrap

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.autocomplete import AutocompleteJsonView
from django.contrib.admin.widgets import AutocompleteSelect
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.admin.secrets import ClearSecretField, SecretField, SecretFieldsForm, WriteOnlySecretsAdmin, secret_state
from agents.llm.base import LLMError
from agents.llm.registry import llm_connection_test
from agents.models import LLMModel, Provider
from agents.services.providers import provider_last_test_record

# The test answer shown in the message: cut at a word, never mid-word (issue 27).
ANSWER_SHOWN_CHARS = 200
PROVIDER_TIMEOUT_MIN_SECONDS = 1.0
PROVIDER_TIMEOUT_MAX_SECONDS = 600.0
PROVIDER_MAX_RETRIES = 5


def model_choice_label(model: LLMModel) -> str:
    """A model as the bot form's selects show it: marked when its provider failed its last connection test."""
    if model.provider.last_test_ok is False:
        return gettext("⚠ %(model)s — its provider failed its last test") % {"model": model}
    return str(model)


class MarkedModelAutocompleteView(AutocompleteJsonView):
    """The model autocomplete of the bot form: Django's, with each model labelled by `model_choice_label`."""

    def get_queryset(self):
        return super().get_queryset().select_related("provider")

    def serialize_result(self, obj: Model, to_field_name: str) -> dict:
        assert isinstance(obj, LLMModel)  # get_queryset above: the bot form's model field only offers LLMModels
        return {**super().serialize_result(obj, to_field_name), "text": model_choice_label(obj)}


class MarkedModelAutocompleteSelect(AutocompleteSelect):
    url_name = "%s:agents_llmmodel_marked_autocomplete"


@admin.action(description=_("Test connection (one tiny call)"))
def test_connection(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    """For Provider and LLMModel changelists: one tiny call per model, the result reported per row."""
    if queryset.model is Provider:
        models: list[LLMModel] = []
        for provider in queryset:
            model = provider.models.filter(is_enabled=True).order_by("id").first()
            if model is None:
                message = gettext("%(provider)s: no enabled model to test with.") % {"provider": provider.name}
                modeladmin.message_user(request, message, messages.WARNING)
            else:
                models.append(model)
    else:
        models = list(queryset.select_related("provider"))
    for model in models:
        label = f"{model.provider.name} / {model.name}"
        if model.provider.kind == Provider.Kind.LOCAL_RULES:
            label += " " + gettext("(rule-based, offline)")
        try:
            answer, elapsed_ms = llm_connection_test(model=model)
        except LLMError as exc:
            detail = f"{type(exc).__name__}: {exc.message}"
            provider_last_test_record(provider_id=model.provider_id, ok=False, detail=detail, at=timezone.now())
            modeladmin.message_user(request, f"{label}: {detail}", messages.ERROR)
            continue
        provider_last_test_record(
            provider_id=model.provider_id, ok=True, detail=f"{model.name}: OK in {elapsed_ms} ms", at=timezone.now()
        )
        message = gettext("%(label)s: OK in %(ms)s ms, answered %(answer)r") % {
            "label": label,
            "ms": elapsed_ms,
            "answer": textwrap.shorten(answer, width=ANSWER_SHOWN_CHARS, placeholder=" …"),
        }
        modeladmin.message_user(request, message, messages.SUCCESS)


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


class LLMModelInline(admin.TabularInline):
    model = LLMModel
    extra = 0
    fields = ["name", "display_name", "context_window", "max_output_tokens", "supports_tool_calls", "is_enabled"]
    show_change_link = True


@admin.register(Provider)
class ProviderAdmin(WriteOnlySecretsAdmin):
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
