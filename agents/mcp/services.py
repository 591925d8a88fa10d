"""Reads a bot's McpServer rows into connection configs; the admin's "Test" of one server."""

import json
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from agents.mcp.client import McpConnection, McpTool
from agents.mcp.config import McpServerConfig
from agents.mcp.errors import McpError
from agents.models import Bot, McpServer
from agents.secrets import hub_secrets
from core.redaction import redacted
from core.text import storable_text

logger = logging.getLogger(__name__)

MAX_TEST_ERROR_CHARS = 1000


def secret_pairs(raw: str) -> tuple[tuple[str, str], ...]:
    """A stored JSON object of strings (environment, headers) as sorted pairs; the admin form validated it."""
    if not raw:
        return ()
    value = json.loads(raw)
    return tuple(sorted((str(key), str(item)) for key, item in value.items()))


def mcp_server_config(*, server: McpServer) -> McpServerConfig:
    return McpServerConfig(
        name=server.name,
        transport=server.transport,
        command=server.command,
        args=tuple(str(arg) for arg in server.args or ()),
        environment=secret_pairs(server.environment),
        url=server.url,
        headers=secret_pairs(server.headers),
        connect_timeout_seconds=float(settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS),
        call_timeout_seconds=float(server.call_timeout_seconds or bot_call_timeout_seconds(bot=server.bot)),
    )


def bot_call_timeout_seconds(*, bot: Bot) -> float:
    """One tool call's timeout for `bot`: its own, else the hub's (a server may set a shorter one)."""
    return float(bot.tool_call_timeout_seconds or settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS)


def mcp_servers_enabled(*, bot: Bot) -> QuerySet[McpServer]:
    return McpServer.objects.filter(bot=bot, is_enabled=True).select_related("bot").order_by("name", "id")


@dataclass(frozen=True)
class McpServerTestResult:
    is_ok: bool
    tools: tuple[McpTool, ...]
    error: str


def mcp_server_test(*, server: McpServer) -> McpServerTestResult:
    """Connect afresh (not the pooled connection), list the tools, store the outcome on the server."""
    config = mcp_server_config(server=server)
    connection = McpConnection(config)
    try:
        connection.open()
    except McpError as error:
        result = McpServerTestResult(is_ok=False, tools=(), error=error.message)
    else:
        result = McpServerTestResult(is_ok=True, tools=connection.tools, error="")
    finally:
        connection.close()
    # Every secret the hub holds, not only this server's, and redacted before the cut (issue 30, finding 4).
    secrets = hub_secrets(extra=config.secrets())
    server.last_test_ok = result.is_ok
    server.last_test_at = timezone.now()
    server.last_test_error = redacted(result.error, secrets=secrets)[:MAX_TEST_ERROR_CHARS]
    server.last_test_tools = [
        {"name": tool.name, "description": redacted(storable_text(tool.description), secrets=secrets)[:500]}
        for tool in result.tools
    ]
    server.save(update_fields=["last_test_ok", "last_test_at", "last_test_error", "last_test_tools", "updated_at"])
    logger.info("mcp server test", extra={"server_id": server.pk, "ok": result.is_ok, "tools": len(result.tools)})
    return result
