"""The bounded tool loop of a turn (ARCHITECTURE M2), independent of the ORM and of MCP.

    result, calls = tool_loop_run(client=..., request=..., tools=..., limits=..., completed_calls=..., record=...)

The model gets `tools` (their `ToolSpec`s; each adapter puts them in its provider's native format) and may
call them for at most `limits.max_steps` steps within `limits.time_budget_seconds`; each call runs with
`limits.call_timeout_seconds` (never past the budget). A step's results go back to the model in the native
tool-result format. When the model answers without calling a tool, that is the answer. When a limit is hit,
the model is asked once more WITHOUT tools, with the tool results so far as plain text (a history holding
native tool-use blocks but no tool definitions is refused by some providers), so every turn ends in text.

Invariants:
- Only the tools handed in can run: a call to any other name is refused, recorded, and the model told so.
- Every call is passed to `record` as soon as it has finished, before the next call and the next step.
- `completed_calls` (what a previous run of the same turn recorded) is replayed, not re-run: its steps are
  rebuilt into the conversation from the record, and the loop continues with the next step. A call that was
  in flight when that run died was never recorded, so the model may ask for it again: it can run twice.
  The budget counts the replayed calls' recorded durations.
- A tool with `requires_approval` runs only when `gate(call, tool, step, index, step_calls)` returns None; a text
  from the gate is the call's result (a denial, recorded as `denied`, never run); the gate raises
  `ApprovalPending` to pause the turn (H1): the loop stops there, the calls before it in the step recorded.
  `pending_step` (step, its calls as the model asked) resumes a paused step: the recorded calls of it are
  replayed, the others run (through the gate again), and the loop goes on from there.
- `steer()` (queue mode steer, O2) is asked at every tool-call boundary: after a step's results (replayed ones
  included) and before the next model call; each text it returns joins the conversation as a user message,
  labelled as sent while the turn was working, and stays in it for the rest of the loop (the final answer too).
- With `on_text`, every model call streams (`client.stream`) and feeds it each delta; `on_tool_step` gets one
  short label per call about to run (never its arguments). Without them the calls are `client.complete`.
"""

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from agents.llm.base import ChatMessage, CompletionRequest, CompletionResult, LLMClient, ToolCall, ToolSpec, Usage
from agents.mcp.errors import McpError, McpTimeoutError
from core.text import storable_json, storable_text

logger = logging.getLogger(__name__)

Status = Literal["ok", "error", "refused", "timeout", "denied"]

FINAL_ANSWER_INSTRUCTION = (
    "The tool budget of this turn is used up ({reason}). Answer the request now from what you have; "
    "no more tools can be called."
)
TOOL_RESULTS_HEADER = "[Tool results of this turn]"
REFUSED_MESSAGE = "Tool {name!r} is not available to you: it is not in this bot's allowed tools."
BAD_ARGUMENTS_MESSAGE = "Tool {name!r} was not run: its arguments must be a JSON object."
ERROR_MESSAGE = "Tool {name!r} failed: {error}"
STEERED_HEADER = "[Sent by the person while you were working on the request above]"


class ApprovalPending(Exception):
    """The gate paused the turn on a call that needs a person's decision (H1); `approval_id` says which."""

    def __init__(self, *, approval_id: int) -> None:
        super().__init__(f"awaiting approval {approval_id}")
        self.approval_id = approval_id


@dataclass(frozen=True)
class ToolLimits:
    max_steps: int
    time_budget_seconds: float
    call_timeout_seconds: float


@dataclass(frozen=True)
class LoopTool:
    """A tool the model may call: its spec (spec.name is the name the model sees) and how to run it.

    `run(arguments, timeout_seconds)` returns the text for the model (already storable, redacted and capped)
    and a flag saying whether the tool itself reported an error; it raises McpError on a failed call.
    """

    spec: ToolSpec
    server: str
    tool: str
    run: Callable[[dict[str, Any], float], tuple[str, bool]]
    requires_approval: bool = False


