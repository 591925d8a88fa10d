"""Pieces every app's admin shares: read-only audit records, compact cells, pretty JSON, links.

A leaf module (it imports no app), so threadcontext, agents, probe and the bridge can all use it without
breaking the dependency direction (ARCHITECTURE §3).
"""

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.apps import apps
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from core.text import TranslatableText

NONE = _("(none)")


class AuditAdmin(admin.ModelAdmin):
    """A record of what happened (a turn, a judgement, a delivery, an inbound event, a decision): nobody adds
    or edits one by hand, and only a superuser may delete one (A4). Actions that re-run work ("reprocess") are
    allowed by `has_action_permission`, not by making the record editable."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)


def compact_time(value: datetime | None) -> str:
    """A list cell's time in the console's zone, as "12-01 21:45:03": a full date would push columns out."""
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%m-%d %H:%M:%S")


def pretty_json(value: Any) -> SafeString:
    """JSON pretty-printed once, folded behind its size so a long model input does not bury the page."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    if value in (None, {}, []):
        return format_html('<span class="quiet">{}</span>', NONE)
    return format_html(
        '<details class="pretty-json"><summary>{}</summary><pre style="white-space: pre-wrap; max-width: 100em">'
        "{}</pre></details>",
        _("show (%(lines)s lines)") % {"lines": text.count("\n") + 1},
        text,
    )


def explained(sentence: Any, code: str) -> SafeString:
    """A code in people's words: the translated sentence, then the code itself in small print (for logs, grep)."""
    return format_html('{} <small class="code"><code>{}</code></small>', sentence, code)


# The keys of usage and diagnostics dicts in words (A9); the key itself stays beside them in small print.
KEY_WORDS = {
    "input_tokens": _("input tokens"),
    "output_tokens": _("output tokens"),
    "cached_input_tokens": _("cached input tokens"),
    "model": _("model"),
    "provider": _("provider"),
    "model_duration_ms": _("model time (ms)"),
    "finish_reason": _("finish reason"),
    "trimmed_by_item_limit": _("trimmed by the item limit"),
    "trimmed_by_char_budget": _("trimmed by the character budget"),
    "truncated_item_ids": _("items cut short"),
    "item_limit": _("item limit"),
    "max_chars": _("character budget"),
}


def _key_words(key: Any) -> SafeString:
    words = KEY_WORDS.get(key) if isinstance(key, str) else None
    if words is None:
        return format_html("{}", key)
    return format_html('{} <small class="quiet">{}</small>', words, key)


def dict_table(value: Any) -> SafeString:
    """A dict as a two-column table (nested dicts as nested tables), "(none)" when empty; other values as text."""
    if isinstance(value, dict):
        if not value:
            return format_html('<span class="quiet">{}</span>', NONE)
        rows = format_html_join(
            "", "<tr><th>{}</th><td>{}</td></tr>", ((_key_words(k), dict_table(v)) for k, v in value.items())
        )
        return format_html('<table class="dict-table">{}</table>', rows)
    if isinstance(value, list | tuple):
        if not value:
            return format_html('<span class="quiet">{}</span>', NONE)
        return format_html_join(", ", "{}", ((dict_table(item),) for item in value))
    if isinstance(value, bool):
        return format_html("{}", _("yes") if value else _("no"))
    if value is None or value == "":
        return format_html("{}", "-")
    return format_html("{}", value)


def change_link(obj: Model | None, label: Any = None) -> SafeString | str:
    """A link to a record's admin page, or "-" when there is none."""
    if obj is None:
        return "-"
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if label is None else label)


def list_url(model_label: str, **filters: Any) -> str:
    """The admin list of `app_label.model_name` filtered by the given lookups ("the judgements of this wake").

    By URL name, so an app links to another app's list without importing it (ARCHITECTURE §3)."""
    app_label, model_name = model_label.split(".")
    url = reverse(f"admin:{app_label}_{model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def related_links(links: Iterable[tuple[str, Any]]) -> SafeString:
    """A record's neighbours as one line of links (url, label); "(none)" when it has none."""
    html = format_html_join(" · ", '<a href="{}">{}</a>', ((url, label) for url, label in links if url))
    return html or format_html('<span class="quiet">{}</span>', NONE)


def model_names(model: type[Model], singular: TranslatableText, plural: TranslatableText) -> None:
    """A model's names in the operator's language (pass gettext_lazy strings).

    Set on the model's options at admin load instead of in Meta: Meta names are migration state, and the models
    are edited by many hands; `_meta.original_attrs`, which migrations read, is left as it is.
    """
    model._meta.verbose_name = singular
    model._meta.verbose_name_plural = plural


# The apps whose models' strings are listed in core.model_strings.
HUB_APP_LABELS = ("agents", "feishu", "probe", "threadcontext")


def _lazy(text: Any) -> Any:
    return text if isinstance(text, Promise) or not text else _(str(text))


def model_strings_translate() -> None:
    """Every field name, help text and choice label of the hub's models, in the operator's language.

    Done once at admin load, like `model_names`: `verbose_name` is not what migrations read (they read
    `_verbose_name`), and a lazy help text or choice label equals its plain msgid, so the migration state is
    unchanged. The msgids are in core.model_strings, where makemessages finds them.
    """
    for app_label in HUB_APP_LABELS:
        for model in apps.get_app_config(app_label).get_models():
            for field in model._meta.concrete_fields:
                field.verbose_name = _lazy(field.verbose_name)
                field.help_text = _lazy(field.help_text)
                if field.choices:
                    field.choices = [(value, _lazy(label)) for value, label in field.choices]


class OpenIdListField(forms.Field):
    """A JSON list of Feishu open ids edited as text, one id per line (commas and spaces separate too), so an
    operator never types JSON; a JSON list pasted in (`["ou_1"]`) is read as before."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 40, "placeholder": "ou_…"})

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, str) and value.startswith("["):  # a bound form's JSON text, as a browser sent it
            value = self.to_python(value)
        return "\n".join(value) if isinstance(value, list) else (value or "")

    def to_python(self, value: Any) -> list[str]:
        text = (value or "").strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except ValueError:
                raise forms.ValidationError(_("Not a list of open ids: write one per line.")) from None
            if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
                raise forms.ValidationError(_("Not a list of open ids: write one per line."))
            return [item.strip() for item in parsed if item.strip()]
        return [item for item in text.replace(",", " ").split() if item]
