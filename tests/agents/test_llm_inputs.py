"""What the adapters put on the wire for images (issue 12.5) and tool-loop round trips (issue 15.2), asserted on
the bodies the real SDKs send to the local stub; and that the stored "model input as sent" holds no image bytes.
"""

import base64
import json

import pytest

from agents.llm.base import ChatMessage, CompletionRequest, ImageInput, ToolCall, ToolSpec
from agents.llm.registry import llm_client_for, request_as_sent
from tests.agents.test_llm_adapters import APIS, MODEL_NAMES, model_for
from tests.stubs.llm_servers import BODY_BUILDERS, StubResponse

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-a-tiny-screenshot"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF-a-photo"
PNG_B64 = base64.b64encode(PNG).decode()
JPEG_B64 = base64.b64encode(JPEG).decode()
# google-genai serialises bytes as URL-safe base64 (which the API accepts)
PNG_B64URL = base64.urlsafe_b64encode(PNG).decode()
JPEG_B64URL = base64.urlsafe_b64encode(JPEG).decode()
SCREENSHOT = ImageInput(mime_type="image/png", data=PNG, name="screenshot.png")
PHOTO = ImageInput(mime_type="image/jpeg", data=JPEG, name="photo.jpg")


def image_request(api: str) -> CompletionRequest:
    return CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(
            ChatMessage(role="system", content="Describe images briefly."),
            ChatMessage(role="user", content="what is on these?", images=(SCREENSHOT, PHOTO)),
        ),
        max_output_tokens=64,
    )


EXPECTED_IMAGE_MESSAGES = {
    "openai_chat": (
        "messages",
        [
            {"role": "system", "content": "Describe images briefly."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is on these?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
                    {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG_B64}"}},
                ],
            },
        ],
    ),
    "openai_responses": (
        "input",
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is on these?"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}", "detail": "auto"},
                    {"type": "input_image", "image_url": f"data:image/jpeg;base64,{JPEG_B64}", "detail": "auto"},
                ],
            }
        ],
    ),
    "anthropic": (
        "messages",
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG_B64}},
                    {"type": "text", "text": "what is on these?"},
                ],
            }
        ],
    ),
    "gemini": (
        "contents",
        [
            {
                "role": "user",
                "parts": [
                    # the SDK's own spelling inside inlineData: mime_type (the API accepts both)
                    {"inlineData": {"mime_type": "image/png", "data": PNG_B64URL}},
                    {"inlineData": {"mime_type": "image/jpeg", "data": JPEG_B64URL}},
                    {"text": "what is on these?"},
                ],
            }
        ],
    ),
}


@pytest.mark.parametrize("api", APIS)
def test_images_of_a_user_message_are_sent_in_each_apis_own_wire_format(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="a chart and a cat")))
    # when
    result = llm_client_for(model=model).complete(image_request(api))
    # then
    assert result.text == "a chart and a cat"
    [sent] = llm_stub.requests_for(api)
    field, expected = EXPECTED_IMAGE_MESSAGES[api]
    assert sent.json[field] == expected


@pytest.mark.parametrize("api", APIS)
def test_images_are_sent_the_same_way_when_streaming(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="a chart")))
    # when
    llm_client_for(model=model).stream(image_request(api), on_text=lambda delta: None)
    # then
    [sent] = llm_stub.requests_for(api)
    field, expected = EXPECTED_IMAGE_MESSAGES[api]
    assert sent.json[field] == expected


@pytest.mark.parametrize("api", APIS)
def test_images_on_a_non_user_message_are_not_sent(api, llm_stub):
    # given: an assistant message that (wrongly) carries an image
    model = model_for(api, llm_stub)
    request = CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(
            ChatMessage(role="user", content="hi"),
            ChatMessage(role="assistant", content="hello", images=(SCREENSHOT,)),
            ChatMessage(role="user", content="again"),
        ),
    )
    # when
    llm_client_for(model=model).complete(request)
    # then
    [sent] = llm_stub.requests_for(api)
    assert PNG_B64 not in sent.body.decode()
    assert PNG_B64URL not in sent.body.decode()


@pytest.mark.parametrize("api", APIS)
def test_model_input_as_sent_keeps_a_label_instead_of_the_image_bytes(api, llm_stub):
    """The admin's "model input as sent" is stored on the turn: the database never holds a resource's bytes."""
    # given
    client = llm_client_for(model=model_for(api, llm_stub))
    # when
    recorded = json.dumps(request_as_sent(client=client, request=image_request(api)))
    # then
    for encoded in (PNG_B64, JPEG_B64, PNG_B64URL, JPEG_B64URL):
        assert encoded not in recorded
    assert recorded.count('"[image: screenshot.png, 34 bytes]"') == 1
    assert recorded.count('"[image: photo.jpg, 18 bytes]"') == 1
    assert "what is on these?" in recorded


