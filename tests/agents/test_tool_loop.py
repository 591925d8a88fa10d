"""The bounded tool loop of a turn (M2, M3) through the real path: the bot's McpServer rows, the real SDK MCP
stub server over stdio, the real provider SDKs against the LLM stub in all four wire formats, TurnToolCall rows.
"""

import json
import logging
import time
from collections.abc import Iterator

import pytest

from agents.llm.base import ChatMessage, CompletionRequest
from agents.llm.registry import llm_client_for
from agents.mcp.client import mcp_connections_close_all
from agents.models import McpServer, Provider, Thread, Turn, TurnToolCall
from agents.tools.loop import FINAL_ANSWER_INSTRUCTION, REFUSED_MESSAGE, TOOL_RESULTS_HEADER
from agents.tools.turn_tools import ToolServerUnavailableError, turn_tools_run
from core.redaction import REDACTED as SECRET_MASK
from probe.services import probe_gate_run
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory
from tests.agents.test_llm_adapters import APIS, MODEL_NAMES
from tests.stubs.llm_servers import (
    BODY_BUILDERS,
    SERVER_ERROR_BODIES,
    StubResponse,
    openai_chat_body,
)
from tests.stubs.mcp_server import stdio_command

pytestmark = pytest.mark.django_db

SERVER_SECRET = "mcp-env-secret-31337"
FEISHU_SECRET = "feishu-app-secret-2718"
PROVIDER_KEY = "sk-provider-key-1618"
CONNECT_TIMEOUT_SECONDS = 60.0


@pytest.fixture(autouse=True)
def _mcp_settings(settings) -> Iterator[None]:
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = CONNECT_TIMEOUT_SECONDS
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 10.0
    yield
    mcp_connections_close_all()


def tool_bot(llm_stub, *, api: str = "openai_chat", allowed=("echo", "add"), environment=None, **server_fields):
    provider = ProviderFactory(
        kind=api,
        base_url=llm_stub.url("/v1") if api.startswith("openai") else llm_stub.url(),
        api_key=PROVIDER_KEY,
        max_retries=0,
        timeout_seconds=10,
    )
    model = LLMModelFactory(provider=provider, name=MODEL_NAMES[api], supports_tool_calls=True)
    bot = BotFactory(primary_model=model, name="Coder", feishu_app_id="cli_coder", feishu_app_secret=FEISHU_SECRET)
    command, args = stdio_command()
    McpServer.objects.create(
        bot=bot,
        name="stub",
        transport=McpServer.Transport.STDIO,
        command=command,
        args=args,
        environment=json.dumps(environment or {"STUB_TOKEN": SERVER_SECRET}),
        allowed_tools=list(allowed),
        **server_fields,
    )
    return bot


def new_turn(bot) -> Turn:
    thread = ThreadFactory(bot=bot, runtime_mode=Thread.RuntimeMode.CHAT, channel=Thread.Channel.REST)
    return Turn.objects.create(bot=bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id="rest:1")


def request_for(bot) -> CompletionRequest:
    return CompletionRequest(
        model=bot.primary_model.name,
        messages=(ChatMessage("system", "You are Coder."), ChatMessage("user", "What is 2 + 40?")),
        max_output_tokens=256,
    )


def run(turn: Turn):
    bot = turn.bot
    return turn_tools_run(turn=turn, client=llm_client_for(model=bot.primary_model), request=request_for(bot))


def calls_of(turn: Turn) -> list[tuple]:
    return list(TurnToolCall.objects.filter(turn=turn).values_list("step", "index", "server", "tool", "status"))


# --- The native round trip in every wire format ------------------------------------------------------------

