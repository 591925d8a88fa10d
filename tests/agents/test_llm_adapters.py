"""T1: every provider adapter through its real SDK against the local stub server (tests/stubs/llm_servers.py).

Asserts the request body each SDK put on the wire (model, messages, tools, forced tool choice in that API's
own shape — P6's shapes), the parsing of text, tool-call arguments and usage, and the mapping of realistic
error bodies to our error types.
"""

import pytest

from agents.llm.base import (
    AuthenticationError,
    ChatMessage,
    CompletionRequest,
    ContextOverflowError,
    PermanentError,
    RateLimitedError,
    ToolCall,
    ToolSpec,
    TransientError,
    Usage,
)
from agents.llm.errors import MAX_ERROR_MESSAGE_CHARS
from agents.llm.registry import llm_client_for
from agents.models import Provider
from core.redaction import REDACTED
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.stubs.llm_servers import (
    AUTH_BODIES,
    BODY_BUILDERS,
    NON_JSON_BODY,
    OVERFLOW_BODIES,
    RATE_LIMIT_BODIES,
    SERVER_ERROR_BODIES,
    StubResponse,
    anthropic_error_body,
    gemini_error_body,
    openai_error_body,
)

pytestmark = pytest.mark.django_db

APIS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
MODEL_NAMES = {
    "openai_chat": "gpt-4o",
    "openai_responses": "gpt-4.1",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
}
SCHEMA = {
    "type": "object",
    "properties": {
        "should_act": {"type": "string", "enum": ["send", "no_action"]},
        "reason": {"type": "string"},
    },
    "required": ["should_act", "reason"],
    "additionalProperties": False,
}
DECIDE = ToolSpec(name="decide", description="Decide whether to act", parameters=SCHEMA)
API_KEY = "sk-test-key-1234567890"  # long enough to be redacted (core.redaction.MIN_SECRET_CHARS)


def base_url(api: str, stub) -> str:
    # OpenAI-style base URLs include the version prefix; Anthropic and Gemini SDKs add their own.
    return stub.url("/v1") if api.startswith("openai") else stub.url()


def model_for(api: str, stub, **provider_fields):
    fields = {"timeout_seconds": 5.0, "max_retries": 0, **provider_fields}
    provider = ProviderFactory(kind=api, base_url=base_url(api, stub), api_key=API_KEY, **fields)
    return LLMModelFactory(provider=provider, name=MODEL_NAMES[api])


def decide_request(api: str) -> CompletionRequest:
    return CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(
            ChatMessage(role="system", content="Decide whether to act."),
            ChatMessage(role="user", content="earlier question"),
            ChatMessage(role="assistant", content="earlier answer"),
            ChatMessage(role="user", content="@bot can you help?"),
        ),
        tools=(DECIDE,),
        forced_tool="decide",
        max_output_tokens=256,
    )


def text_request(api: str) -> CompletionRequest:
    return CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hi")),
        max_output_tokens=64,
    )


