"""A local stub of four LLM HTTP APIs, for driving the real SDK clients in tests.

One threaded HTTP server on 127.0.0.1 (random port) answers:
- OpenAI Chat Completions  `POST .../chat/completions`           (api "openai_chat")
- OpenAI Responses         `POST .../responses`                  (api "openai_responses")
- Anthropic Messages       `POST .../messages`                   (api "anthropic")
- Gemini generateContent   `POST .../models/<model>:generateContent` under /v1/ or /v1beta/ (api "gemini")

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
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

APIS = ("openai_chat", "openai_responses", "anthropic", "gemini")


@dataclass
class StubResponse:
    status: int = 200
    # dict/list → JSON; str/bytes → sent verbatim (a non-JSON body); None → the api's default text reply.
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    content_type: str = ""  # default: application/json for dict/list bodies, text/html otherwise


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
    if route.endswith("/chat/completions"):
        return "openai_chat"
    if route.endswith("/responses"):
        return "openai_responses"
    if route.endswith(":generateContent"):
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
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def gemini_body(
    *,
    text: str | None = "stub reply",
    tool_calls: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    input_tokens: int = 50,
    output_tokens: int = 20,
    model: str = "gemini-2.5-flash",
    finish_reason: str = "STOP",
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
        },
        "modelVersion": model,
        "responseId": "r1",
    }


BODY_BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "openai_chat": openai_chat_body,
    "openai_responses": openai_responses_body,
    "anthropic": anthropic_body,
    "gemini": gemini_body,
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


# --- The server -----------------------------------------------------------------------------------------


class LLMStubServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.default_text = "stub reply"
        self._queues: dict[str, collections.deque[StubResponse]] = {api: collections.deque() for api in APIS}
        self._responders: dict[str, Responder] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False
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

            do_POST = _handle  # noqa: N815
            do_GET = _handle  # noqa: N815

        return Handler


@pytest.fixture
def llm_stub() -> Iterator[LLMStubServer]:
    """A fresh LLM stub server per test; see the module docstring."""
    stub = LLMStubServer().start()
    try:
        yield stub
    finally:
        stub.stop()
