"""The MCP server admin (M1): secrets write-only and encrypted, bad input a form error that writes nothing,
"Test" connects to the real stub server and stores what it found; the turn page's tool-call timeline (M2)."""

import json

import pytest
from django.db import connection

from agents.admin.mcp import STDIO_WARNING
from agents.models import McpServer, Thread, Turn, TurnToolCall
from tests.agents.factories import BotFactory, ThreadFactory
from tests.stubs.mcp_server import stdio_command

pytestmark = pytest.mark.django_db

ENV_SECRET = "mcp-admin-env-secret-9001"
HEADER_SECRET = "Bearer mcp-admin-header-9002"


@pytest.fixture(autouse=True)
def _slow_machine(settings):
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 60.0


def form_data(bot, **changes) -> dict:
    command, args = stdio_command()
    data = {
        "bot": bot.pk,
        "name": "files",
        "transport": "stdio",
        "is_enabled": "on",
        "on_failure": "continue",
        "allowed_tools": '["echo"]',
        "command": command,
        "args": json.dumps(args),
        "environment": json.dumps({"STUB_TOKEN": ENV_SECRET}),
        "url": "",
        "headers": "",
        "call_timeout_seconds": "",
        "max_steps": "",
        "time_budget_seconds": "",
    }
    data.update(changes)
    return data


def test_m1_environment_is_encrypted_write_only_and_kept_when_left_blank(admin_client):
    # given
    bot = BotFactory()

    # when: added, then saved again with the secret field left blank
    added = admin_client.post("/admin/agents/mcpserver/add/", form_data(bot))
    server = McpServer.objects.get(bot=bot)
    change_url = f"/admin/agents/mcpserver/{server.pk}/change/"
    saved = admin_client.post(change_url, form_data(bot, environment="", allowed_tools='["echo", "add"]'))
    page = admin_client.get(change_url)
    listing = admin_client.get("/admin/agents/mcpserver/")

    # then
    assert (added.status_code, saved.status_code, page.status_code) == (302, 302, 200)
    server.refresh_from_db()
    assert json.loads(server.environment) == {"STUB_TOKEN": ENV_SECRET}
    assert server.allowed_tools == ["echo", "add"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT environment FROM agents_mcpserver WHERE id = %s", [server.pk])
        (raw,) = cursor.fetchone()
    assert ENV_SECRET not in raw
    for response in (page, listing):
        assert ENV_SECRET not in response.content.decode()


@pytest.mark.parametrize(
    ("changes", "field", "error"),
    [
        ({"environment": "TOKEN=abc"}, "environment", 'The environment must be a JSON object, e.g. {"NAME": "value"}.'),
        (
            {"environment": '{"TOKEN": 1}'},
            "environment",
            "The environment must be a JSON object whose values are strings.",
        ),
        ({"args": '"-y"'}, "args", "The arguments must be a JSON list of strings."),
        ({"allowed_tools": "[1, 2]"}, "allowed_tools", "The allowed tools must be a JSON list of strings."),
        ({"command": ""}, "command", "A stdio server needs the command that starts it."),
        ({"transport": "streamable_http"}, "url", "A streamable HTTP server needs its URL."),
        ({"name": "Files Server"}, "name", "Lower-case letters, digits and _, starting with a letter."),
    ],
)
def test_m1_bad_input_is_a_form_error_and_writes_nothing(admin_client, changes, field, error):
    # given
    bot = BotFactory()

    # when
    response = admin_client.post("/admin/agents/mcpserver/add/", form_data(bot, **changes))

    # then
    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == [error]
    assert McpServer.objects.count() == 0


def test_m1_test_connects_lists_the_tools_and_stores_the_result(admin_client):
    # given
    bot = BotFactory()
    admin_client.post("/admin/agents/mcpserver/add/", form_data(bot))
    server = McpServer.objects.get(bot=bot)

    # when
    response = admin_client.post(f"/admin/agents/mcpserver/{server.pk}/test/", follow=True)

    # then
    server.refresh_from_db()
    assert server.last_test_ok is True
    assert server.last_test_error == ""
    assert [tool["name"] for tool in server.last_test_tools][:3] == ["echo", "add", "fail"]
    assert server.last_test_at is not None
    page = response.content.decode()
    # (the page also warns, as every stdio server's page does when DEBUG is off: issue 30)
    shown = [str(message) for message in response.context["messages"] if str(message) != str(STDIO_WARNING)]
    assert shown[-1:] == ["files: connected; tools: " + ", ".join(tool["name"] for tool in server.last_test_tools)]
    assert "<code>echo</code> (allowed) Echo the text back." in page
    assert ENV_SECRET not in page


def test_m1_test_of_a_server_that_cannot_start_stores_a_readable_error_without_its_secret(admin_client):
    # given: a command that prints its token and exits
    bot = BotFactory()
    script = "import os, sys; sys.stderr.write('bad token ' + os.environ['STUB_TOKEN']); sys.exit(1)"
    admin_client.post("/admin/agents/mcpserver/add/", form_data(bot, args=json.dumps(["-c", script])))
    server = McpServer.objects.get(bot=bot)

    # when
    response = admin_client.post(f"/admin/agents/mcpserver/{server.pk}/test/", follow=True)

    # then
    server.refresh_from_db()
    assert server.last_test_ok is False
    assert server.last_test_error == (
        "files: the server closed the connection during connecting (server stderr: bad token [redacted])"
    )
    assert server.last_test_tools == []
    assert ENV_SECRET not in response.content.decode()


def test_m1_test_by_get_changes_nothing(admin_client):
    # given
    bot = BotFactory()
    admin_client.post("/admin/agents/mcpserver/add/", form_data(bot))
    server = McpServer.objects.get(bot=bot)

    # when
    response = admin_client.get(f"/admin/agents/mcpserver/{server.pk}/test/")

    # then
    server.refresh_from_db()
    assert response.status_code == 302
    assert (server.last_test_ok, server.last_test_at) == (None, None)


def test_m2_the_turn_page_shows_the_tool_calls_as_an_ordered_timeline(admin_client):
    # given: calls recorded out of order
    bot = BotFactory()
    thread = ThreadFactory(bot=bot, runtime_mode=Thread.RuntimeMode.CHAT, channel=Thread.Channel.REST)
    turn = Turn.objects.create(bot=bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id="rest:9")
    TurnToolCall.objects.create(
        turn=turn, step=2, index=0, server="files", tool="read_file", arguments={"path": "b.txt"},
        result="B" * 400, status="ok", duration_ms=12,
    )  # fmt: skip
    TurnToolCall.objects.create(
        turn=turn, step=1, index=0, server="files", tool="list_dir", arguments={"path": "."},
        result="a.txt b.txt", status="ok", duration_ms=7,
    )  # fmt: skip

    # when
    page = admin_client.get(f"/admin/agents/turn/{turn.pk}/change/").content.decode()

    # then
    assert "Tool calls (timeline)" in page
    assert page.index("list_dir") < page.index("read_file")
    assert "<code>{&quot;path&quot;: &quot;b.txt&quot;}</code>" in page
    assert f"<summary>{'B' * 300}…</summary>" in page
