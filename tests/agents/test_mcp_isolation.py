"""Issue 30, findings 3 and 4 for stdio MCP servers: a server starts with its own environment, PATH, HOME and the
locale, never the hub's; the hub's process hides its /proc environ; a stderr tail is redacted before it is cut."""

import sys
from collections.abc import Iterator

import pytest

from agents.mcp.client import McpConnection, mcp_connections_close_all
from agents.mcp.config import STDIO, McpServerConfig
from agents.mcp.errors import McpConnectError
from agents.mcp.isolation import process_is_dumpable
from agents.models import McpServer
from tests.agents.factories import BotFactory
from tests.stubs.mcp_server import stdio_command

SERVER_SECRET = "env-secret-value-4711"
PLANTED_HUB_SECRET = "hub-only-secret-9f8e7d6c5b4a"
# What the official SDK adds on POSIX whatever we pass (harmless: names, not secrets), and what we pass.
ALLOWED_VARIABLES = {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "SHELL", "TERM", "USER", "STUB_TOKEN"}


def stdio_config(**overrides) -> McpServerConfig:
    command, args = stdio_command()
    fields = {
        "name": "stub",
        "transport": STDIO,
        "command": command,
        "args": tuple(args),
        "environment": (("STUB_TOKEN", SERVER_SECRET),),
        "connect_timeout_seconds": 60.0,
        "call_timeout_seconds": 10.0,
    }
    return McpServerConfig(**{**fields, **overrides})


@pytest.fixture(autouse=True)
def _close_pool() -> Iterator[None]:
    yield
    mcp_connections_close_all()


def _dump(monkeypatch) -> str:
    monkeypatch.setenv("AMUX_PLANTED_HUB_SECRET", PLANTED_HUB_SECRET)
    monkeypatch.setenv("SECRET_KEY", "planted-secret-key-for-the-hub-0123456789")
    connection = McpConnection(stdio_config()).open()
    try:
        result = connection.call_tool("environment_dump", {}, timeout_seconds=10)
    finally:
        connection.close()
    return "\n".join(str(getattr(block, "text", "")) for block in result.blocks)


def test_issue30_a_stdio_server_starts_with_its_own_environment_never_the_hubs(monkeypatch):
    # given: the hub's process holds a secret in its environment
    # when: a stdio server prints its whole environment
    text = _dump(monkeypatch)
    # then: only its configured variable and the basics; the hub's variables are not there
    own = text.split("\nparent:\n")[0].removeprefix("own:\n")
    names = {line.split("=", 1)[0] for line in own.splitlines() if "=" in line}
    assert names <= ALLOWED_VARIABLES
    assert f"STUB_TOKEN={SERVER_SECRET}" in own
    assert PLANTED_HUB_SECRET not in own
    assert "AMUX_PLANTED_HUB_SECRET" not in own
    assert "SECRET_KEY" not in own
    assert "DJANGO_SETTINGS_MODULE" not in own


def test_issue30_the_hubs_process_hides_its_proc_environ_from_the_servers_it_starts():
    # given: Django started (AgentsConfig.ready marks every hub process non-dumpable)
    # then: Linux lets no other process of the hub's user (without CAP_SYS_PTRACE) read /proc/<pid>/environ
    assert process_is_dumpable() is False


def test_issue30_finding4_a_stderr_tail_is_redacted_before_it_is_cut():
    # given: a server that prints its secret so that the 400-character tail starts inside it, then exits
    script = f"import sys; sys.stderr.write('start ' + '{SERVER_SECRET}' + ' ' + 'e' * {400 - 8} + '\\n'); sys.exit(2)"
    config = stdio_config(args=("-c", script), command=sys.executable)
    # when
    with pytest.raises(McpConnectError) as raised:
        McpConnection(config).open()
    # then: no 6-character piece of the secret is left in the message
    message = raised.value.message
    pieces = [SERVER_SECRET[i : i + 6] for i in range(len(SERVER_SECRET) - 5)]
    assert [piece for piece in pieces if piece in message] == []
    assert "(server stderr: " in message
    assert message.endswith("e" * 50 + ")")


@pytest.mark.django_db
def test_issue30_the_admin_warns_on_a_stdio_server_when_debug_is_off(admin_client, settings):
    # given: production settings, one stdio and one HTTP server
    settings.DEBUG = False
    bot = BotFactory()
    stdio = McpServer.objects.create(bot=bot, name="local", transport="stdio", command="true")
    http = McpServer.objects.create(bot=bot, name="remote", transport="streamable_http", url="https://mcp.example/")
    # when
    pages = [admin_client.get(f"/admin/agents/mcpserver/{server.pk}/change/") for server in (stdio, http)]
    added = admin_client.get("/admin/agents/mcpserver/add/")
    # then: the warning on the stdio server and the add form, not on the HTTP server
    warning = "runs its command on this host as the hub&#x27;s user"
    assert [page.status_code for page in pages] == [200, 200]
    assert [warning in page.content.decode() for page in (*pages, added)] == [True, False, True]
