"""The ModelAdmin of MCP servers (M1); the turn page's tool-call timeline is agents.admin.tool_calls.

A server's environment and headers are secrets: write-only like the others (agents.admin.secrets), entered as a
JSON object of strings. "Test" on the server's page connects afresh, lists the tools and stores the outcome.
"""

import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.admin.secrets import (
    ClearSecretField,
    SecretField,
    SecretFieldsForm,
    WriteOnlySecretsAdmin,
    secret_map_state,
)
from agents.mcp.services import mcp_server_test
from agents.models import McpServer

MAX_TIMEOUT_SECONDS = 600.0
MAX_STEPS = 50
MAX_APPROVAL_TIMEOUT_SECONDS = 7 * 24 * 3600
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 600


def string_map(raw: str, *, label: str) -> str:
    """A JSON object of strings, normalised; a clear form error for anything else."""
    try:
        value = json.loads(raw)
    except ValueError:
        raise forms.ValidationError(f'{label} must be a JSON object, e.g. {{"NAME": "value"}}.') from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise forms.ValidationError(f"{label} must be a JSON object whose values are strings.")
    return json.dumps(value, sort_keys=True)


def string_list(value, *, label: str) -> list[str]:
    if value in (None, ""):
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise forms.ValidationError(f"{label} must be a JSON list of strings.")
    return value


class McpServerForm(SecretFieldsForm):
    secret_fields = ("environment", "headers")
    environment = SecretField(label="Environment (JSON object)")
    environment_clear = ClearSecretField(label="Clear environment")
    headers = SecretField(label="Headers (JSON object)")
    headers_clear = ClearSecretField(label="Clear headers")
    url = forms.URLField(required=False, assume_scheme="https", help_text="Streamable HTTP: the endpoint URL.")
    call_timeout_seconds = forms.FloatField(
        required=False, min_value=0.1, max_value=MAX_TIMEOUT_SECONDS, help_text="Empty: the hub's default."
    )
    time_budget_seconds = forms.FloatField(
        required=False, min_value=1.0, max_value=MAX_TIMEOUT_SECONDS, help_text="Empty: the hub's default."
    )
    max_steps = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_STEPS, help_text="Empty: the hub's default."
    )
    approval_timeout_seconds = forms.IntegerField(
        required=False,
        min_value=10,
        max_value=MAX_APPROVAL_TIMEOUT_SECONDS,
        help_text="Seconds a call waits for a decision; then it counts as denied. Empty: 600.",
    )

    class Meta:
        model = McpServer
        exclude = ["last_test_ok", "last_test_at", "last_test_error", "last_test_tools"]

    def clean_environment(self) -> str:
        raw = self.cleaned_data.get("environment") or ""
        return string_map(raw, label="The environment") if raw else ""

    def clean_headers(self) -> str:
        raw = self.cleaned_data.get("headers") or ""
        return string_map(raw, label="The headers") if raw else ""

    def clean_args(self) -> list[str]:
        return string_list(self.cleaned_data.get("args"), label="The arguments")

    def clean_allowed_tools(self) -> list[str]:
        return string_list(self.cleaned_data.get("allowed_tools"), label="The allowed tools")

    def clean_approval_timeout_seconds(self) -> int:
        return self.cleaned_data.get("approval_timeout_seconds") or DEFAULT_APPROVAL_TIMEOUT_SECONDS

    def clean_approval_tools(self) -> list[str]:
        return string_list(self.cleaned_data.get("approval_tools"), label="The tools that need approval")

    def clean(self) -> dict:
        cleaned = super().clean()
        transport = cleaned.get("transport")
        if transport == McpServer.Transport.STDIO and not cleaned.get("command"):
            self.add_error("command", "A stdio server needs the command that starts it.")
        if transport == McpServer.Transport.STREAMABLE_HTTP and not cleaned.get("url"):
            self.add_error("url", "A streamable HTTP server needs its URL.")
        outside = sorted(set(cleaned.get("approval_tools") or ()) - set(cleaned.get("allowed_tools") or ()))
        if outside:
            # H1: approval is a condition on an allowed tool; a tool off the allowlist never runs at all.
            self.add_error("approval_tools", f"Not on the allowlist: {', '.join(outside)}. Allow them first.")
        return cleaned


STDIO_WARNING = _(
    "A stdio server runs its command on this host as the hub's user: it can read the hub's files and reach what "
    "the hub can. Only add code you trust as the hub's own, or isolate it (a separate user, a container, or a "
    "streamable HTTP server); see docs/tools.md."
)


