"""A local stub of four LLM HTTP APIs, for driving the real SDK clients in tests.

One threaded HTTP server on 127.0.0.1 (random port) answers:
- OpenAI Chat Completions  `POST .../chat/completions`           (api "openai_chat")
- OpenAI Responses         `POST .../responses`                  (api "openai_responses")
- Anthropic Messages       `POST .../messages`                   (api "anthropic")
- Gemini generateContent   `POST .../models/<model>:generateContent` under /v1/ or /v1beta/ (api "gemini"),
  and `:streamGenerateContent?alt=sse`

Streaming: a request that asks for a stream (`"stream": true` in an OpenAI or Anthropic body, Gemini's
`:streamGenerateContent`) is answered with that API's own server-sent events, built from the same complete
body a non-streaming request would get (`sse_events(api, body)`: the text split word by word, tool-call
arguments in two pieces, usage and finish reason where each API puts them), so a test can compare `stream`
with `complete` on one answer. `StubResponse.chunk_delay_seconds` pauses before every event;
`gate`/`gate_after_chunks` hold the stream after that many text chunks until the test sets the event;
`fail_after_chunks` ends the stream after that many text chunks, with the API's own error event
(`fail_with="error_event"`, body `stream_error_body`, default a server error) or by dropping the connection
mid-body (`fail_with="disconnect"`). `stub.chunks_sent` counts the text chunks written so far.

Every request is recorded (path, headers, JSON body) in `stub.requests`. Responses are scripted per api in
FIFO order with `stub.enqueue(api, StubResponse(...))`; when an api's queue is empty the stub answers with a
plain text reply (`stub.default_text`), so a test or a benchmark can use it as an instant provider. Errors are
injected the same way: any status, body (dict → JSON, str/bytes → sent as is, e.g. a non-JSON HTML page),
headers (e.g. `retry-after`) and `delay_seconds` (a slow answer, for timeouts).

Body builders (`openai_chat_body`, `openai_responses_body`, `anthropic_body`, `gemini_body`) produce the
response shapes the SDKs parse (wire-format reference, section 5), and `*_error_body` helpers the realistic
error bodies.

Usage:
    def test_x(llm_stub):
        llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="hi")))
        client = openai.OpenAI(base_url=llm_stub.url("/v1"), api_key="k", max_retries=0)
        ...
        assert llm_stub.requests[0].json["model"] == "gpt-4o"

The `llm_stub` fixture is importable into a conftest (`from tests.stubs.llm_servers import llm_stub`);
tests/conftest.py does so, so every test can ask for it.
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.stubs.http_server import StubHTTPServer

APIS = ("openai_chat", "openai_responses", "anthropic", "gemini", "openai_audio")


@dataclass
class StubResponse:
    status: int = 200
    # dict/list → JSON; str/bytes → sent verbatim (a non-JSON body); None → the api's default text reply.
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    content_type: str = ""  # default: application/json for dict/list bodies, text/html otherwise
    # Streaming answers (see the module docstring); ignored for a request that did not ask for a stream.
    chunk_delay_seconds: float = 0.0
    fail_after_chunks: int | None = None
    fail_with: str = "error_event"  # or "disconnect"
    stream_error_body: dict[str, Any] | None = None
    gate: threading.Event | None = None
    gate_after_chunks: int = 1


@dataclass(frozen=True)
class RecordedRequest:
    api: str
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")


Responder = Callable[[RecordedRequest], StubResponse]


def api_for_path(path: str) -> str:
    """Which API a request path belongs to ("" when none)."""
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith("/audio/transcriptions"):  # issue 26 H3 (multipart; tests.stubs.llm_audio reads it)
        return "openai_audio"
    if route.endswith("/chat/completions"):
        return "openai_chat"
    if route.endswith("/responses"):
        return "openai_responses"
    if route.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini"
    if route.endswith("/messages"):
        return "anthropic"
    return ""


# --- Response bodies ------------------------------------------------------------------------------------


def openai_chat_body(
    *,
    text: str | None = "stub reply",
    tool_calls: list[tuple[str, dict[str, Any] | str]] = (),  # type: ignore[assignment]
    input_tokens: int = 50,
    output_tokens: int = 20,
    model: str = "gpt-4o-2024-08-06",
    finish_reason: str = "stop",
    cached_tokens: int = 0,  # of input_tokens, read from the prompt cache (prompt_tokens_details, A7)
) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{index + 1}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for index, (name, args) in enumerate(tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else text, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def openai_responses_body(
    *,
    text: str | None = "stub reply",
    tool_calls: list[tuple[str, dict[str, Any] | str]] = (),  # type: ignore[assignment]
    input_tokens: int = 50,
    output_tokens: int = 20,
    model: str = "gpt-4.1",
    status: str = "completed",
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    for index, (name, args) in enumerate(tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{index + 1}",
                "call_id": f"call_{index + 1}",
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
                "status": "completed",
            }
        )
    if not tool_calls and text is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def anthropic_body(
    *,
    text: str | None = "stub reply",
    tool_calls: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    input_tokens: int = 50,
    output_tokens: int = 20,
    model: str = "claude-sonnet-4-6",
    stop_reason: str = "",
    cache_read_input_tokens: int = 0,  # apart from input_tokens, as Anthropic counts them (A7)
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text is not None and not tool_calls:
        content.append({"type": "text", "text": text})
    for index, (name, args) in enumerate(tool_calls):
        content.append({"type": "tool_use", "id": f"toolu_{index + 1}", "name": name, "input": args})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}
        | ({"cache_read_input_tokens": cache_read_input_tokens} if cache_read_input_tokens else {}),
    }


def gemini_body(
    *,
    text: str | None = "stub reply",
    tool_calls: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    input_tokens: int = 50,
    output_tokens: int = 20,
    model: str = "gemini-2.5-flash",
    finish_reason: str = "STOP",
    cached_tokens: int = 0,  # of input_tokens, read from a cached content (A7)
) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None and not tool_calls:
        parts.append({"text": text})
    for name, args in tool_calls:
        parts.append({"functionCall": {"name": name, "args": args}})
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish_reason, "index": 0}],
        "usageMetadata": {
            "promptTokenCount": input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": input_tokens + output_tokens,
        }
        | ({"cachedContentTokenCount": cached_tokens} if cached_tokens else {}),
        "modelVersion": model,
        "responseId": "r1",
    }


BODY_BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "openai_chat": openai_chat_body,
    "openai_responses": openai_responses_body,
    "anthropic": anthropic_body,
    "gemini": gemini_body,
    "openai_audio": lambda text: {"text": text},  # issue 26 H3: a transcription's JSON answer
}


# --- Realistic error bodies (wire-format reference §5) --------------------------------------------------


def openai_error_body(*, message: str, type_: str = "invalid_request_error", code: str | None = None, param=None):
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error_body(*, message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_011stub"}


def gemini_error_body(*, code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


OVERFLOW_BODIES: dict[str, dict[str, Any]] = {
    "openai_chat": openai_error_body(
        message=(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 "
            "tokens. Please reduce the length of the messages."
        ),
        code="context_length_exceeded",
        param="messages",
    ),
    "openai_responses": openai_error_body(
        message="Your input exceeds the context window of this model. Please adjust your input and try again.",
        code="context_length_exceeded",
        param="input",
    ),
    "anthropic": anthropic_error_body(message="prompt is too long: 208310 tokens > 200000 maximum"),
    "gemini": gemini_error_body(
        code=400,
        message="The input token count (132478) exceeds the maximum number of tokens allowed (131072).",
        status="INVALID_ARGUMENT",
    ),
}

RATE_LIMIT_BODIES: dict[str, dict[str, Any]] = {
    "openai_chat": openai_error_body(
        message="Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3, Requested 1.",
        type_="requests",
        code="rate_limit_exceeded",
    ),
    "openai_responses": openai_error_body(
        message="Rate limit reached for gpt-4.1 on tokens per min (TPM).", type_="tokens", code="rate_limit_exceeded"
    ),
    "anthropic": anthropic_error_body(
        message="Number of request tokens has exceeded your per-minute rate limit", type_="rate_limit_error"
    ),
    "gemini": gemini_error_body(
        code=429, message="Resource has been exhausted (e.g. check quota).", status="RESOURCE_EXHAUSTED"
    ),
}

AUTH_BODIES: dict[str, dict[str, Any]] = {
    "openai_chat": openai_error_body(message="Incorrect API key provided: sk-***.", code="invalid_api_key"),
    "openai_responses": openai_error_body(message="Incorrect API key provided: sk-***.", code="invalid_api_key"),
    "anthropic": anthropic_error_body(message="invalid x-api-key", type_="authentication_error"),
    "gemini": gemini_error_body(
        code=401, message="API key not valid. Please pass a valid API key.", status="UNAUTHENTICATED"
    ),
}

SERVER_ERROR_BODIES: dict[str, dict[str, Any]] = {
    "openai_chat": openai_error_body(
        message="The server had an error while processing your request.", type_="server_error"
    ),
    "openai_responses": openai_error_body(
        message="The server had an error processing your request.", type_="server_error"
    ),
    "anthropic": anthropic_error_body(message="Internal server error", type_="api_error"),
    "gemini": gemini_error_body(code=500, message="An internal error has occurred.", status="INTERNAL"),
}

NON_JSON_BODY = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"


# --- Streaming: each API's server-sent events for one complete body ------------------------------------


@dataclass(frozen=True)
class SSEEvent:
    data: Any  # dict → JSON; str → sent as is ("[DONE]")
    event: str = ""  # the `event:` line ("" = none, as OpenAI chat and Gemini send)
    text_chunk: bool = False  # counts for fail_after_chunks / gate_after_chunks / chunks_sent


def text_pieces(text: str) -> list[str]:
    """Word by word, each word with the whitespace after it ("Hello there." → ["Hello ", "there."])."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def openai_chat_events(body: dict[str, Any]) -> list[SSEEvent]:
    choice = body["choices"][0]
    message = choice["message"]
    head = {key: body[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return head | {
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            "usage": None,
        }

    events = [SSEEvent(chunk({"role": "assistant", "content": "", "refusal": None}))]
    events += [SSEEvent(chunk({"content": piece}), text_chunk=True) for piece in text_pieces(message["content"] or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        first = {"index": index, "id": call["id"], "type": "function"}
        events.append(SSEEvent(chunk({"tool_calls": [first | {"function": {"name": call["function"]["name"]}}]})))
        events += [
            SSEEvent(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            for piece in halves(call["function"]["arguments"])
        ]
    events.append(SSEEvent(chunk({}, choice["finish_reason"])))
    events.append(SSEEvent(head | {"choices": [], "usage": body.get("usage")}))  # stream_options.include_usage
    events.append(SSEEvent("[DONE]"))
    return events


def openai_responses_events(body: dict[str, Any]) -> list[SSEEvent]:
    events: list[SSEEvent] = []

    def add(type_: str, text_chunk: bool = False, **fields: Any) -> None:
        data = {"type": type_, "sequence_number": len(events)} | fields
        events.append(SSEEvent(data, event=type_, text_chunk=text_chunk))

    add("response.created", response=body | {"status": "in_progress", "output": [], "usage": None})
    for output_index, item in enumerate(body["output"]):
        if item["type"] == "message":
            add("response.output_item.added", output_index=output_index, item=item | {"content": []})
            for content_index, part in enumerate(item["content"]):
                where = {"item_id": item["id"], "output_index": output_index, "content_index": content_index}
                add("response.content_part.added", **where, part=part | {"text": ""})
                for piece in text_pieces(part["text"]):
                    add("response.output_text.delta", text_chunk=True, **where, delta=piece, logprobs=[])
                add("response.output_text.done", **where, text=part["text"], logprobs=[])
                add("response.content_part.done", **where, part=part)
        elif item["type"] == "function_call":
            add("response.output_item.added", output_index=output_index, item=item | {"arguments": ""})
            for piece in halves(item["arguments"]):
                add(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=output_index, delta=piece
                )
            add(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=output_index,
                arguments=item["arguments"],
            )
        add("response.output_item.done", output_index=output_index, item=item)
    final = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
    add(final.get(body["status"], "response.completed"), response=body)
    return events


def anthropic_events(body: dict[str, Any]) -> list[SSEEvent]:
    usage = body["usage"]
    start = body | {
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        # message_start carries the prompt's counts, cache reads included; message_delta the output's
        "usage": {key: value for key, value in usage.items() if key != "output_tokens"} | {"output_tokens": 1},
    }
    events = [SSEEvent({"type": "message_start", "message": start}, event="message_start")]
    events.append(SSEEvent({"type": "ping"}, event="ping"))
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            opening, pieces = {"type": "text", "text": ""}, text_pieces(block["text"])
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
        else:
            opening = block | {"input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": piece} for piece in halves(json.dumps(block["input"]))
            ]
        events.append(
            SSEEvent({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start")
        )
        events += [
            SSEEvent(
                {"type": "content_block_delta", "index": index, "delta": delta},
                event="content_block_delta",
                text_chunk=block["type"] == "text",
            )
            for delta in deltas
        ]
        events.append(SSEEvent({"type": "content_block_stop", "index": index}, event="content_block_stop"))
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": body["stop_reason"], "stop_sequence": body.get("stop_sequence")},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    events.append(SSEEvent(message_delta, event="message_delta"))
    events.append(SSEEvent({"type": "message_stop"}, event="message_stop"))
    return events


def gemini_events(body: dict[str, Any]) -> list[SSEEvent]:
    if not body.get("candidates"):
        return [SSEEvent(body)]
    candidate = body["candidates"][0]
    parts = candidate["content"]["parts"]
    tail = {key: body[key] for key in ("modelVersion", "responseId") if key in body}
    pieces: list[tuple[dict[str, Any], bool]] = []
    for part in parts:
        if "text" in part:
            pieces += [({"text": piece}, True) for piece in text_pieces(part["text"])]
        else:
            pieces.append((part, False))  # Gemini sends a functionCall whole, in one chunk
    pieces = pieces or [({"text": ""}, False)]
    events = []
    for number, (part, is_text) in enumerate(pieces):
        chunk_candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        chunk = {"candidates": [chunk_candidate]} | tail
        if number == len(pieces) - 1:  # the last chunk carries the finish reason and the total usage
            chunk_candidate["finishReason"] = candidate.get("finishReason")
            chunk["usageMetadata"] = body.get("usageMetadata")
        events.append(SSEEvent(chunk, text_chunk=is_text))
    return events


SSE_BUILDERS: dict[str, Callable[[dict[str, Any]], list[SSEEvent]]] = {
    "openai_chat": openai_chat_events,
    "openai_responses": openai_responses_events,
    "anthropic": anthropic_events,
    "gemini": gemini_events,
}


def sse_events(api: str, body: dict[str, Any]) -> list[SSEEvent]:
    """The server-sent events with which `api` streams the answer whose complete body is `body`."""
    return SSE_BUILDERS[api](body)


def stream_error_event(api: str, error_body: dict[str, Any] | None, *, sequence_number: int) -> SSEEvent:
    """Each API's own in-stream error event; `error_body` is the error object (default: a server error)."""
    if api == "openai_chat":  # the SDK raises on any `data:` object holding "error"
        return SSEEvent({"error": error_body or SERVER_ERROR_BODIES[api]["error"]})
    if api == "openai_responses":
        error = error_body or {"code": "server_error", "message": "The server had an error processing your request."}
        return SSEEvent({"type": "error", "sequence_number": sequence_number, "param": None} | error, event="error")
    if api == "anthropic":
        error = error_body or {"type": "overloaded_error", "message": "Overloaded"}
        return SSEEvent({"type": "error", "error": error}, event="error")
    return SSEEvent(error_body or SERVER_ERROR_BODIES["gemini"])


def wants_stream(request: RecordedRequest) -> bool:
    if request.api == "gemini":
        return ":streamGenerateContent" in request.path
    try:
        return isinstance(request.json, dict) and request.json.get("stream") is True
    except ValueError:
        return False


def sse_bytes(event: SSEEvent) -> bytes:
    data = event.data if isinstance(event.data, str) else json.dumps(event.data)
    return (f"event: {event.event}\n" if event.event else "").encode() + f"data: {data}\n\n".encode()


# --- The server -----------------------------------------------------------------------------------------


class LLMStubServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.default_text = "stub reply"
        self.chunks_sent = 0  # text chunks written by streaming answers, all requests together
        self.first_chunk_at: list[float] = []  # monotonic time each streamed answer wrote its first text chunk
        self.spans: list[tuple[float, float]] = []  # (start, end) monotonic times of every request (issue 22)
        self._queues: dict[str, collections.deque[StubResponse]] = {api: collections.deque() for api in APIS}
        self._responders: dict[str, Responder] = {}
        self._lock = threading.Lock()
        self._server = StubHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="llm-stub", daemon=True)

    # lifecycle
    def start(self) -> LLMStubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # scripting
    def enqueue(self, api: str, *responses: StubResponse) -> None:
        if api not in APIS:
            raise ValueError(f"unknown api {api!r}; one of {APIS}")
        with self._lock:
            self._queues[api].extend(responses)

    def respond_with(self, api: str, responder: Responder | None) -> None:
        """Answer every request of `api` (once its queue is empty) by calling `responder(request)`."""
        with self._lock:
            if responder is None:
                self._responders.pop(api, None)
            else:
                self._responders[api] = responder

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            for queue in self._queues.values():
                queue.clear()
            self._responders.clear()
            self.default_text = "stub reply"
            self.chunks_sent = 0
            self.spans.clear()

    def requests_for(self, api: str) -> list[RecordedRequest]:
        with self._lock:
            return [request for request in self.requests if request.api == api]

    def _next_response(self, request: RecordedRequest) -> StubResponse:
        with self._lock:
            queue = self._queues.get(request.api)
            if queue:
                return queue.popleft()
            responder = self._responders.get(request.api)
        if responder is not None:
            return responder(request)
        if request.api in BODY_BUILDERS:
            return StubResponse(body=BODY_BUILDERS[request.api](text=self.default_text))
        return StubResponse(status=404, body={"error": {"message": f"no stub route for {request.path}"}})

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = RecordedRequest(
                    api=api_for_path(self.path),
                    method=self.command,
                    path=self.path,
                    headers={name.lower(): value for name, value in self.headers.items()},
                    body=body,
                )
                stub._record(request)
                response = stub._next_response(request)
                if response.body is None and request.api in BODY_BUILDERS:
                    response.body = BODY_BUILDERS[request.api](text=stub.default_text)
                if response.delay_seconds:
                    time.sleep(response.delay_seconds)
                if response.status == 200 and isinstance(response.body, dict) and wants_stream(request):
                    self._stream(request.api, response)
                    return
                if isinstance(response.body, (dict, list)):
                    payload = json.dumps(response.body).encode()
                    content_type = response.content_type or "application/json"
                elif isinstance(response.body, bytes):
                    payload = response.body
                    content_type = response.content_type or "text/html"
                else:
                    payload = str(response.body or "").encode()
                    content_type = response.content_type or "text/html"
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

            def _write_chunk(self, payload: bytes) -> None:
                # Chunked transfer encoding: a connection dropped mid-body is then an error the client sees,
                # not a normal end of the stream.
                self.wfile.write(f"{len(payload):X}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()

            def _stream(self, api: str, response: StubResponse) -> None:
                events = sse_events(api, response.body)
                content_type = "text/event-stream" + ("; charset=utf-8" if api == "gemini" else "")
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Transfer-Encoding", "chunked")
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    text_chunks = 0
                    for number, event in enumerate(events):
                        if response.fail_after_chunks is not None and text_chunks >= response.fail_after_chunks:
                            if response.fail_with == "disconnect":
                                self.close_connection = True
                                return  # no terminating chunk: the body is cut off
                            error = stream_error_event(api, response.stream_error_body, sequence_number=number)
                            self._write_chunk(sse_bytes(error))
                            break
                        if event.text_chunk and response.gate is not None and text_chunks == response.gate_after_chunks:
                            response.gate.wait(timeout=10)
                        if response.chunk_delay_seconds:
                            time.sleep(response.chunk_delay_seconds)
                        if event.text_chunk:  # counted before the write: a client may read it at once
                            text_chunks += 1
                            with stub._lock:
                                stub.chunks_sent += 1
                                if text_chunks == 1:
                                    stub.first_chunk_at.append(time.monotonic())
                        self._write_chunk(sse_bytes(event))
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away mid-stream (its on_text raised, it timed out)
                    self.close_connection = True

            def _timed(self) -> None:
                """Every request's span, so a test can tell whether two model calls overlapped (issue 22)."""
                started = time.monotonic()
                try:
                    self._handle()
                finally:
                    with stub._lock:
                        stub.spans.append((started, time.monotonic()))

            do_POST = _timed  # noqa: N815
            do_GET = _timed  # noqa: N815

        return Handler


@pytest.fixture
def llm_stub() -> Iterator[LLMStubServer]:
    """A fresh LLM stub server per test; see the module docstring."""
    stub = LLMStubServer().start()
    try:
        yield stub
    finally:
        stub.stop()