# gate(call, tool, step, index, step_calls): None to run the call, a text to answer it with instead (not run), or
# raises ApprovalPending.
Gate = Callable[[ToolCall, LoopTool, int, int, Sequence[ToolCall]], str | None]


@dataclass(frozen=True)
class ToolCallRecord:
    step: int  # 1..max_steps
    index: int  # position of the call in its step
    call_id: str
    name: str  # the name the model called
    server: str
    tool: str
    arguments: dict[str, Any] | str
    result: str  # what the model got back
    status: Status
    duration_ms: int
    error: str = ""


def replayed_messages(records: Sequence[ToolCallRecord]) -> list[ChatMessage]:
    """A previous run's steps as the assistant tool-call / tool-result messages the model saw then."""
    messages: list[ChatMessage] = []
    for step in sorted({record.step for record in records}):
        in_step = sorted((r for r in records if r.step == step), key=lambda r: r.index)
        calls = tuple(ToolCall(name=r.name, arguments=r.arguments, id=r.call_id) for r in in_step)
        messages.append(ChatMessage(role="assistant", content="", tool_calls=calls))
        messages.extend(ChatMessage(role="tool", content=r.result, tool_call_id=r.call_id) for r in in_step)
    return messages


def final_request(
    *, request: CompletionRequest, records: Sequence[ToolCallRecord], reason: str, steered: Sequence[ChatMessage] = ()
) -> CompletionRequest:
    lines = [TOOL_RESULTS_HEADER]
    for record in records:
        arguments = record.arguments if isinstance(record.arguments, str) else json.dumps(record.arguments)
        lines.append(f"- {record.name}({arguments}) [{record.status}]: {record.result}")
    text = "\n".join(lines) + "\n\n" + FINAL_ANSWER_INSTRUCTION.format(reason=reason)
    messages = (*request.messages, *steered, ChatMessage("user", text))
    return replace(request, tools=(), forced_tool="", messages=messages)


def steered_messages(steer: Callable[[], Sequence[str]] | None) -> list[ChatMessage]:
    """What arrived while the turn worked (queue mode steer), as user messages the model can tell apart."""
    if steer is None:
        return []
    return [ChatMessage("user", f"{STEERED_HEADER}\n{text}") for text in steer() if text.strip()]


def model_call(
    *, client: LLMClient, request: CompletionRequest, on_text: Callable[[str], None] | None = None
) -> CompletionResult:
    """One model call: streamed into `on_text` when there is one, else whole."""
    if on_text is None:
        return client.complete(request)
    return client.stream(request, on_text=on_text)


def tool_step_label(*, call: ToolCall, tools: dict[str, LoopTool]) -> str:
    """What a person watching the card reads while the call runs: where it goes, never what it carries."""
    tool = tools.get(call.name)
    return f"{tool.server} · {tool.tool}" if tool is not None else call.name


def added_usage(total: Usage, more: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cached_input_tokens=total.cached_input_tokens + more.cached_input_tokens,
    )


