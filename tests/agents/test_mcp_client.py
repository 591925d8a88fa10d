"""The MCP client (M1): list and call tools over stdio and streamable HTTP against a real SDK server; every
failure a server can produce ends in a typed, readable error within its timeout; tool output is made
storable, redacted of the server's secrets and capped before a model could see it."""

import sys
import time
from collections.abc import Iterator

import pytest

from agents.mcp.client import McpConnection, mcp_connection, mcp_connections_close_all
from agents.mcp.config import STDIO, STREAMABLE_HTTP, McpServerConfig
from agents.mcp.errors import McpConnectError, McpConnectionLostError, McpTimeoutError
from agents.mcp.output import TRUNCATION_MARKER, tool_output_text
from core.redaction import REDACTED as SECRET_MASK
from tests.stubs.mcp_server import http_server_running, stdio_command

SECRET = "env-secret-value-4711"
HEADER_SECRET = "Bearer header-secret-0815"
# A loaded CI machine needs seconds just to import the SDK in the server process.
CONNECT_TIMEOUT_SECONDS = 60.0
STUB_TOOLS = [
    "echo",
    "add",
    "fail",
    "hang",
    "huge",
    "malformed",
    "env_value",
    "environment_dump",
    "header_value",
    "crash",
    "counter",
]


def stdio_config(**overrides) -> McpServerConfig:
    command, args = stdio_command()
    fields = {
        "name": "stub",
        "transport": STDIO,
        "command": command,
        "args": tuple(args),
        "environment": (("STUB_TOKEN", SECRET),),
        "connect_timeout_seconds": CONNECT_TIMEOUT_SECONDS,
        "call_timeout_seconds": 10.0,
    }
    return McpServerConfig(**{**fields, **overrides})


def text_of(result, config: McpServerConfig, max_chars: int = 16000) -> str:
    return tool_output_text(
        blocks=result.blocks, structured=result.structured, secrets=config.secrets(), max_chars=max_chars
    )


@pytest.fixture(scope="module")
def stdio_connection() -> Iterator[McpConnection]:
    """One stdio session for the module's read-only checks (starting the server costs seconds)."""
    connection = McpConnection(stdio_config()).open()
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def mcp_http_server() -> Iterator[str]:
    with http_server_running() as url:
        yield url


@pytest.fixture(autouse=True)
def _close_pool() -> Iterator[None]:
    yield
    mcp_connections_close_all()