NATIVE_TOOL_NAME = {
    "openai_chat": lambda body: [tool["function"]["name"] for tool in body["tools"]],
    "openai_responses": lambda body: [tool["name"] for tool in body["tools"]],
    "anthropic": lambda body: [tool["name"] for tool in body["tools"]],
    "gemini": lambda body: [f["name"] for tool in body["tools"] for f in tool["functionDeclarations"]],
}
NATIVE_TOOL_RESULT = {
    "openai_chat": lambda body: body["messages"][-1],
    "openai_responses": lambda body: body["input"][-1],
    "anthropic": lambda body: body["messages"][-1]["content"][0],
    "gemini": lambda body: body["contents"][-1]["parts"][0],
}
EXPECTED_TOOL_RESULT = {
    "openai_chat": {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    "openai_responses": {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    "anthropic": {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"},
    # The Gemini adapter hands a JSON-parsable result over as a value (agents/llm/gemini.py).
    "gemini": {"functionResponse": {"name": "stub__add", "response": {"result": 42}}},
}


@pytest.mark.parametrize("api", APIS)
def test_m2_allowed_tools_reach_the_model_natively_and_results_go_back(api, llm_stub):
    # given: the model calls stub__add, then answers
    bot = tool_bot(llm_stub, api=api)
    turn = new_turn(bot)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](tool_calls=[("stub__add", {"a": 2, "b": 40})])))
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="It is 42.")))

    # when
    result, calls = run(turn)

    # then: the answer, one recorded call, and the wire shapes the real SDKs sent
    assert result.text == "It is 42."
    assert result.usage.input_tokens == 100
    assert [(c.step, c.index, c.tool, c.status, c.result) for c in calls] == [(1, 0, "add", "ok", "42")]
    assert calls_of(turn) == [(1, 0, "stub", "add", "ok")]
    first, second = (request.json for request in llm_stub.requests_for(api))
    assert NATIVE_TOOL_NAME[api](first) == ["stub__echo", "stub__add"]  # the server's order
    assert NATIVE_TOOL_RESULT[api](second) == EXPECTED_TOOL_RESULT[api]


# --- Bounds ----------------------------------------------------------------------------------------------


def test_m2_a_call_outside_the_allowlist_is_refused_and_the_model_told(llm_stub, tmp_path):
    # given: only echo is allowed; the model calls counter (the server has it) anyway
    counter = tmp_path / "count"
    bot = tool_bot(llm_stub, allowed=("echo",), environment={"STUB_COUNTER_FILE": str(counter)})
    turn = new_turn(bot)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I cannot count.")))

    # when
    result, _ = run(turn)

    # then: never offered, never run, recorded as refused, and the model was told why
    first, second = (request.json for request in llm_stub.requests_for("openai_chat"))
    assert [tool["function"]["name"] for tool in first["tools"]] == ["stub__echo"]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": REFUSED_MESSAGE.format(name="stub__counter"),
    }
    assert calls_of(turn) == [(1, 0, "", "stub__counter", "refused")]
    assert not counter.exists()
    assert result.text == "I cannot count."


def test_m2_an_empty_allowlist_offers_no_tool_and_starts_no_server(llm_stub):
    # given
    bot = tool_bot(llm_stub, allowed=())
    turn = new_turn(bot)

    # when
    result, calls = run(turn)

    # then: one plain call, without tools
    (request,) = llm_stub.requests_for("openai_chat")
    assert "tools" not in request.json
    assert (result.text, calls, calls_of(turn)) == ("stub reply", [], [])


def test_m2_the_loop_stops_at_its_step_limit_then_asks_for_the_answer_without_tools(llm_stub):
    # given: a model that would call tools for ever; the server limits the bot to 2 steps
    bot = tool_bot(llm_stub, max_steps=2)
    turn = new_turn(bot)
    llm_stub.respond_with(
        "openai_chat",
        lambda request: StubResponse(
            body=openai_chat_body(text="Done anyway.")
            if "tools" not in request.json
            else openai_chat_body(tool_calls=[("stub__echo", {"text": "again"})])
        ),
    )

    # when
    result, _ = run(turn)

    # then: 2 tool steps and one final call without tools, whose last message carries the results as text
    bodies = [request.json for request in llm_stub.requests_for("openai_chat")]
    assert ["tools" in body for body in bodies] == [True, True, False]
    assert bodies[2]["messages"][-1]["content"] == (
        f"{TOOL_RESULTS_HEADER}\n"
        '- stub__echo({"text": "again"}) [ok]: echo: again\n'
        '- stub__echo({"text": "again"}) [ok]: echo: again\n\n'
        + FINAL_ANSWER_INSTRUCTION.format(reason="at most 2 tool steps")
    )
    assert calls_of(turn) == [(1, 0, "stub", "echo", "ok"), (2, 0, "stub", "echo", "ok")]
    assert result.text == "Done anyway."


