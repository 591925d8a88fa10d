"""P6: the judge request as each real SDK puts it on the wire (local stub), built by probe's one request builder.

The seed's bug was a forced tool choice one adapter forwarded in the wrong shape and another dropped; these
tests run probe_gate_run end to end (production builder → c's adapter → real SDK → stub) and read the body.
"""

import pytest

from agents.llm.base import ChatMessage
from agents.models import Bot
from probe.services import probe_gate_run
from tests.stubs.llm_servers import BODY_BUILDERS, StubResponse

pytestmark = pytest.mark.django_db

APIS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
TRANSCRIPT = [
    ChatMessage(role="user", content="dave: the deploy failed again"),
    ChatMessage(role="assistant", content="I can look at the logs if you want."),
    ChatMessage(role="user", content="dave: @Planner yes please, what broke?"),
]


def run_gate(api: str, make_judge, make_discuss_bot, llm_stub, should_act: str = "send"):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(kind=api))
    body = BODY_BUILDERS[api](tool_calls=[("decide", {"should_act": should_act, "reason": "dave asked"})])
    llm_stub.enqueue(api, StubResponse(body=body))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    (request,) = llm_stub.requests_for(api)
    return result, request.json


@pytest.mark.parametrize("api", APIS)
def test_forces_the_decide_call_on_every_provider_P6(api, make_judge, make_discuss_bot, llm_stub):
    """TestDiscussProbeForcesToolCallOnEveryProvider, with the exact shape each API honours (wire doc §5)."""
    # when
    result, body = run_gate(api, make_judge, make_discuss_bot, llm_stub)
    # then: the verdict came back through the SDK's parsing
    assert (result.activated, result.reason, result.outcome) == (True, "dave asked", "act")
    if api == "openai_chat":
        assert body["tool_choice"] == {"type": "function", "function": {"name": "decide"}}
        assert body["parallel_tool_calls"] is False
    elif api == "openai_responses":
        # top-level name: the nested {function: {...}} shape is the one this API silently does not honour
        assert body["tool_choice"] == {"type": "function", "name": "decide"}
        assert "function" not in body["tool_choice"]
        assert body["parallel_tool_calls"] is False
    elif api == "anthropic":
        assert body["tool_choice"]["type"] in ("any", "tool")
        assert body["tool_choice"] == {"type": "tool", "name": "decide", "disable_parallel_tool_use": True}
    else:
        assert body["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
        assert body["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"] == ["decide"]


@pytest.mark.parametrize("api", APIS)
def test_sends_its_tool_definition_and_prompt_P6(api, make_judge, make_discuss_bot, llm_stub):
    """TestDiscussProbeSendsItsToolDefinition: exactly one tool, `decide`, with both required fields."""
    # when
    _, body = run_gate(api, make_judge, make_discuss_bot, llm_stub)
    # then
    if api == "openai_chat":
        (tool,) = body["tools"]
        name, schema = tool["function"]["name"], tool["function"]["parameters"]
        system = body["messages"][0]["content"]
    elif api == "openai_responses":
        (tool,) = body["tools"]
        name, schema, system = tool["name"], tool["parameters"], body["instructions"]
    elif api == "anthropic":
        (tool,) = body["tools"]
        name, schema = tool["name"], tool["input_schema"]
        system = body["system"] if isinstance(body["system"], str) else body["system"][0]["text"]
    else:
        (declaration,) = body["tools"][0]["functionDeclarations"]
        name = declaration["name"]
        schema = declaration.get("parametersJsonSchema") or declaration.get("parameters_json_schema")
        schema = schema or declaration["parameters"]
        system = body["systemInstruction"]["parts"][0]["text"]
    assert name == "decide"
    assert sorted(schema["required"]) == ["reason", "should_act"]
    assert [value.lower() for value in schema["properties"]["should_act"]["enum"]] == ["send", "no_action"]
    assert "outside evaluator" in system and "The bot: Planner." in system


@pytest.mark.parametrize("api", APIS)
def test_no_action_through_every_provider_stays_silent_P7(api, make_judge, make_discuss_bot, llm_stub):
    result, _ = run_gate(api, make_judge, make_discuss_bot, llm_stub, should_act="no_action")
    assert (result.activated, result.outcome, result.proceeds) == (False, "no_action", False)