EXPECTED_DECIDE_BODIES = {
    "openai_chat": {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Decide whether to act."},
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": "@bot can you help?"},
        ],
        "max_tokens": 256,  # a configured base_url is an OpenAI-compatible endpoint: the widely known name
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "decide",
                    "description": "Decide whether to act",
                    "parameters": SCHEMA,
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "decide"}},
        "parallel_tool_calls": False,
    },
    "openai_responses": {
        "model": "gpt-4.1",
        "instructions": "Decide whether to act.",
        "input": [
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": "@bot can you help?"},
        ],
        "max_output_tokens": 256,
        "store": False,
        "tools": [
            {
                "type": "function",
                "name": "decide",
                "description": "Decide whether to act",
                "parameters": SCHEMA,
                "strict": True,
            }
        ],
        "tool_choice": {"type": "function", "name": "decide"},
        "parallel_tool_calls": False,
    },
    "anthropic": {
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "system": "Decide whether to act.",
        "messages": [
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": "@bot can you help?"},
        ],
        "tools": [{"name": "decide", "description": "Decide whether to act", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": "decide", "disable_parallel_tool_use": True},
    },
    "gemini": {
        "contents": [
            {"parts": [{"text": "earlier question"}], "role": "user"},
            {"parts": [{"text": "earlier answer"}], "role": "model"},
            {"parts": [{"text": "@bot can you help?"}], "role": "user"},
        ],
        "systemInstruction": {"parts": [{"text": "Decide whether to act."}], "role": "user"},
        "tools": [
            {
                "functionDeclarations": [
                    {"description": "Decide whether to act", "name": "decide", "parameters_json_schema": SCHEMA}
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"allowedFunctionNames": ["decide"], "mode": "ANY"}},
        "generationConfig": {"maxOutputTokens": 256},
    },
}


@pytest.mark.parametrize("api", APIS)
def test_t1_forced_tool_request_on_the_wire_in_each_apis_shape(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(
        api, StubResponse(body=BODY_BUILDERS[api](tool_calls=[("decide", {"should_act": "send", "reason": "r"})]))
    )
    # when
    llm_client_for(model=model).complete(decide_request(api))
    # then
    [sent] = llm_stub.requests
    assert sent.json == EXPECTED_DECIDE_BODIES[api]


EXPECTED_PATHS = {
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1/models/gemini-2.5-flash:generateContent",
}


@pytest.mark.parametrize("api", APIS)
def test_t1_path_and_api_key_header(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    # when
    llm_client_for(model=model).complete(text_request(api))
    # then
    [sent] = llm_stub.requests
    assert sent.path == EXPECTED_PATHS[api]
    if api == "gemini":
        assert sent.headers["x-goog-api-key"] == API_KEY
    elif api == "anthropic":
        assert API_KEY in (
            sent.headers.get("x-api-key", ""),
            sent.headers.get("authorization", "").removeprefix("Bearer "),
        )
    else:
        assert sent.headers["authorization"] == f"Bearer {API_KEY}"


def test_t1_openai_official_endpoint_uses_max_completion_tokens():
    # given: no base_url = the official endpoint (request body only: nothing is sent)
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url="", api_key=API_KEY)
    client = llm_client_for(model=LLMModelFactory(provider=provider, name="gpt-4o"))
    # when
    body = client.request_body(text_request("openai_chat"))
    # then
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body


@pytest.mark.parametrize("api", APIS)
def test_t1_text_and_usage_parsed(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="Hello there.", input_tokens=12, output_tokens=3)))
    # when
    result = llm_client_for(model=model).complete(text_request(api))
    # then
    assert result.text == "Hello there."
    assert result.tool_calls == ()
    assert result.usage == Usage(input_tokens=12, output_tokens=3)


@pytest.mark.parametrize("api", APIS)
def test_t1_tool_call_arguments_parsed_as_an_object(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    arguments = {"should_act": "no_action", "reason": "people are chatting"}
    llm_stub.enqueue(
        api, StubResponse(body=BODY_BUILDERS[api](tool_calls=[("decide", arguments)], input_tokens=40, output_tokens=9))
    )
    # when
    result = llm_client_for(model=model).complete(decide_request(api))
    # then
    assert [(call.name, call.arguments) for call in result.tool_calls] == [("decide", arguments)]
    assert result.usage == Usage(input_tokens=40, output_tokens=9)


@pytest.mark.parametrize("api", ["openai_chat", "openai_responses"])
def test_t1_unparseable_openai_arguments_are_kept_as_the_raw_string(api, llm_stub):
    # given: OpenAI arguments are a JSON string the model may get wrong
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](tool_calls=[("decide", '{"should_act": "send",')])))
    # when
    result = llm_client_for(model=model).complete(decide_request(api))
    # then
    assert result.tool_calls == (ToolCall(name="decide", arguments='{"should_act": "send",', id="call_1"),)