def test_m2_a_hung_tool_times_out_and_the_time_budget_ends_the_loop(llm_stub):
    # given: a 2 s budget and a tool that hangs for 30 s
    bot = tool_bot(llm_stub, allowed=("hang",), time_budget_seconds=2.0)
    turn = new_turn(bot)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__hang", {"seconds": 30})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="It took too long.")))

    # when
    started = time.monotonic()
    result, calls = run(turn)
    elapsed = time.monotonic() - started

    # then: the call timed out at the budget, and the final call went out without tools
    assert [(c.tool, c.status, c.error) for c in calls] == [("hang", "timeout", "stub: tool 'hang' timed out")]
    bodies = [request.json for request in llm_stub.requests_for("openai_chat")]
    assert ["tools" in body for body in bodies] == [True, False]
    assert bodies[1]["messages"][-1]["content"].endswith(
        FINAL_ANSWER_INSTRUCTION.format(reason="the time budget of 2 s")
    )
    assert result.text == "It took too long."
    assert elapsed < 25  # bounded by the budget, not by the tool (connect time under load included)


# --- Re-runs ---------------------------------------------------------------------------------------------


def test_m2_a_rerun_replays_completed_calls_and_repeats_none(llm_stub, tmp_path):
    # given: step 1 ran the counter, then the model call of step 2 failed (the run died there)
    counter = tmp_path / "count"
    bot = tool_bot(llm_stub, allowed=("counter",), environment={"STUB_COUNTER_FILE": str(counter)})
    turn = new_turn(bot)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {})])))
    llm_stub.enqueue("openai_chat", StubResponse(status=500, body=SERVER_ERROR_BODIES["openai_chat"]))
    with pytest.raises(Exception, match="server had an error"):
        run(turn)
    assert counter.read_text() == "x"

    # when: the turn is run again
    llm_stub.reset()
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Counted once.")))
    result, calls = run(turn)

    # then: no second count; the model got the recorded step back in its native form
    assert counter.read_text() == "x"
    assert result.text == "Counted once."
    assert [(c.step, c.tool, c.result) for c in calls] == [(1, "counter", "count=1")]
    (request,) = llm_stub.requests_for("openai_chat")
    assert request.json["messages"][-2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "stub__counter", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "count=1"},
    ]
    assert calls_of(turn) == [(1, 0, "stub", "counter", "ok")]


# --- Servers that fail ------------------------------------------------------------------------------------


def broken_server(bot, *, on_failure: str) -> McpServer:
    return McpServer.objects.create(
        bot=bot,
        name="broken",
        command="/nonexistent/mcp-server",
        environment=json.dumps({"TOKEN": SERVER_SECRET}),
        allowed_tools=["anything"],
        on_failure=on_failure,
    )


