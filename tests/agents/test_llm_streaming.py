"""Streaming (issue 13.3): every adapter's `stream` through its real SDK's streaming API against the local stub,
which answers with each API's own server-sent events built from the same complete body `complete` gets.

Asserts the stream request on the wire, deltas in order joining to the text, the result equal to `complete`'s
for the same answer (text, tool calls with ids, usage, finish reason), the first delta arriving while the stub
still holds back the rest, and failures before or mid-stream mapping to the same `LLMError` types.
"""

import threading

import pytest

from agents.llm.base import (
    AuthenticationError,
    ChatMessage,
    CompletionRequest,
    ContextOverflowError,
    RateLimitedError,
    ToolCall,
    ToolSpec,
    TransientError,
    Usage,
)
from agents.llm.registry import llm_client_for
from agents.models import Provider
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.agents.test_llm_adapters import API_KEY, APIS, MODEL_NAMES, model_for, text_request
from tests.stubs.llm_servers import (
    AUTH_BODIES,
    BODY_BUILDERS,
    NON_JSON_BODY,
    OVERFLOW_BODIES,
    RATE_LIMIT_BODIES,
    StubResponse,
    anthropic_body,
    gemini_body,
    text_pieces,
)

pytestmark = pytest.mark.django_db

ANSWER = "The build is green again, ship it."
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def answer_body(api: str, **fields) -> dict:
    return BODY_BUILDERS[api](**({"text": ANSWER, "input_tokens": 31, "output_tokens": 9} | fields))


def tools_request(api: str) -> CompletionRequest:
    return CompletionRequest(
        model=MODEL_NAMES[api],
        messages=(ChatMessage(role="user", content="weather in Paris and Oslo?"),),
        tools=(WEATHER,),
        max_output_tokens=64,
    )


def collect(client, request) -> tuple[list[str], object]:
    deltas: list[str] = []
    result = client.stream(request, on_text=deltas.append)
    return deltas, result


STREAM_PATHS = {
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
}


@pytest.mark.parametrize("api", APIS)
def test_stream_asks_each_api_for_its_stream_with_the_same_body_as_complete(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    client = llm_client_for(model=model)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api)), StubResponse(body=answer_body(api)))
    # when
    client.complete(text_request(api))
    collect(client, text_request(api))
    # then: the same body plus the API's own stream switch
    completed, streamed = llm_stub.requests_for(api)
    assert streamed.path == STREAM_PATHS[api]
    switch = {
        "openai_chat": {"stream": True, "stream_options": {"include_usage": True}},
        "openai_responses": {"stream": True},
        "anthropic": {"stream": True},
        "gemini": {},
    }[api]
    assert streamed.json == completed.json | switch


@pytest.mark.parametrize("api", APIS)
def test_stream_deltas_arrive_in_order_and_join_to_the_text(api, llm_stub):
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api)))
    # when
    deltas, result = collect(llm_client_for(model=model), text_request(api))
    # then: one delta per word the stub sent, in order
    assert deltas == text_pieces(ANSWER)
    assert len(deltas) == 7
    assert "".join(deltas) == result.text == ANSWER


@pytest.mark.parametrize("api", APIS)
def test_stream_result_equals_completes_for_the_same_answer(api, llm_stub):
    # given: the same complete body answers a complete call and (as events) a stream call
    model = model_for(api, llm_stub)
    client = llm_client_for(model=model)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api)), StubResponse(body=answer_body(api)))
    # when
    completed = client.complete(text_request(api))
    _, streamed = collect(client, text_request(api))
    # then
    assert streamed == completed
    assert streamed.usage == Usage(input_tokens=31, output_tokens=9)
    assert (
        streamed.raw_finish_reason
        == {
            "openai_chat": "stop",
            "openai_responses": "completed",
            "anthropic": "end_turn",
            "gemini": "STOP",
        }[api]
    )