def tool_call_run(
    *, call: ToolCall, step: int, index: int, tools: dict[str, LoopTool], timeout_seconds: float, clock: Callable
) -> ToolCallRecord:
    """One call: refused when not allowed, rejected when its arguments are not an object, else run."""
    tool = tools.get(call.name)
    arguments = (
        storable_json(call.arguments) if isinstance(call.arguments, dict) else storable_text(str(call.arguments))
    )

    def record(
        *, server: str, tool_name: str, result: str, status: Status, duration_ms: int, error: str = ""
    ) -> ToolCallRecord:
        return ToolCallRecord(
            step=step,
            index=index,
            call_id=call.id,
            name=call.name,
            arguments=arguments,
            server=server,
            tool=tool_name,
            result=result,
            status=status,
            duration_ms=duration_ms,
            error=error,
        )

    if tool is None:
        message = REFUSED_MESSAGE.format(name=call.name)
        return record(server="", tool_name=call.name, result=message, status="refused", duration_ms=0)
    if not isinstance(arguments, dict):
        message = BAD_ARGUMENTS_MESSAGE.format(name=call.name)
        return record(
            server=tool.server, tool_name=tool.tool, result=message, status="error", duration_ms=0, error=message
        )
    started = clock()
    try:
        text, is_error = tool.run(arguments, timeout_seconds)
    except McpError as error:
        status: Status = "timeout" if isinstance(error, McpTimeoutError) else "error"
        return record(
            server=tool.server,
            tool_name=tool.tool,
            result=ERROR_MESSAGE.format(name=call.name, error=error.message),
            status=status,
            duration_ms=int((clock() - started) * 1000),
            error=error.message,
        )
    return record(
        server=tool.server,
        tool_name=tool.tool,
        result=text,
        status="error" if is_error else "ok",
        duration_ms=int((clock() - started) * 1000),
        error="the tool reported an error" if is_error else "",
    )


def budget_spent_record(*, call: ToolCall, step: int, index: int, tools: dict[str, LoopTool]) -> ToolCallRecord:
    """A call the model asked for once the time budget was used up: recorded as a timeout, never run."""
    tool = tools.get(call.name)
    return ToolCallRecord(
        step=step,
        index=index,
        call_id=call.id,
        name=call.name,
        server=tool.server if tool is not None else "",
        tool=tool.tool if tool is not None else call.name,
        arguments=call.arguments if isinstance(call.arguments, dict) else str(call.arguments),
        result=f"Tool {call.name!r} was not run: the turn's time budget is used up.",
        status="timeout",
        duration_ms=0,
        error="time budget used up",
    )


def denied_record(*, call: ToolCall, step: int, index: int, tool: LoopTool, text: str) -> ToolCallRecord:
    """A call a person denied (or let time out): never run, the model gets `text`."""
    return ToolCallRecord(
        step=step,
        index=index,
        call_id=call.id,
        name=call.name,
        server=tool.server,
        tool=tool.tool,
        arguments=call.arguments if isinstance(call.arguments, dict) else str(call.arguments),
        result=text,
        status="denied",
        duration_ms=0,
        error="denied",
    )


def step_calls_run(
    *,
    calls: Sequence[ToolCall],
    step: int,
    tools: dict[str, LoopTool],
    limits: ToolLimits,
    deadline: float,
    record: Callable[[ToolCallRecord], object],
    clock: Callable[[], float],
    on_tool_step: Callable[[str], None] | None,
    gate: Gate | None = None,
    start: int = 0,
) -> list[ToolCallRecord]:
    """One step's calls from `start` on, in order, each passed to `record` as soon as it has finished (before the
    next one runs); a call that would start after the deadline is not run; a gated one asks `gate` first."""
    done: list[ToolCallRecord] = []
    for index in range(start, len(calls)):
        call = calls[index]
        tool = tools.get(call.name)
        verdict = gate(call, tool, step, index, calls) if gate is not None and tool and tool.requires_approval else None
        remaining = deadline - clock()
        if verdict is not None and tool is not None:
            finished = denied_record(call=call, step=step, index=index, tool=tool, text=verdict)
        elif remaining <= 0:
            finished = budget_spent_record(call=call, step=step, index=index, tools=tools)
        else:
            if on_tool_step is not None:
                on_tool_step(tool_step_label(call=call, tools=tools))
            finished = tool_call_run(
                call=call,
                step=step,
                index=index,
                tools=tools,
                timeout_seconds=min(limits.call_timeout_seconds, remaining),
                clock=clock,
            )
        record(finished)
        done.append(finished)
        logger.info(
            "tool call",
            extra={
                "step": step,
                "index": index,
                "server": finished.server,
                "tool": finished.tool,
                "status": finished.status,
                "duration_ms": finished.duration_ms,
            },
        )
    return done