def test_m2_an_unreachable_continue_server_is_recorded_and_the_turn_goes_on(llm_stub):
    # given: the stub server works, a second one cannot start
    bot = tool_bot(llm_stub, allowed=("echo",))
    broken_server(bot, on_failure=McpServer.OnFailure.CONTINUE)
    turn = new_turn(bot)

    # when
    result, _ = run(turn)

    # then: the answer, with the working server's tools, and the failure recorded readably
    assert result.text == "stub reply"
    (request,) = llm_stub.requests_for("openai_chat")
    assert [tool["function"]["name"] for tool in request.json["tools"]] == ["stub__echo"]
    row = TurnToolCall.objects.get(turn=turn)
    assert (row.step, row.server, row.tool, row.status) == (0, "broken", "(connect)", "error")
    assert row.error == (
        "broken: connecting failed: FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )


def test_m2_an_unreachable_fail_server_fails_the_turn_readably_without_a_model_call(llm_stub):
    # given
    bot = tool_bot(llm_stub, allowed=("echo",))
    broken_server(bot, on_failure=McpServer.OnFailure.FAIL)
    turn = new_turn(bot)

    # when
    with pytest.raises(ToolServerUnavailableError) as raised:
        run(turn)

    # then
    assert raised.value.message.startswith("The tool server 'broken' is unavailable: broken: connecting failed")
    assert llm_stub.requests_for("openai_chat") == []


def test_m2_a_primary_without_tool_calls_gets_no_tools(llm_stub):
    # given
    bot = tool_bot(llm_stub)
    LLMModelFactory._meta.model.objects.filter(pk=bot.primary_model_id).update(supports_tool_calls=False)
    bot.refresh_from_db()
    turn = new_turn(bot)

    # when
    result, calls = run(turn)

    # then
    (request,) = llm_stub.requests_for("openai_chat")
    assert "tools" not in request.json
    assert (result.text, calls) == ("stub reply", [])


# --- No secret anywhere ------------------------------------------------------------------------------------


def test_m2_no_secret_reaches_a_prompt_a_record_or_a_log_line(llm_stub, caplog):
    # given: a tool leaks the server's own secret, another echoes the bot's Feishu secret
    bot = tool_bot(llm_stub, allowed=("env_value", "echo"))
    turn = new_turn(bot)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(
            body=openai_chat_body(
                tool_calls=[("stub__env_value", {"name": "STUB_TOKEN"}), ("stub__echo", {"text": FEISHU_SECRET})]
            )
        ),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="done")))

    # when
    with caplog.at_level(logging.DEBUG):
        _, calls = run(turn)

    # then: the model got masks, the records hold masks, no log line holds a secret
    second = llm_stub.requests_for("openai_chat")[1].json
    assert [message["content"] for message in second["messages"][-2:]] == [
        f"STUB_TOKEN={SECRET_MASK}",
        f"echo: {SECRET_MASK}",
    ]
    wire = b"".join(request.body for request in llm_stub.requests)
    stored = json.dumps(list(TurnToolCall.objects.filter(turn=turn).values()), default=str)
    assert SERVER_SECRET.encode() not in wire and PROVIDER_KEY.encode() not in wire
    for secret in (SERVER_SECRET, FEISHU_SECRET, PROVIDER_KEY):
        assert secret not in caplog.text
        assert secret not in stored  # the model's own argument included: records are redacted too
        assert secret not in "".join(call.result for call in calls)


# --- M3: the judge keeps exactly one tool -------------------------------------------------------------------


def test_m3_the_probe_judge_keeps_exactly_one_tool_decide(llm_stub):
    # given: a discuss bot with an MCP server whose tools are allowed
    bot = tool_bot(llm_stub)
    judge = LLMModelFactory(
        provider=ProviderFactory(
            kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="sk-judge-1", max_retries=0
        ),
        name="gpt-4o-mini",
        supports_tool_calls=True,
        context_window=128000,
    )
    type(bot).objects.filter(pk=bot.pk).update(
        group_reply_mode="discuss", discuss_probe_mode="model", discuss_probe_model=judge
    )
    bot.refresh_from_db()
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(tool_calls=[("decide", {"should_act": "send", "reason": "asked"})])),
    )

    # when
    result = probe_gate_run(bot=bot, transcript=[ChatMessage("user", "Coder, can you look at this?")])

    # then
    (request,) = llm_stub.requests_for("openai_chat")
    assert [tool["function"]["name"] for tool in request.json["tools"]] == ["decide"]
    assert result.activated is True
