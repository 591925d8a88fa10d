"""The turn page's timeline of tool calls (M2): a read-only inline on TurnAdmin (agents.admin.turns).

A module of its own so that agents.admin.turns needs nothing from the MCP server admin.
"""

import json
from typing import ClassVar

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agents.models import TurnToolCall

MAX_RESULT_PREVIEW_CHARS = 300


class TurnToolCallInline(admin.TabularInline):
    """The turn page's timeline of tool calls, in order; read-only (audit records)."""

    model = TurnToolCall
    template = "admin/agents/turn/tool_calls_inline.html"
    extra = 0
    can_delete = False
    verbose_name = _("tool call")
    verbose_name_plural = _("Tool calls (timeline)")
    # A tuple, so that the one sequence type-checks as both Django options (fields also takes nested groups).
    fields: ClassVar[tuple[str, ...]] = (
        "step",
        "index",
        "server",
        "tool",
        "status",
        "duration",
        "arguments_view",
        "result_view",
        "error",
    )
    readonly_fields = fields
    ordering = ["step", "index"]

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description=_("Duration"))
    def duration(self, call: TurnToolCall) -> str:
        return f"{call.duration_ms} ms"

    @admin.display(description=_("Arguments"))
    def arguments_view(self, call: TurnToolCall) -> str:
        return format_html("<code>{}</code>", json.dumps(call.arguments, ensure_ascii=False))

    @admin.display(description=_("Result (what the model got)"))
    def result_view(self, call: TurnToolCall) -> str:
        if len(call.result) <= MAX_RESULT_PREVIEW_CHARS:
            return format_html('<pre style="white-space: pre-wrap">{}</pre>', call.result or "-")
        return format_html(
            '<details><summary>{}…</summary><pre style="white-space: pre-wrap">{}</pre></details>',
            call.result[:MAX_RESULT_PREVIEW_CHARS],
            call.result,
        )
