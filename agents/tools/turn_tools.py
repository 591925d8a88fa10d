"""The tool loop run for one Turn: its bot's MCP servers as tools, its calls recorded as TurnToolCall rows.

    result, calls = turn_tools_run(turn=turn, client=client, request=request)

is what the turn pipeline calls where it made its one `client.complete(request)`: without enabled servers,
or with a primary model that cannot call tools, it is exactly that one call. Otherwise:
- each enabled server is connected (the per-process pool) and its tools filtered by the server's allowlist
  (empty: none); the model sees them as `<server>__<tool>`;
- a server that cannot be reached is recorded as a step-0 row (status error) and skipped when its
  `on_failure` is "continue", or ends the turn with `ToolServerUnavailableError` when it is "fail";
- the limits are the bot's own (Bot.tool_*), else the hub's settings (AMUX_TOOL_*), tightened by any enabled
  server's own values; the time budget is then fitted to the task's soft time limit: what this run spent
  already (since its claim, connecting included), the budget and the final answer's longest call (the
  provider's timeout x its attempts) must end SOFT_LIMIT_MARGIN_SECONDS before the limit, so the final answer
  is never cut off (a model step that starts just before the budget ends may still overrun it: the soft limit
  then makes the turn retry, and the re-run replays the recorded calls);
- calls a previous run of this turn recorded are replayed from the rows, never re-run (see agents.tools.loop).

Tool activity lives only in TurnToolCall rows: nothing here writes a Message, a thread-context item or the
turn's reply (M3); the caller stores `result.text` as the one agent_reply.
"""

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from django.conf import settings
from django.utils import timezone

from agents.llm.base import CompletionRequest, CompletionResult, LLMClient, ToolSpec
from agents.mcp.client import McpConnection, mcp_connection
from agents.mcp.config import McpServerConfig
from agents.mcp.errors import McpError
from agents.mcp.output import tool_output_text
from agents.mcp.services import bot_call_timeout_seconds, mcp_server_config, mcp_servers_enabled
from agents.models import Bot, McpServer, Provider, Turn, TurnToolCall
from agents.secrets import hub_secrets, turn_redactions_add
from agents.services.turns.approvals import approval_gate, approval_pending_step
from agents.services.turns.assembly import DEFAULT_CONTEXT_WINDOW_TOKENS
from agents.tools.budget import budget_within_soft_limit, task_soft_limit_seconds
from agents.tools.loop import LoopTool, Status, ToolCallRecord, ToolLimits, model_call, tool_loop_run
from core.redaction import RedactionTally, redacted, redacted_json
from core.text import storable_text

logger = logging.getLogger(__name__)

SETUP_STEP = 0
MAX_TOOL_NAME_CHARS = 64  # the strictest provider limit (OpenAI, Gemini)
MAX_DESCRIPTION_CHARS = 1024


