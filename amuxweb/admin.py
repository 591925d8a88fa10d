"""Pieces every app's admin shares: read-only audit records, compact cells, pretty JSON, links.

A leaf module (it imports no app), so threadcontext, agents, probe and the bridge can all use it without
breaking the dependency direction (ARCHITECTURE §3).
"""

import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

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


def change_link(obj: Model | None, label: Any = None) -> SafeString | str:
    """A link to a record's admin page, or "-" when there is none."""
    if obj is None:
        return "-"
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if label is None else label)


def model_names(model: type[Model], singular: str, plural: str) -> None:
    """A model's names in the operator's language (pass gettext_lazy strings).

    Set on the model's options at admin load instead of in Meta: Meta names are migration state, and the models
    are edited by many hands; `_meta.original_attrs`, which migrations read, is left as it is.
    """
    model._meta.verbose_name = singular
    model._meta.verbose_name_plural = plural