# --- Tool loop round trips ---------------------------------------------------------------------------------

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
BOOK = ToolSpec(
    name="book_trip",
    description="Book a trip",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
LOOP_MESSAGES = (
    ChatMessage(role="system", content="You plan trips."),
    ChatMessage(role="user", content="Warmer of Paris and Oslo? Book it."),
    # step 1: two calls at once
    ChatMessage(
        role="assistant",
        content="",
        tool_calls=(
            ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_a"),
            ToolCall(name="get_weather", arguments={"city": "Oslo"}, id="call_b"),
        ),
    ),
    ChatMessage(role="tool", content='{"temp": 12}', tool_call_id="call_a"),
    ChatMessage(role="tool", content='{"temp": 3}', tool_call_id="call_b"),
    # step 2: text and one call
    ChatMessage(
        role="assistant",
        content="Paris is warmer.",
        tool_calls=(ToolCall(name="book_trip", arguments={"city": "Paris"}, id="call_c"),),
    ),
    ChatMessage(role="tool", content="booked: PAR-42", tool_call_id="call_c"),
)


def loop_request(api: str, *, tools: tuple[ToolSpec, ...] = (WEATHER, BOOK)) -> CompletionRequest:
    return CompletionRequest(model=MODEL_NAMES[api], messages=LOOP_MESSAGES, tools=tools, max_output_tokens=128)


EXPECTED_LOOP_BODIES = {
    "openai_chat": {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You plan trips."},
            {"role": "user", "content": "Warmer of Paris and Oslo? Book it."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 12}'},
            {"role": "tool", "tool_call_id": "call_b", "content": '{"temp": 3}'},
            {
                "role": "assistant",
                "content": "Paris is warmer.",
                "tool_calls": [
                    {
                        "id": "call_c",
                        "type": "function",
                        "function": {"name": "book_trip", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_c", "content": "booked: PAR-42"},
        ],
        "max_tokens": 128,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": WEATHER.parameters,
                },
            },
            {
                "type": "function",
                "function": {"name": "book_trip", "description": "Book a trip", "parameters": BOOK.parameters},
            },
        ],
    },
    "openai_responses": {
        "model": "gpt-4.1",
        "instructions": "You plan trips.",
        "input": [
            {"role": "user", "content": "Warmer of Paris and Oslo? Book it."},
            {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": '{"temp": 12}'},
            {"type": "function_call_output", "call_id": "call_b", "output": '{"temp": 3}'},
            {"role": "assistant", "content": "Paris is warmer."},
            {"type": "function_call", "call_id": "call_c", "name": "book_trip", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_c", "output": "booked: PAR-42"},
        ],
        "max_output_tokens": 128,
        "store": False,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER.parameters,
                "strict": False,
            },
            {
                "type": "function",
                "name": "book_trip",
                "description": "Book a trip",
                "parameters": BOOK.parameters,
                "strict": False,
            },
        ],
    },
    "anthropic": {
        "model": "claude-sonnet-4-6",
        "max_tokens": 128,
        "system": "You plan trips.",
        "messages": [
            {"role": "user", "content": "Warmer of Paris and Oslo? Book it."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [  # every result of the step in the one next message
                    {"type": "tool_result", "tool_use_id": "call_a", "content": '{"temp": 12}'},
                    {"type": "tool_result", "tool_use_id": "call_b", "content": '{"temp": 3}'},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Paris is warmer."},
                    {"type": "tool_use", "id": "call_c", "name": "book_trip", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_c", "content": "booked: PAR-42"}],
            },
        ],
        "tools": [
            {"name": "get_weather", "description": "Current weather for a city", "input_schema": WEATHER.parameters},
            {"name": "book_trip", "description": "Book a trip", "input_schema": BOOK.parameters},
        ],
    },
    "gemini": {
        "contents": [
            {"role": "user", "parts": [{"text": "Warmer of Paris and Oslo? Book it."}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"temp": 12}}},
                    {"functionResponse": {"name": "get_weather", "response": {"temp": 3}}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "Paris is warmer."},
                    {"functionCall": {"name": "book_trip", "args": {"city": "Paris"}}},
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "book_trip", "response": {"result": "booked: PAR-42"}}}],
            },
        ],
        "systemInstruction": {"parts": [{"text": "You plan trips."}], "role": "user"},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Current weather for a city",
                        "parameters_json_schema": WEATHER.parameters,
                    },
                    {"name": "book_trip", "description": "Book a trip", "parameters_json_schema": BOOK.parameters},
                ]
            }
        ],
        "generationConfig": {"maxOutputTokens": 128},
    },
}


