"""Where the tool loop lets a steering message in (queue mode steer, O2): only at a tool-call boundary, after the
step's results and before the next model call; the final answer without tools keeps it; a re-run gets it back
after its replayed calls. Pure: a scripted client and an in-process tool, no database, no server."""

from dataclasses import dataclass, field

from agents.llm.base import ChatMessage, CompletionRequest, CompletionResult, ToolCall, ToolSpec
from agents.tools.loop import STEERED_HEADER, LoopTool, ToolCallRecord, ToolLimits, tool_loop_run

LIMITS = ToolLimits(max_steps=3, time_budget_seconds=60, call_timeout_seconds=5)
LOOKUP = LoopTool(
    spec=ToolSpec(name="docs__lookup", description="Look it up.", parameters={"type": "object"}),
    server="docs",
    tool="lookup",
    run=lambda arguments, timeout: (f"found {arguments.get('q', '')}", False),
)


@dataclass
class ScriptedClient:
    answers: list[CompletionResult]
    seen: list[CompletionRequest] = field(default_factory=list)

    def complete(self, request: CompletionRequest) -> CompletionResult:
        self.seen.append(request)
        return self.answers.pop(0)

    def stream(self, request, *, on_text):  # not used: no on_text given
        raise AssertionError("streamed")


def tool_step(query: str) -> CompletionResult:
    return CompletionResult(text="", tool_calls=(ToolCall(name="docs__lookup", arguments={"q": query}, id=query),))


def request() -> CompletionRequest:
    return CompletionRequest(model="m", messages=(ChatMessage("user", "find the plan"),))


def roles_and_contents(messages) -> list[tuple[str, str]]:
    return [(message.role, message.content) for message in messages]


def test_a_steering_message_joins_after_the_tool_results_and_before_the_next_model_call():
    # given: the model calls a tool once, then answers; one message arrives during the first step
    client = ScriptedClient([tool_step("plan"), CompletionResult(text="Here it is, with the dates.")])
    arrivals = [["and add the dates"], []]
    asked: list[int] = []

    def steer() -> list[str]:
        asked.append(len(client.seen))
        return arrivals.pop(0) if arrivals else []

    # when
    result, _calls = tool_loop_run(
        client=client, request=request(), tools=[LOOKUP], limits=LIMITS, record=lambda call: None, steer=steer
    )
    # then: asked once, after the first model call (never before it), and the second call holds the message last
    assert result.text == "Here it is, with the dates."
    assert asked == [1]
    assert roles_and_contents(client.seen[1].messages)[-3:] == [
        ("assistant", ""),
        ("tool", "found plan"),
        ("user", f"{STEERED_HEADER}\nand add the dates"),
    ]
    assert len(client.seen[0].messages) == 1


def test_the_final_answer_after_the_step_limit_keeps_what_was_steered_in():
    # given: a model that keeps calling the tool until the loop stops it; a message arrives after the last step
    client = ScriptedClient([tool_step("a"), tool_step("b"), tool_step("c"), CompletionResult(text="Done.")])
    arrivals = [[], [], ["also the risks"]]
    # when
    tool_loop_run(
        client=client,
        request=request(),
        tools=[LOOKUP],
        limits=LIMITS,
        record=lambda call: None,
        steer=lambda: arrivals.pop(0) if arrivals else [],
    )
    # then: the answer without tools holds the message, before the tool results summary
    final = roles_and_contents(client.seen[-1].messages)
    assert client.seen[-1].tools == ()
    assert final[-2] == ("user", f"{STEERED_HEADER}\nalso the risks")


def test_a_rerun_gets_the_steered_message_back_after_its_replayed_calls():
    # given: a previous run recorded one call (and steered a message in, which the hook gives back)
    recorded = ToolCallRecord(
        step=1,
        index=0,
        call_id="plan",
        name="docs__lookup",
        server="docs",
        tool="lookup",
        arguments={"q": "plan"},
        result="found plan",
        status="ok",
        duration_ms=5,
    )
    client = ScriptedClient([CompletionResult(text="Answer.")])
    # when
    tool_loop_run(
        client=client,
        request=request(),
        tools=[LOOKUP],
        limits=LIMITS,
        completed_calls=[recorded],
        record=lambda call: None,
        steer=lambda: ["and add the dates"],
    )
    # then
    assert roles_and_contents(client.seen[0].messages)[-2:] == [
        ("tool", "found plan"),
        ("user", f"{STEERED_HEADER}\nand add the dates"),
    ]
