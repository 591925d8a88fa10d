"""Tools through MCP: the cost of an idle stdio connection per worker process, and the tool loop's own overhead.

1. Idle stdio connection (the per-process pool keeps one per configured server): start-up = spawn + handshake
   + tools/list of the SDK stub server (tests/stubs/mcp_server.py, a Python MCPServer: most of it is the
   server importing the SDK), median of a few opens; memory = the server process's resident set (VmRSS of the
   child) and what the open connection adds to this process (its RSS before/after the first open: the SDK's
   client modules, the loop thread, the session).
2. Loop overhead per tool step, excluding the model's and the tool's own time: `tool_loop_run` with the real
   OpenAI Chat adapter against the local LLM stub (answering instantly, always with a tool call) and the real
   stdio stub's `echo` tool. Each `client.complete` and each `tool.run` is timed; overhead = the loop's wall
   time minus both, per step (request building, the adapter's message conversion, record keeping, the
   final-answer request). The MCP round trip of the no-op tool (our thread hop + JSON-RPC over the pipe + the
   server's dispatch) is reported beside it, since an operator pays it per call too. Recording to the
   database (`turn_tool_call_record`, one update_or_create per call) is not in this number.
"""

import logging
import os
import statistics
import sys
import time
from pathlib import Path

import django

OPENS = 3
LOOPS = 30
STEPS_PER_LOOP = 10


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()
    logging.disable(logging.INFO)  # per-call log lines would be part of what is measured


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def run() -> None:
    _setup()
    from agents.llm.base import ChatMessage, CompletionRequest, ToolSpec
    from agents.llm.openai_chat import OpenAIChatClient
    from agents.llm.settings import ProviderSettings
    from agents.mcp.client import McpConnection
    from agents.mcp.config import STDIO, McpServerConfig
    from agents.mcp.output import tool_output_text
    from agents.tools.loop import LoopTool, ToolLimits, tool_loop_run
    from tests.stubs.llm_servers import LLMStubServer, StubResponse, openai_chat_body
    from tests.stubs.mcp_server import stdio_command

    command, args = stdio_command()
    config = McpServerConfig(
        name="stub", transport=STDIO, command=command, args=tuple(args), connect_timeout_seconds=120.0
    )

    # 1. idle stdio connection
    rss_before = _rss_kb(os.getpid())
    starts, server_rss = [], []
    for _ in range(OPENS):
        started = time.perf_counter()
        connection = McpConnection(config).open()
        starts.append((time.perf_counter() - started) * 1000)
        time.sleep(0.2)
        server_rss.extend(_rss_kb(child) for child in _children(os.getpid()))
        rss_open = _rss_kb(os.getpid())
        connection.close()
    print(
        f"idle stdio connection: start-up median {statistics.median(starts):.0f} ms (of {OPENS}: "
        f"{', '.join(f'{s:.0f}' for s in starts)} ms)"
    )
    print(
        f"  server process RSS {statistics.median(server_rss) / 1024:.1f} MB; "
        f"client side in this process +{(rss_open - rss_before) / 1024:.1f} MB after the first open"
    )

    # 2. loop overhead per step
    stub = LLMStubServer().start()
    stub.respond_with(
        "openai_chat",
        lambda request: StubResponse(
            body=openai_chat_body(tool_calls=[("stub__echo", {"text": "ping"})])
            if "tools" in request.json
            else openai_chat_body(text="done")
        ),
    )
    client = OpenAIChatClient(
        ProviderSettings(name="stub", kind="openai_chat", base_url=stub.url("/v1"), api_key="k",
                         timeout_seconds=10.0, max_retries=0)
    )  # fmt: skip
    connection = McpConnection(config).open()
    model_seconds: list[float] = []
    tool_seconds: list[float] = []

    class TimedClient:
        def complete(self, request):
            started = time.perf_counter()
            try:
                return client.complete(request)
            finally:
                model_seconds.append(time.perf_counter() - started)

    def echo(arguments: dict, timeout_seconds: float) -> tuple[str, bool]:
        started = time.perf_counter()
        try:
            result = connection.call_tool("echo", arguments, timeout_seconds=timeout_seconds)
        finally:
            tool_seconds.append(time.perf_counter() - started)
        return tool_output_text(blocks=result.blocks, structured=result.structured, secrets=(), max_chars=16000), False

    tool = LoopTool(
        spec=ToolSpec(name="stub__echo", description="Echo", parameters={"type": "object", "properties": {}}),
        server="stub",
        tool="echo",
        run=echo,
    )
    request = CompletionRequest(model="gpt-4o", messages=(ChatMessage("user", "ping it"),), max_output_tokens=64)
    limits = ToolLimits(max_steps=STEPS_PER_LOOP, time_budget_seconds=600.0, call_timeout_seconds=10.0)
    per_step_overhead_ms: list[float] = []
    for loop in range(LOOPS + 1):
        model_seconds.clear()
        tool_seconds.clear()
        recorded = []
        started = time.perf_counter()
        tool_loop_run(client=TimedClient(), request=request, tools=[tool], limits=limits, record=recorded.append)
        wall = time.perf_counter() - started
        if loop == 0:
            continue  # warm-up: first SDK request, first call
        overhead = wall - sum(model_seconds) - sum(tool_seconds)
        per_step_overhead_ms.append(overhead * 1000 / STEPS_PER_LOOP)
        round_trips = list(tool_seconds)
    connection.close()
    stub.stop()
    round_trip_ms = [seconds * 1000 for seconds in round_trips]
    print(
        f"tool loop overhead per step (excl. model and tool time), {LOOPS} loops x {STEPS_PER_LOOP} steps: "
        f"p50 {statistics.median(per_step_overhead_ms):.2f} ms, p95 {_percentile(per_step_overhead_ms, 0.95):.2f} ms "
        f"(goal p50 < 20 ms)"
    )
    print(f"  MCP stdio round trip of the no-op tool (last loop): p50 {statistics.median(round_trip_ms):.1f} ms")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    run()