ERROR_CASES = {
    "overflow": (lambda api: StubResponse(status=400, body=OVERFLOW_BODIES[api]), ContextOverflowError),
    "rate_limited": (
        lambda api: StubResponse(status=429, body=RATE_LIMIT_BODIES[api], headers={"retry-after": "7"}),
        RateLimitedError,
    ),
    "unauthorized": (lambda api: StubResponse(status=401, body=AUTH_BODIES[api]), AuthenticationError),
    "server_error": (lambda api: StubResponse(status=500, body=SERVER_ERROR_BODIES[api]), TransientError),
    "non_json_200": (lambda api: StubResponse(status=200, body=NON_JSON_BODY), TransientError),
    "non_json_502": (lambda api: StubResponse(status=502, body=NON_JSON_BODY), TransientError),
    "bad_request": (
        lambda api: StubResponse(status=400, body=openai_error_body(message="Invalid value for 'model'.")),
        PermanentError,
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
@pytest.mark.parametrize("api", APIS)
def test_t1_error_bodies_map_to_our_error_types(api, case, llm_stub):
    # given
    make_response, expected = ERROR_CASES[case]
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, make_response(api))
    # when
    with pytest.raises(expected) as caught:
        llm_client_for(model=model).complete(text_request(api))
    # then: exactly our type (not a subclass stand-in), one request (SDK retries off), no key in the message
    assert type(caught.value) is expected
    assert caught.value.retryable is expected.retryable
    assert len(llm_stub.requests) == 1
    assert API_KEY not in caught.value.message
    if case == "rate_limited":
        assert caught.value.retry_after_seconds == 7.0
    if case in ("overflow", "unauthorized", "rate_limited", "server_error"):
        assert caught.value.status_code == make_response(api).status


ECHOED_KEY_BODIES = {
    # Some OpenAI-compatible gateways quote the key they refused, in full, in their error body.
    "openai_chat": openai_error_body(message=f"Invalid API key: {API_KEY}", code="invalid_api_key"),
    "openai_responses": openai_error_body(message=f"Invalid API key: {API_KEY}", code="invalid_api_key"),
    "anthropic": anthropic_error_body(message=f"invalid x-api-key {API_KEY}", type_="authentication_error"),
    "gemini": gemini_error_body(code=401, message=f"API key {API_KEY} not valid.", status="UNAUTHENTICATED"),
}


@pytest.mark.parametrize("api", APIS)
def test_t1_an_api_key_echoed_in_an_error_body_never_reaches_our_error(api, llm_stub):
    """No secret in an error message: it becomes a turn's error, a log record and the turns API's output."""
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(status=401, body=ECHOED_KEY_BODIES[api]))
    # when
    with pytest.raises(AuthenticationError) as caught:
        llm_client_for(model=model).complete(text_request(api))
    # then
    assert API_KEY not in caught.value.message
    assert API_KEY not in str(caught.value)
    assert REDACTED in caught.value.message


@pytest.mark.parametrize("api", APIS)
def test_issue30_finding4_a_key_near_the_error_cut_is_redacted_before_the_cut(api, llm_stub):
    """Finding 4: the error was cut at 500 characters before the key was masked, so a key at offset ~440 left
    its first characters in the turn's error. Redaction now runs on the whole text first."""
    # given: the key starts about 485 characters into our message, so the 500-character cut falls inside it
    model = model_for(api, llm_stub)
    message = "x" * 470 + f" {API_KEY} " + "y" * 200
    bodies = {
        "openai_chat": openai_error_body(message=message, code="invalid_api_key"),
        "openai_responses": openai_error_body(message=message, code="invalid_api_key"),
        "anthropic": anthropic_error_body(message=message, type_="authentication_error"),
        "gemini": gemini_error_body(code=401, message=message, status="UNAUTHENTICATED"),
    }
    llm_stub.enqueue(api, StubResponse(status=401, body=bodies[api]))
    # when
    with pytest.raises(AuthenticationError) as caught:
        llm_client_for(model=model).complete(text_request(api))
    # then: no 6-character piece of the key survives, and the cut still holds
    text = caught.value.message
    assert [API_KEY[i : i + 6] for i in range(len(API_KEY) - 5) if API_KEY[i : i + 6] in text] == []
    assert len(text) <= MAX_ERROR_MESSAGE_CHARS