@pytest.mark.parametrize("api", APIS)
def test_stream_accumulates_several_tool_calls_with_ids_as_complete_does(api, llm_stub):
    # given: the model calls one tool twice in one step (arguments streamed in pieces where the API does)
    model = model_for(api, llm_stub)
    client = llm_client_for(model=model)
    calls = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]
    body = BODY_BUILDERS[api](tool_calls=calls, input_tokens=40, output_tokens=12)
    llm_stub.enqueue(api, StubResponse(body=body), StubResponse(body=body))
    # when
    completed = client.complete(tools_request(api))
    deltas, streamed = collect(client, tools_request(api))
    # then: no text, both calls with their arguments and ids
    assert deltas == []
    assert streamed == completed
    assert [(call.name, call.arguments) for call in streamed.tool_calls] == calls
    assert all(call.id for call in streamed.tool_calls)
    assert len({call.id for call in streamed.tool_calls}) == 2
    assert streamed.usage == Usage(input_tokens=40, output_tokens=12)


@pytest.mark.parametrize("api", APIS)
def test_stream_first_delta_arrives_before_the_rest_of_the_answer_is_sent(api, llm_stub):
    """Time to first delta is not the whole answer's time: the stub holds the stream after its first word until
    the test has seen that word arrive."""
    # given
    model = model_for(api, llm_stub)
    gate = threading.Event()
    llm_stub.enqueue(api, StubResponse(body=answer_body(api), gate=gate, gate_after_chunks=1))
    sent_when_delivered: list[int] = []

    def on_text(delta: str) -> None:
        sent_when_delivered.append(llm_stub.chunks_sent)
        gate.set()

    # when
    result = llm_client_for(model=model).stream(text_request(api), on_text=on_text)
    # then: the first word was delivered while the stub had written only it; the whole answer came after
    assert sent_when_delivered[0] == 1
    assert gate.is_set()
    assert llm_stub.chunks_sent == 7
    assert result.text == ANSWER


@pytest.mark.parametrize("api", APIS)
def test_stream_with_a_per_chunk_delay_delivers_every_chunk_once_in_order(api, llm_stub):
    # given: a slow model (the stub pauses before every event)
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api), chunk_delay_seconds=0.01))
    seen: list[tuple[int, str]] = []
    # when
    result = llm_client_for(model=model).stream(
        text_request(api), on_text=lambda delta: seen.append((llm_stub.chunks_sent, delta))
    )
    # then: every word once, in order, each delivered after the stub wrote it (how far the stub had got by then
    # depends on the machine's load: the gate test above pins the first delta down)
    assert [delta for _, delta in seen] == text_pieces(ANSWER)
    assert all(sent >= position for position, (sent, _) in enumerate(seen, start=1))
    assert [sent for sent, _ in seen] == sorted(sent for sent, _ in seen)
    assert result.text == ANSWER


@pytest.mark.parametrize("api", APIS)
def test_stream_error_event_after_some_deltas_is_a_transient_llm_error(api, llm_stub):
    # given: the provider fails mid-answer with its own error event (OpenAI server_error, Anthropic
    # overloaded_error, Gemini INTERNAL)
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api), fail_after_chunks=3))
    deltas: list[str] = []
    # when
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).stream(text_request(api), on_text=deltas.append)
    # then: the deltas before the failure arrived; the error is ours, retryable, naming the provider
    assert deltas == text_pieces(ANSWER)[:3]
    assert type(caught.value) is TransientError
    assert caught.value.retryable is True
    assert caught.value.message.startswith(f"{model.provider.name}: ")


@pytest.mark.parametrize("api", APIS)
def test_stream_connection_dropped_mid_body_is_a_transient_llm_error(api, llm_stub):
    # given: the connection drops after two words (no end of the chunked body)
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api), fail_after_chunks=2, fail_with="disconnect"))
    deltas: list[str] = []
    # when
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).stream(text_request(api), on_text=deltas.append)
    # then
    assert deltas == text_pieces(ANSWER)[:2]
    assert type(caught.value) is TransientError
    assert caught.value.message.startswith(f"{model.provider.name}: ")