def tool_loop_run(
    *,
    client: LLMClient,
    request: CompletionRequest,
    tools: Sequence[LoopTool],
    limits: ToolLimits,
    completed_calls: Sequence[ToolCallRecord] = (),
    record: Callable[[ToolCallRecord], object],
    clock: Callable[[], float] = time.monotonic,
    on_text: Callable[[str], None] | None = None,
    on_tool_step: Callable[[str], None] | None = None,
    gate: Gate | None = None,
    pending_step: tuple[int, Sequence[ToolCall]] | None = None,
    steer: Callable[[], Sequence[str]] | None = None,
) -> tuple[CompletionResult, list[ToolCallRecord]]:
    """Run the loop; returns the final answer (usage summed over every model call) and every call in order.
    Raises ApprovalPending when the gate pauses it."""
    if not tools and not completed_calls:
        return model_call(client=client, request=request, on_text=on_text), []
    by_name = {tool.spec.name: tool for tool in tools}
    calls = sorted(completed_calls, key=lambda r: (r.step, r.index))
    paused = pending_step[0] if pending_step is not None else None
    messages = list(request.messages) + replayed_messages([r for r in calls if r.step != paused])
    deadline = clock() + limits.time_budget_seconds - sum(r.duration_ms for r in calls) / 1000
    usage = Usage()
    step = max((r.step for r in calls), default=0)
    if pending_step is not None:
        # The paused step: the model's calls as it asked them, the recorded results, then the rest of the step.
        step, step_calls = pending_step
        recorded = [r for r in calls if r.step == step]
        run = functools.partial(step_calls_run, tools=by_name, limits=limits, deadline=deadline, record=record)
        done = run(calls=step_calls, step=step, clock=clock, on_tool_step=on_tool_step, gate=gate, start=len(recorded))
        calls.extend(done)
        messages.append(ChatMessage(role="assistant", content="", tool_calls=tuple(step_calls)))
        messages.extend(ChatMessage(role="tool", content=r.result, tool_call_id=r.call_id) for r in recorded + done)
    reason = f"at most {limits.max_steps} tool steps"
    steered: list[ChatMessage] = []
    while step < limits.max_steps:
        if calls:  # a tool-call boundary: the results are in, the next model call has not started
            steered += (more := steered_messages(steer))
            messages += more
        if clock() >= deadline:
            reason = f"the time budget of {limits.time_budget_seconds:g} s"
            break
        step += 1
        result = model_call(
            client=client,
            request=replace(
                request, messages=tuple(messages), tools=tuple(tool.spec for tool in tools), forced_tool=""
            ),
            on_text=on_text,
        )
        usage = added_usage(usage, result.usage)
        if not result.tool_calls:
            return replace(result, usage=usage), calls
        messages.append(ChatMessage(role="assistant", content=result.text, tool_calls=result.tool_calls))
        done = step_calls_run(
            calls=result.tool_calls,
            step=step,
            tools=by_name,
            limits=limits,
            deadline=deadline,
            record=record,
            clock=clock,
            on_tool_step=on_tool_step,
            gate=gate,
        )
        calls.extend(done)
        messages.extend(
            ChatMessage(role="tool", content=finished.result, tool_call_id=finished.call_id) for finished in done
        )
    if clock() >= deadline:
        reason = f"the time budget of {limits.time_budget_seconds:g} s"
    steered += steered_messages(steer) if step >= limits.max_steps else []  # the last step's results are in
    final = final_request(request=request, records=calls, reason=reason, steered=steered)
    result = model_call(client=client, request=final, on_text=on_text)
    usage = added_usage(usage, result.usage)
    # No tools were offered: a tool call in this answer is a provider quirk and is dropped, the text stands.
    return replace(result, tool_calls=(), usage=usage), calls