# 200 answers in JSON that leave out what the API documents (an incompatible "compatible" server): the SDKs
# build responses without validating them, so the gap shows only when a field is read.
MISSHAPEN_BODIES = {
    "openai_chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop"}],
    },
    "openai_responses": {"id": "resp_1", "object": "response", "status": "completed", "output": [{"type": "message"}]},
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text"}],
        "model": "claude-sonnet-4-6",
        "stop_reason": "end_turn",
    },
    "gemini": {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"args": []}}]}}]},
}


@pytest.mark.parametrize("api", APIS)
def test_t1_an_answer_without_the_documented_shape_is_permanent(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=MISSHAPEN_BODIES[api]))
    # when
    with pytest.raises(PermanentError) as caught:
        llm_client_for(model=model).complete(text_request(api))
    # then: our error type (never an AttributeError out of the adapter), naming the provider
    assert type(caught.value) is PermanentError
    assert caught.value.message.startswith(
        f"{model.provider.name}: the provider's answer does not have the shape its API documents ("
    )
    assert len(llm_stub.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_t1_timeout_is_transient(api, llm_stub):
    # given: the provider's timeout is shorter than the stub's answer
    model = model_for(api, llm_stub, timeout_seconds=0.3)
    llm_stub.enqueue(api, StubResponse(delay_seconds=1.5))
    # when
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).complete(text_request(api))
    # then
    assert "timed out" in caught.value.message


def test_t1_gemini_retry_info_in_the_body_gives_retry_after(llm_stub):
    # given: Gemini's 429 carries the delay in google.rpc.RetryInfo, not a header
    model = model_for("gemini", llm_stub)
    body = RATE_LIMIT_BODIES["gemini"] | {}
    body = {
        "error": {
            **body["error"],
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "13s"}],
        }
    }
    llm_stub.enqueue("gemini", StubResponse(status=429, body=body))
    # when
    with pytest.raises(RateLimitedError) as caught:
        llm_client_for(model=model).complete(text_request("gemini"))
    # then
    assert caught.value.retry_after_seconds == 13.0


@pytest.mark.parametrize("api", APIS)
def test_t1_sdk_retries_follow_provider_max_retries(api, llm_stub):
    # given: the provider allows one SDK retry; the first answer is a 503
    model = model_for(api, llm_stub, max_retries=1)
    llm_stub.enqueue(
        api,
        StubResponse(status=503, body=SERVER_ERROR_BODIES[api], headers={"retry-after-ms": "10"}),
        StubResponse(body=BODY_BUILDERS[api](text="second time lucky")),
    )
    # when
    result = llm_client_for(model=model).complete(text_request(api))
    # then
    assert result.text == "second time lucky"
    assert len(llm_stub.requests) == 2


def test_t1_openai_responses_failed_status_is_transient_for_a_server_error(llm_stub):
    # given: a 200 whose response object says it failed on the server side
    model = model_for("openai_responses", llm_stub)
    body = BODY_BUILDERS["openai_responses"](text=None, status="failed")
    body["error"] = {"code": "server_error", "message": "The model failed to generate a response."}
    llm_stub.enqueue("openai_responses", StubResponse(body=body))
    # when
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).complete(text_request("openai_responses"))
    # then
    assert caught.value.message.endswith("response failed: The model failed to generate a response.")


def test_t1_anthropic_window_exceeded_stop_reason_is_overflow(llm_stub):
    # given
    model = model_for("anthropic", llm_stub)
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=BODY_BUILDERS["anthropic"](text=None, stop_reason="model_context_window_exceeded")),
    )
    # when / then
    with pytest.raises(ContextOverflowError):
        llm_client_for(model=model).complete(text_request("anthropic"))