RATE_LIMIT_EVENTS = {
    "openai_chat": {"message": "Rate limit reached for gpt-4o", "type": "requests", "code": "rate_limit_exceeded"},
    "openai_responses": {"code": "rate_limit_exceeded", "message": "Rate limit reached for gpt-4.1"},
    "anthropic": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your rate limit"},
    "gemini": RATE_LIMIT_BODIES["gemini"],
}


@pytest.mark.parametrize("api", APIS)
def test_stream_error_event_maps_by_its_type_as_the_same_error_would_before_the_stream(api, llm_stub):
    # given: a rate-limit error event mid-stream
    model = model_for(api, llm_stub)
    llm_stub.enqueue(
        api, StubResponse(body=answer_body(api), fail_after_chunks=1, stream_error_body=RATE_LIMIT_EVENTS[api])
    )
    # when / then
    with pytest.raises(RateLimitedError) as caught:
        llm_client_for(model=model).stream(text_request(api), on_text=lambda delta: None)
    assert caught.value.status_code == 429


STATUS_CASES = {
    "overflow": (lambda api: StubResponse(status=400, body=OVERFLOW_BODIES[api]), ContextOverflowError),
    "rate_limited": (
        lambda api: StubResponse(status=429, body=RATE_LIMIT_BODIES[api], headers={"retry-after": "7"}),
        RateLimitedError,
    ),
    "unauthorized": (lambda api: StubResponse(status=401, body=AUTH_BODIES[api]), AuthenticationError),
}


@pytest.mark.parametrize("case", list(STATUS_CASES))
@pytest.mark.parametrize("api", APIS)
def test_stream_refused_before_it_starts_maps_exactly_as_complete(api, case, llm_stub):
    # given: the same refusal answers a complete call and a stream call
    make_response, expected = STATUS_CASES[case]
    model = model_for(api, llm_stub)
    client = llm_client_for(model=model)
    llm_stub.enqueue(api, make_response(api), make_response(api))
    with pytest.raises(expected) as completed:
        client.complete(text_request(api))
    deltas: list[str] = []
    # when
    with pytest.raises(expected) as streamed:
        client.stream(text_request(api), on_text=deltas.append)
    # then: same type, status, message and retry-after; no delta
    assert type(streamed.value) is type(completed.value) is expected
    assert streamed.value.message == completed.value.message
    assert streamed.value.status_code == completed.value.status_code
    assert getattr(streamed.value, "retry_after_seconds", None) == getattr(completed.value, "retry_after_seconds", None)
    assert API_KEY not in streamed.value.message
    assert deltas == []


@pytest.mark.parametrize("api", APIS)
def test_stream_an_exception_from_on_text_reaches_the_caller_unchanged(api, llm_stub):
    """The caller's own failure (say, a card update refused) is not dressed up as the provider's."""
    # given
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(body=answer_body(api)))

    def on_text(delta: str) -> None:
        raise KeyError("card gone")

    # when / then
    with pytest.raises(KeyError) as caught:
        llm_client_for(model=model).stream(text_request(api), on_text=on_text)
    assert caught.value.args == ("card gone",)


def test_local_rules_streams_its_echo_word_by_word():
    # given
    provider = ProviderFactory(kind=Provider.Kind.LOCAL_RULES, base_url="", api_key="")
    client = llm_client_for(model=LLMModelFactory(provider=provider, name="echo"))
    request = CompletionRequest(
        model="echo", messages=(ChatMessage(role="user", content="deploy the staging branch please"),)
    )
    deltas: list[str] = []
    # when
    result = client.stream(request, on_text=deltas.append)
    # then: the same answer as complete, one word per delta
    assert result == client.complete(request)
    assert "".join(deltas) == result.text
    assert deltas[:3] == ["[local_rules ", "· ", "rule-based "]
    assert deltas[-1] == "please"
    assert len(deltas) == len(result.text.split())