@admin.register(McpServer)
class McpServerAdmin(WriteOnlySecretsAdmin):
    form = McpServerForm
    list_display = ["name", "bot", "transport", "is_enabled", "on_failure", "allowed", "test_state", "last_test_at"]
    list_filter = ["transport", "is_enabled", "on_failure", "last_test_ok"]
    search_fields = ["name", "bot__slug", "command", "url"]
    list_select_related = ["bot"]
    autocomplete_fields = ["bot"]
    readonly_fields = [
        "environment_state",
        "headers_state",
        "test_state",
        "last_test_at",
        "last_test_error",
        "tools_view",
    ]
    fieldsets = [
        (None, {"fields": ["bot", "name", "transport", "is_enabled", "on_failure", "allowed_tools"]}),
        ("stdio", {"fields": ["command", "args", "environment_state", "environment", "environment_clear"]}),
        ("Streamable HTTP", {"fields": ["url", "headers_state", "headers", "headers_clear"]}),
        (_("Limits"), {"fields": ["call_timeout_seconds", "max_steps", "time_budget_seconds"]}),
        (_("Approvals"), {"fields": ["approval_tools", "approval_timeout_seconds"]}),
        (_("Last test"), {"fields": ["test_state", "last_test_at", "last_test_error", "tools_view"]}),
    ]
    actions = ["test_selected"]

    def stdio_warn(self, request: HttpRequest, *, is_stdio: bool) -> None:
        # Issue 30: in production a stdio server is code running on the hub's host as the hub's user.
        if request.method == "GET" and is_stdio and not settings.DEBUG:
            self.message_user(request, STDIO_WARNING, messages.WARNING)

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None):
        self.stdio_warn(request, is_stdio=True)
        return super().add_view(request, form_url, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        stdio = McpServer.objects.filter(pk=object_id, transport=McpServer.Transport.STDIO)
        is_stdio = object_id.isdigit() and stdio.exists()
        self.stdio_warn(request, is_stdio=is_stdio)
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        test = path("<int:object_id>/test/", self.admin_site.admin_view(self.test_view), name="agents_mcpserver_test")
        return [test] + super().get_urls()

    def test_view(self, request: HttpRequest, object_id: int) -> HttpResponseRedirect:
        server = get_object_or_404(McpServer, pk=object_id)
        change_url = reverse("admin:agents_mcpserver_change", args=[server.pk])
        if request.method != "POST" or not self.has_change_permission(request, server):
            self.message_user(
                request, gettext("Testing a server needs a POST by a user who may change it."), messages.ERROR
            )
            return HttpResponseRedirect(change_url)
        self.report(request, server)
        return HttpResponseRedirect(change_url)

    @admin.action(description=_("Test (connect and list tools)"))
    def test_selected(self, request: HttpRequest, queryset) -> None:
        for server in queryset.select_related("bot"):
            self.report(request, server)

    def report(self, request: HttpRequest, server: McpServer) -> None:
        result = mcp_server_test(server=server)
        if result.is_ok:
            names = ", ".join(tool.name for tool in result.tools) or gettext("none")
            message = gettext("%(server)s: connected; tools: %(names)s") % {"server": server.name, "names": names}
            self.message_user(request, message, messages.SUCCESS)
        else:
            self.message_user(request, f"{server.name}: {server.last_test_error}", messages.ERROR)

    @admin.display(description=_("Allowed tools"))
    def allowed(self, server: McpServer) -> str:
        return ", ".join(server.allowed_tools) or gettext("none")

    @admin.display(description=_("Environment"))
    def environment_state(self, server: McpServer) -> str:
        return secret_map_state(server.environment)

    @admin.display(description=_("Headers"))
    def headers_state(self, server: McpServer) -> str:
        return secret_map_state(server.headers)

    @admin.display(description=_("Last test"))
    def test_state(self, server: McpServer) -> str:
        return {None: gettext("never tested"), True: gettext("OK"), False: gettext("failed")}[server.last_test_ok]

    @admin.display(description=_("Tools at the last test"))
    def tools_view(self, server: McpServer) -> str:
        if not server.last_test_tools:
            return "-"
        allowed = set(server.allowed_tools)
        rows = format_html_join(
            "",
            "<li><code>{}</code>{} {}</li>",
            (
                (
                    tool.get("name", ""),
                    gettext(" (allowed)") if tool.get("name") in allowed else "",
                    tool.get("description", ""),
                )
                for tool in server.last_test_tools
            ),
        )
        return format_html("<ul>{}</ul>", rows)