def test_m1_stdio_lists_the_servers_tools_with_their_schemas(stdio_connection):
    # when: the connection was opened (spawn, handshake, tools/list)
    tools = {tool.name: tool for tool in stdio_connection.tools}

    # then
    assert sorted(tools) == sorted(STUB_TOOLS)
    assert tools["add"].input_schema["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert tools["echo"].description == "Echo the text back."


def test_m1_stdio_calls_a_tool_and_gets_its_answer(stdio_connection):
    # when
    result = stdio_connection.call_tool("add", {"a": 2, "b": 40}, timeout_seconds=10)

    # then
    assert (text_of(result, stdio_connection.config), result.is_error) == ("42", False)


def test_m1_streamable_http_lists_and_calls_tools(mcp_http_server):
    # given
    config = McpServerConfig(
        name="web",
        transport=STREAMABLE_HTTP,
        url=mcp_http_server,
        headers=(("Authorization", HEADER_SECRET),),
        connect_timeout_seconds=CONNECT_TIMEOUT_SECONDS,
    )

    # when
    connection = mcp_connection(config=config)
    result = connection.call_tool("echo", {"text": "over http"}, timeout_seconds=10)

    # then
    assert sorted(tool.name for tool in connection.tools) == sorted(STUB_TOOLS)
    assert text_of(result, config) == "echo: over http"


def test_m1_a_header_value_a_server_echoes_back_is_redacted(mcp_http_server):
    # given: a server that quotes our Authorization header in its answer
    config = McpServerConfig(
        name="web",
        transport=STREAMABLE_HTTP,
        url=mcp_http_server,
        headers=(("Authorization", HEADER_SECRET),),
        connect_timeout_seconds=CONNECT_TIMEOUT_SECONDS,
    )

    # when
    result = mcp_connection(config=config).call_tool("header_value", {"name": "authorization"}, timeout_seconds=10)

    # then: the raw answer carried it; the text for the model does not
    assert HEADER_SECRET in str(result.blocks)
    assert text_of(result, config) == f"authorization={SECRET_MASK}"


def test_m1_a_servers_own_environment_secret_never_reaches_the_model(stdio_connection):
    # when: the tool answers with the server's own secret
    result = stdio_connection.call_tool("env_value", {"name": "STUB_TOKEN"}, timeout_seconds=10)

    # then
    assert SECRET in str(result.blocks)
    assert text_of(result, stdio_connection.config) == f"STUB_TOKEN={SECRET_MASK}"


def test_m1_a_tool_error_is_an_error_answer_not_an_exception(stdio_connection):
    # when
    result = stdio_connection.call_tool("fail", {"message": "disk full"}, timeout_seconds=10)

    # then
    assert result.is_error is True
    assert text_of(result, stdio_connection.config) == "Error executing tool fail"


def test_m1_a_hung_tool_times_out_and_the_session_stays_usable(stdio_connection):
    # when
    started = time.monotonic()
    with pytest.raises(McpTimeoutError) as raised:
        stdio_connection.call_tool("hang", {"seconds": 30}, timeout_seconds=0.5)
    elapsed = time.monotonic() - started

    # then: bounded by the call's timeout, readable, and the next call works
    assert elapsed < 3.0
    assert raised.value.message == "stub: tool 'hang' timed out"
    answer = stdio_connection.call_tool("echo", {"text": "still here"}, timeout_seconds=10)
    assert text_of(answer, stdio_connection.config) == "echo: still here"


def test_m1_huge_output_is_capped_before_the_model_sees_it(stdio_connection):
    # when
    result = stdio_connection.call_tool("huge", {"chars": 200_000}, timeout_seconds=10)
    text = text_of(result, stdio_connection.config, max_chars=1000)

    # then
    assert len(text) == 1000
    assert text.endswith(TRUNCATION_MARKER.format(kept=1000, total=200_000))


def test_l3_malformed_output_is_made_storable_and_binary_becomes_a_label(stdio_connection):
    # when: garbage on stdout, a NUL in the text, an image block
    result = stdio_connection.call_tool("malformed", {}, timeout_seconds=10)

    # then
    assert text_of(result, stdio_connection.config) == "before\ufffdafter\n[image: image/png]"


def test_m1_a_crashed_server_gives_a_readable_error_and_the_pool_starts_it_again():
    # given
    config = stdio_config()
    connection = mcp_connection(config=config)

    # when
    with pytest.raises(McpConnectionLostError) as raised:
        connection.call_tool("crash", {}, timeout_seconds=10)

    # then
    assert raised.value.message == "stub: the server closed the connection during tool 'crash'"
    assert connection.is_alive is False
    again = mcp_connection(config=config)
    assert again is not connection
    assert text_of(again.call_tool("echo", {"text": "back"}, timeout_seconds=10), config) == "echo: back"


def test_m1_a_server_that_exits_at_start_gives_its_stderr_redacted():
    # given: a "server" that prints its secret and exits
    script = f"import sys; sys.stderr.write('cannot start, token {SECRET}\\n'); sys.exit(2)"
    config = stdio_config(args=("-c", script), command=sys.executable)

    # when
    with pytest.raises(McpConnectError) as raised:
        McpConnection(config).open()

    # then
    assert raised.value.message == (
        f"stub: the server closed the connection during connecting (server stderr: cannot start, token {SECRET_MASK})"
    )


def test_m1_a_server_that_never_answers_the_handshake_fails_within_the_connect_timeout():
    # given
    config = stdio_config(args=("-c", "import time; time.sleep(60)"), connect_timeout_seconds=1.0)

    # when
    started = time.monotonic()
    with pytest.raises(McpConnectError) as raised:
        McpConnection(config).open()

    # then
    assert time.monotonic() - started < 3.0
    assert raised.value.message == "stub: the server did not answer within 1 s"


def test_m1_a_command_that_does_not_exist_is_a_connect_error():
    # when
    with pytest.raises(McpConnectError) as raised:
        McpConnection(stdio_config(command="/nonexistent/mcp-server", args=())).open()

    # then
    assert raised.value.message == (
        "stub: connecting failed: FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )


def test_m1_a_config_never_prints_its_secrets():
    assert SECRET not in repr(stdio_config())