def test_local_rules_stream_of_a_forced_tool_call_sends_no_delta():
    # given: the judge's forced `decide` call
    provider = ProviderFactory(kind=Provider.Kind.LOCAL_RULES, base_url="", api_key="")
    client = llm_client_for(model=LLMModelFactory(provider=provider, name="judge"))
    request = CompletionRequest(
        model="judge",
        messages=(ChatMessage(role="user", content="what time is it?"),),
        tools=(ToolSpec(name="decide", description="d", parameters={"type": "object"}),),
        forced_tool="decide",
    )
    deltas: list[str] = []
    # when
    result = client.stream(request, on_text=deltas.append)
    # then
    assert deltas == []
    assert result.tool_calls == (
        ToolCall(
            name="decide",
            arguments={"should_act": "send", "reason": "rule-based: the newest message is a question"},
            id="local_rules_call_1",
        ),
    )


@pytest.mark.parametrize("api", APIS)
def test_stream_answered_with_a_non_event_stream_page_is_transient(api, llm_stub):
    # given: a proxy answers the stream request with a 200 HTML page
    model = model_for(api, llm_stub)
    llm_stub.enqueue(api, StubResponse(status=200, body=NON_JSON_BODY))
    deltas: list[str] = []
    # when
    with pytest.raises(TransientError) as caught:
        llm_client_for(model=model).stream(text_request(api), on_text=deltas.append)
    # then
    assert type(caught.value) is TransientError
    assert caught.value.message.startswith(f"{model.provider.name}: ")
    assert deltas == []


def test_local_rules_pauses_between_streamed_words_as_configured(settings, monkeypatch):
    """The embedded default's demo shows streaming: a pause between words (never before the first)."""
    # given
    settings.AMUX_LOCAL_RULES_STREAM_DELAY_MS = 40
    pauses: list[float] = []
    monkeypatch.setattr("agents.llm.local_rules.time.sleep", pauses.append)
    provider = ProviderFactory(kind=Provider.Kind.LOCAL_RULES, base_url="", api_key="", name="demo-slow")
    client = llm_client_for(model=LLMModelFactory(provider=provider, name="echo"))
    request = CompletionRequest(model="echo", messages=(ChatMessage(role="user", content="hello there"),))
    events: list[str] = []
    pauses_at_delta: list[int] = []
    # when
    client.stream(request, on_text=lambda delta: (events.append(delta), pauses_at_delta.append(len(pauses))))
    # then: one pause between each two words, each before the next word
    assert pauses == [0.04] * (len(events) - 1)
    assert pauses_at_delta == list(range(len(events)))


CACHED_BODIES = {
    # Anthropic counts cache reads apart from input_tokens; Gemini within promptTokenCount.
    "anthropic": lambda: anthropic_body(text="Cached.", input_tokens=100, output_tokens=7, cache_read_input_tokens=900),
    "gemini": lambda: gemini_body(text="Cached.", input_tokens=1000, output_tokens=7, cached_tokens=900),
}


@pytest.mark.parametrize("api", list(CACHED_BODIES))
def test_a7_cached_input_tokens_are_recorded_from_anthropic_and_gemini(api, llm_stub):
    # given: an answer that read 900 of its 1000 prompt tokens from the provider's cache, once whole, once streamed
    client = llm_client_for(model=model_for(api, llm_stub))
    llm_stub.enqueue(api, StubResponse(body=CACHED_BODIES[api]()), StubResponse(body=CACHED_BODIES[api]()))
    # when: through the real SDK
    completed = client.complete(text_request(api))
    _, streamed = collect(client, text_request(api))
    # then: every prompt token in input_tokens, the cache reads among them priced apart
    assert completed.usage == Usage(input_tokens=1000, output_tokens=7, cached_input_tokens=900)
    assert streamed.usage == completed.usage