def test_t1_gemini_blocked_prompt_is_permanent(llm_stub):
    # given: no candidates, the prompt was blocked
    model = model_for("gemini", llm_stub)
    body = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}}
    llm_stub.enqueue("gemini", StubResponse(body=body))
    # when
    with pytest.raises(PermanentError) as caught:
        llm_client_for(model=model).complete(text_request("gemini"))
    # then
    assert "SAFETY" in caught.value.message


def test_t1_connection_refused_is_transient():
    # given: nothing listens on the provider's port
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url="http://127.0.0.1:9/v1", max_retries=0)
    model = LLMModelFactory(provider=provider, name="gpt-4o")
    # when / then
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).complete(text_request("openai_chat"))
    assert "connection failed" in caught.value.message


def test_t1_gemini_tool_result_is_sent_under_the_name_of_the_call_it_answers(llm_stub):
    """A tool result's functionResponse carries the function's name (Gemini's key), never our call id."""
    # given: the assistant called two tools; their results answer them by call id, in reverse order
    model = model_for("gemini", llm_stub)
    llm_stub.enqueue("gemini", StubResponse(body=BODY_BUILDERS["gemini"](text="done")))
    request = CompletionRequest(
        model=MODEL_NAMES["gemini"],
        messages=(
            ChatMessage(role="user", content="weather and time in Paris?"),
            ChatMessage(
                role="assistant",
                content="",
                tool_calls=(
                    ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call-1"),
                    ToolCall(name="get_time", arguments={"tz": "Europe/Paris"}, id="call-2"),
                ),
            ),
            ChatMessage(role="tool", content='{"time": "12:00"}', tool_call_id="call-2"),
            ChatMessage(role="tool", content="sunny", tool_call_id="call-1"),
        ),
        max_output_tokens=64,
    )
    # when
    result = llm_client_for(model=model).complete(request)
    # then
    assert result.text == "done"
    (sent,) = llm_stub.requests_for("gemini")
    assert sent.json["contents"] == [
        {"role": "user", "parts": [{"text": "weather and time in Paris?"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_time", "args": {"tz": "Europe/Paris"}}},
            ],
        },
        {
            "role": "user",
            "parts": [  # one Content for the step's results, as Gemini's parallel function calling sends them
                {"functionResponse": {"name": "get_time", "response": {"time": "12:00"}}},
                {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}},
            ],
        },
    ]


def test_t1_gemini_tool_result_answering_no_call_is_a_permanent_error(llm_stub):
    # given: a tool result whose id matches no call of the preceding assistant message
    model = model_for("gemini", llm_stub)
    request = CompletionRequest(
        model=MODEL_NAMES["gemini"],
        messages=(
            ChatMessage(role="user", content="weather?"),
            ChatMessage(role="assistant", content="", tool_calls=(ToolCall(name="get_weather", arguments={}, id="a"),)),
            ChatMessage(role="tool", content="sunny", tool_call_id="b"),
        ),
        max_output_tokens=64,
    )
    # when
    with pytest.raises(PermanentError) as caught:
        llm_client_for(model=model).complete(request)
    # then: nothing was sent
    assert (
        caught.value.message == "A tool result (call id 'b') answers no tool call of the preceding assistant message."
    )
    assert llm_stub.requests_for("gemini") == []


def test_t1_gemini_tool_results_without_ids_answer_the_calls_in_order():
    # given: Gemini's own calls carry no id
    from agents.llm.gemini import tool_result_name

    calls = (ToolCall(name="get_weather", arguments={}), ToolCall(name="get_time", arguments={}))
    # when / then: the n-th result answers the n-th call
    assert [tool_result_name(calls=calls, tool_call_id="", position=n) for n in (0, 1)] == ["get_weather", "get_time"]
    with pytest.raises(PermanentError):
        tool_result_name(calls=calls, tool_call_id="", position=2)
