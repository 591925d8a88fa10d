"""A local MCP server written with the official SDK's own server API (`mcp.server.mcpserver.MCPServer`).

Run over stdio (`python tests/stubs/mcp_server.py stdio`) or streamable HTTP
(`python tests/stubs/mcp_server.py http <port>`). Its tools cover what a real server does to a client:
- `echo(text)`: answers; `add(a, b)`: a typed answer
- `fail(message)`: the tool reports an error (isError)
- `hang(seconds)`: never answers in time
- `huge(chars)`: an answer far over the size cap
- `malformed()`: a non-JSON line on stdout, then text with NUL and an image block
- `env_value(name)`: reads its own environment (a server that leaks its secret: redaction must catch it)
- `environment_dump()`: prints its whole environment and its parent's /proc environ (issue 30: neither may hold
  the hub's)
- `header_value(name)`: over HTTP, echoes a request header back (the same leak, for headers)
- `crash()`: the process exits mid-call
- `counter(seconds)`: counts its calls in the file named by STUB_COUNTER_FILE, then answers after `seconds`
  (proves a re-run repeats no completed call, and that one in flight at a crash runs again)
"""

import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SERVER_PATH = Path(__file__).resolve()
# Under load (8 engineers on 2 cores) importing the SDK's server alone takes seconds.
START_TIMEOUT_SECONDS = 60.0


def build_server():
    # The server side of the SDK is imported here, not at module level: the fixtures below are imported by
    # tests that only need the command line, and the import costs seconds.
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("amux-stub")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Always fails.")
    def fail(message: str = "it broke") -> str:
        raise ValueError(message)

    @server.tool(description="Sleeps before answering.")
    def hang(seconds: float = 60.0) -> str:
        time.sleep(seconds)
        return "woke up"

    @server.tool(description="Answers with a very long text.")
    def huge(chars: int = 200_000) -> str:
        return "x" * chars

    @server.tool(description="Answers with text no database stores as is, and an image.", structured_output=False)
    def malformed() -> list:
        from mcp.server.mcpserver.utilities.types import Image

        # Garbage on stdout first (over stdio it lands in the JSON-RPC stream), then NUL and an image block.
        print("this line is not JSON-RPC", flush=True)
        return ["before\x00after", Image(data=base64.b64decode(b"iVBORw0KGgo="), format="png")]

    @server.tool(description="Reads an environment variable of the server.")
    def env_value(name: str) -> str:
        return f"{name}={os.environ.get(name, '')}"

    @server.tool(description="Prints its own environment and its parent's (/proc/<ppid>/environ).")
    def environment_dump() -> str:
        own = "\n".join(f"{key}={value}" for key, value in sorted(os.environ.items()))
        try:
            parent = Path(f"/proc/{os.getppid()}/environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
        except OSError as error:
            parent = f"unreadable: {type(error).__name__}"
        return f"own:\n{own}\nparent:\n{parent}"

    @server.tool(description="Echoes a request header (HTTP only).")
    def header_value(name: str, ctx: Context) -> str:
        request = getattr(ctx.request_context, "request", None)
        headers = getattr(request, "headers", {}) or {}
        return f"{name}={headers.get(name, '')}"

    @server.tool(description="The server process dies mid-call.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Counts how often it ran (then takes `seconds` to answer).")
    def counter(seconds: float = 0.0) -> str:
        path = os.environ.get("STUB_COUNTER_FILE", "")
        count = 1
        if path:
            with open(path, "a+") as handle:
                handle.write("x")
                handle.seek(0)
                count = len(handle.read())
        time.sleep(seconds)
        return f"count={count}"

    return server


def stdio_command() -> tuple[str, list[str]]:
    """The command line that runs this server over stdio (what an operator would type into McpServer)."""
    return sys.executable, [str(SERVER_PATH), "stdio"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def http_server_running() -> Iterator[str]:
    """This server over streamable HTTP on 127.0.0.1 (a subprocess); yields its endpoint URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER_PATH), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the MCP stub server exited at start") from None
            time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError("the MCP stub server did not start")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for a request still in a `hang`: do not wait with it
            process.kill()
            process.wait(timeout=10)


if __name__ == "__main__":
    app = build_server()
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run("stdio")