class ToolServerUnavailableError(Exception):
    """A server whose on_failure is "fail" could not be reached: the turn fails with this readable message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def exposed_tool_name(*, server: str, tool: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")[:MAX_TOOL_NAME_CHARS]


def final_call_seconds(*, provider: Provider) -> float:
    """The longest one model call can take: each SDK attempt may run to the timeout (agents.llm.registry)."""
    return float(provider.timeout_seconds) * (int(provider.max_retries) + 1)


def tool_limits(*, bot: Bot, servers: Sequence[McpServer]) -> ToolLimits:
    """The bot's limits (its own, else the hub's settings), tightened by any server's own: the strictest wins,
    since each server protects its own costs. The time budget is fitted to the soft limit by the caller."""
    steps = [bot.tool_max_steps or int(settings.AMUX_TOOL_MAX_STEPS)]
    steps += [s.max_steps for s in servers if s.max_steps is not None]
    budget = [bot.tool_time_budget_seconds or float(settings.AMUX_TOOL_TIME_BUDGET_SECONDS)]
    budget += [s.time_budget_seconds for s in servers if s.time_budget_seconds is not None]
    return ToolLimits(
        max_steps=min(steps),
        time_budget_seconds=min(budget),
        call_timeout_seconds=bot_call_timeout_seconds(bot=bot),
    )


def mcp_tool_runner(*, config: McpServerConfig, tool: str, tally: RedactionTally, max_chars: int):
    def run(arguments: dict, timeout_seconds: float) -> tuple[str, bool]:
        # A crashed server's connection is dead: the pool starts the server again for the next call.
        connection = mcp_connection(config=config)
        result = connection.call_tool(
            tool, arguments, timeout_seconds=min(timeout_seconds, config.call_timeout_seconds)
        )
        text = tool_output_text(
            blocks=result.blocks,
            structured=result.structured,
            secrets=tally.secrets,
            max_chars=max_chars,
            tally=tally,
        )
        return text, result.is_error

    return run


def loop_tools(
    *, servers: Sequence[McpServer], tally: RedactionTally, failures: list[tuple[McpServer, str]], window: int = 0
) -> list[LoopTool]:
    """The allowed tools of every reachable server; each unreachable one is appended to `failures`.

    One tool answer takes at most the hub's cap, and never more than an eighth of the model's window `window`
    (issue 30, finding 6; a character is at most one token, see assembly).
    """
    max_chars = min(int(settings.AMUX_TOOL_RESULT_MAX_CHARS), (window or DEFAULT_CONTEXT_WINDOW_TOKENS) // 8)
    tools: list[LoopTool] = []
    for server in servers:
        allowed = {str(name) for name in server.allowed_tools or ()}
        if not allowed:
            continue  # an empty allowlist allows nothing: do not even start the server
        config = mcp_server_config(server=server)
        try:
            connection: McpConnection = mcp_connection(config=config)
        except McpError as error:
            failures.append((server, tally(error.message)))
            continue
        needs_approval = {str(name) for name in server.approval_tools or ()}
        for tool in connection.tools:
            if tool.name not in allowed:
                continue
            spec = ToolSpec(
                name=exposed_tool_name(server=server.name, tool=tool.name),
                description=tally(storable_text(tool.description))[:MAX_DESCRIPTION_CHARS],
                parameters=tool.input_schema or {"type": "object", "properties": {}},
            )
            tools.append(
                LoopTool(
                    spec=spec,
                    server=server.name,
                    tool=tool.name,
                    run=mcp_tool_runner(config=config, tool=tool.name, tally=tally, max_chars=max_chars),
                    requires_approval=tool.name in needs_approval,
                )
            )
    return tools


def turn_tool_call_record(*, turn: Turn, call: ToolCallRecord, secrets: tuple[str, ...] = ()) -> TurnToolCall:
    """Write one call (idempotent on turn, step, index: a re-run that reaches the same slot overwrites it).

    Everything is redacted once more: the arguments are the model's, and nothing guarantees they hold no secret.
    """
    arguments = call.arguments if isinstance(call.arguments, dict) else {"raw": call.arguments}
    arguments = redacted_json(arguments, secrets=secrets)
    row, _ = TurnToolCall.objects.update_or_create(
        turn=turn,
        step=call.step,
        index=call.index,
        defaults={
            "call_id": call.call_id[:200],
            "server": call.server,
            "tool": call.tool[:200],
            "arguments": arguments,
            "result": redacted(call.result, secrets=secrets),
            "status": call.status,
            "duration_ms": call.duration_ms,
            "error": redacted(call.error, secrets=secrets),
        },
    )
    return row


def turn_tool_calls_completed(*, turn: Turn) -> list[ToolCallRecord]:
    """The calls a previous run of `turn` recorded (set-up rows excluded), as the loop replays them."""
    rows = TurnToolCall.objects.filter(turn=turn, step__gt=SETUP_STEP).order_by("step", "index")
    return [
        ToolCallRecord(
            step=row.step,
            index=row.index,
            call_id=row.call_id,
            name=exposed_tool_name(server=row.server, tool=row.tool) if row.server else row.tool,
            server=row.server,
            tool=row.tool,
            arguments=row.arguments.get("raw", "") if set(row.arguments) == {"raw"} else row.arguments,
            result=row.result,
            status=cast(Status, row.status),  # the column's choices are Status's values
            duration_ms=row.duration_ms,
            error=row.error,
        )
        for row in rows
    ]


def turn_tools_run(
    *,
    turn: Turn,
    client: LLMClient,
    request: CompletionRequest,
    on_text: Callable[[str], None] | None = None,
    on_tool_step: Callable[[str], None] | None = None,
    steer: Callable[[], Sequence[str]] | None = None,
) -> tuple[CompletionResult, list[ToolCallRecord]]:
    """The turn's answer through its bot's tools (streamed into `on_text` when given); see the module docstring."""
    entered = timezone.now()
    bot = turn.bot
    # The model first: a model that cannot call tools needs no read of the bot's servers (~2.5 ms of CPU per turn,
    # the query joins the bot's row and orders it; issue 11).
    servers = list(mcp_servers_enabled(bot=bot)) if bot.primary_model.supports_tool_calls else []
    if not servers:
        return model_call(client=client, request=request, on_text=on_text), []
    # Every secret the hub holds (issue 30): a tool may print any of them, not only its own server's.
    tally = RedactionTally(
        secrets=hub_secrets(extra=[v for s in servers for v in mcp_server_config(server=s).secrets()])
    )
    secrets = tally.secrets
    failures: list[tuple[McpServer, str]] = []
    tools = loop_tools(servers=servers, tally=tally, failures=failures, window=bot.primary_model.context_window)
    for position, (server, message) in enumerate(failures):
        turn_tool_call_record(
            turn=turn,
            call=ToolCallRecord(
                step=SETUP_STEP,
                index=position,
                call_id="",
                name="",
                server=server.name,
                tool="(connect)",
                arguments={},
                result="",
                status="error",
                duration_ms=0,
                error=message,
            ),
            secrets=secrets,
        )
        logger.warning("mcp server unavailable", extra={"turn_id": turn.pk, "server": server.name, "error": message})
        if server.on_failure == McpServer.OnFailure.FAIL:
            raise ToolServerUnavailableError(f"The tool server {server.name!r} is unavailable: {message}")
    limits = tool_limits(bot=bot, servers=servers)
    # The run began at its claim (this task's start); connecting above took part of the soft limit already.
    began = turn.claimed_at or entered
    fitted = budget_within_soft_limit(
        budget_seconds=limits.time_budget_seconds,
        soft_limit_seconds=task_soft_limit_seconds(),
        elapsed_seconds=(timezone.now() - began).total_seconds(),
        final_call_seconds=final_call_seconds(provider=bot.primary_model.provider),
    )
    if fitted < limits.time_budget_seconds:
        logger.info(
            "tool budget fitted to the soft time limit",
            extra={"turn_id": turn.pk, "budget_seconds": limits.time_budget_seconds, "fitted_seconds": fitted},
        )
        limits = replace(limits, time_budget_seconds=fitted)
    try:
        return tool_loop_run(
            client=client,
            request=request,
            tools=tools,
            limits=limits,
            completed_calls=turn_tool_calls_completed(turn=turn),
            record=lambda call: turn_tool_call_record(turn=turn, call=call, secrets=secrets),
            on_text=on_text,
            on_tool_step=on_tool_step,
            # H1: calls of tools that need approval pass the gate; a paused step is finished first.
            gate=approval_gate(turn=turn, servers={server.name: server for server in servers}),
            pending_step=approval_pending_step(turn=turn),
            steer=steer,  # queue mode steer (O2): messages that arrive meanwhile, at each tool-call boundary
        )
    finally:
        turn_redactions_add(turn_id=turn.pk, count=tally.count)