@pytest.mark.parametrize("api", APIS)
def test_tool_loop_round_trip_renders_calls_and_results_in_each_apis_format(api, llm_stub):
    """Several calls in one step and several steps, with tools offered and the choice left to the model."""
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="Booked Paris.")))
    # when
    result = llm_client_for(model=model).complete(loop_request(api))
    # then: the exact body, and no forced choice (auto is each API's default when tools are given)
    assert result.text == "Booked Paris."
    [sent] = llm_stub.requests_for(api)
    assert sent.json == EXPECTED_LOOP_BODIES[api]
    assert "tool_choice" not in sent.json
    assert "toolConfig" not in sent.json


@pytest.mark.parametrize("api", APIS)
def test_tool_loop_round_trip_is_rendered_the_same_when_streaming(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="Booked Paris.")))
    # when
    result = llm_client_for(model=model).stream(loop_request(api), on_text=lambda delta: None)
    # then
    assert result.text == "Booked Paris."
    [sent] = llm_stub.requests_for(api)
    stream_switch = {"openai_chat": {"stream": True, "stream_options": {"include_usage": True}}, "gemini": {}}
    assert sent.json == EXPECTED_LOOP_BODIES[api] | stream_switch.get(api, {"stream": True})


EXPECTED_CALL_IDS = {
    "openai_chat": ["call_1", "call_2"],
    "openai_responses": ["call_1", "call_2"],
    "anthropic": ["toolu_1", "toolu_2"],
    "gemini": ["gemini_call_1", "gemini_call_2"],  # Gemini's calls carry none: numbered in order
}


@pytest.mark.parametrize("api", APIS)
def test_tool_calls_in_a_result_carry_ids_the_next_step_answers_by(api, llm_stub):
    # given: the model calls two tools
    model = model_for(api, llm_stub)
    client = llm_client_for(model=model)
    llm_stub.enqueue(
        api,
        StubResponse(
            body=BODY_BUILDERS[api](tool_calls=[("get_weather", {"city": "Paris"}), ("book_trip", {"city": "Oslo"})])
        ),
        StubResponse(body=BODY_BUILDERS[api](text="done")),
    )
    first = CompletionRequest(
        model=MODEL_NAMES[api], messages=(ChatMessage(role="user", content="go"),), tools=(WEATHER, BOOK)
    )
    # when: the calls are answered by their ids in the next step
    result = client.complete(first)
    follow_up = CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(
            *first.messages,
            ChatMessage(role="assistant", content="", tool_calls=result.tool_calls),
            *(ChatMessage(role="tool", content=f"ok {call.name}", tool_call_id=call.id) for call in result.tool_calls),
        ),
        tools=(WEATHER, BOOK),
    )
    client.complete(follow_up)
    # then
    assert [call.id for call in result.tool_calls] == EXPECTED_CALL_IDS[api]
    assert [call.name for call in result.tool_calls] == ["get_weather", "book_trip"]
    sent = json.dumps(llm_stub.requests_for(api)[1].json)
    for call in result.tool_calls:
        assert (call.id in sent) is (api != "gemini")  # Gemini answers by name
        assert f"ok {call.name}" in sent


@pytest.mark.parametrize("api", APIS)
def test_final_answer_request_without_tools_sends_no_tools_field(api, llm_stub):
    """The tool loop's last call ("now answer") offers no tools: no tools and no tool choice on the wire."""
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="Booked Paris.")))
    # when
    result = llm_client_for(model=model).complete(loop_request(api, tools=()))
    # then
    assert result.text == "Booked Paris."
    [sent] = llm_stub.requests_for(api)
    assert set(sent.json) & {"tools", "tool_choice", "toolConfig", "parallel_tool_calls"} == set()
    if api != "anthropic":  # the history is rendered as with tools
        expected = {key: value for key, value in EXPECTED_LOOP_BODIES[api].items() if key != "tools"}
        assert sent.json == expected


def test_anthropic_final_answer_without_tools_renders_the_tool_history_as_text(llm_stub):
    """Anthropic refuses tool_use/tool_result blocks in a request that defines no tools (anthropic-sdk-python#494):
    the history is kept as text, in the same places."""
    # given
    model = model_for("anthropic", llm_stub)
    # when
    llm_client_for(model=model).complete(loop_request("anthropic", tools=()))
    # then
    [sent] = llm_stub.requests_for("anthropic")
    assert sent.json["messages"] == [
        {"role": "user", "content": "Warmer of Paris and Oslo? Book it."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": '[called tool get_weather (call call_a) with {"city": "Paris"}]'},
                {"type": "text", "text": '[called tool get_weather (call call_b) with {"city": "Oslo"}]'},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": '[result of tool call call_a]\n{"temp": 12}'},
                {"type": "text", "text": '[result of tool call call_b]\n{"temp": 3}'},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Paris is warmer."},
                {"type": "text", "text": '[called tool book_trip (call call_c) with {"city": "Paris"}]'},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "[result of tool call call_c]\nbooked: PAR-42"}]},
    ]
