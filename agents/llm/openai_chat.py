"""OpenAI Chat Completions through the official `openai` SDK; also every OpenAI-compatible endpoint.

Forced tool choice is the named form `{"type": "function", "function": {"name": ...}}` plus
`parallel_tool_calls: false` ("required" could legally return several calls). Tool arguments arrive as a
JSON string and are parsed here; a string that does not parse is kept as is for the caller to judge.
A user message's images are `image_url` parts holding a base64 data URI, after its text.

`stream` sends the same body with `stream: true` and `stream_options.include_usage` (usage arrives in a last
chunk without choices) and folds the chunks with the SDK's own `ChatCompletionStreamState`, so the final
completion goes through the same `result_from` as `complete`'s.
"""

import base64
import json
from collections.abc import Callable
from typing import Any

import openai
from openai.lib.streaming.chat import ChatCompletionStreamState

from agents.llm.base import (
    ChatMessage,
    CompletionRequest,
    CompletionResult,
    ImageInput,
    LLMError,
    ToolCall,
    ToolSpec,
    Usage,
)
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    OVERFLOW_ERROR_CODES,
    incomplete_stream_error,
    malformed_answer_error,
    non_json_error,
    sdk_complete,
    stainless_sdk_error,
    without_secret,
)
from agents.llm.openai_client import openai_client
from agents.llm.settings import ProviderSettings
from agents.llm.streaming import callback_errors_unwrapped, text_emitter

OVERFLOW_CODES = OVERFLOW_ERROR_CODES
OVERFLOW_PHRASES = ("maximum context length", "context window", "context_length_exceeded", "too many tokens")


# The SDK's `create(**params)` walks every parameter through its TypedDict annotations before sending (aliases,
# date and base64 formats): about 0.5 ms of CPU per message (58 ms for a 120-message context, 0.5 s for 1,000;
# issue 11), and a no-op for the bodies built here, which are already the wire format (the chat and responses
# message params have no alias or format to apply). So the body goes in `extra_body`, which the SDK sends as
# given; only `model` (and `stream`, which picks the return type) stay real parameters.
SDK_PARAMETERS = ("model", "stream")


def create_untransformed(create: Callable[..., Any], body: dict[str, Any], **required: Any) -> Any:
    """`create` (an SDK resource's create) called with `body` sent as is; `required` are the placeholders the
    SDK's signature insists on (e.g. `messages=()`), overridden on the wire by the body's own values."""
    parameters = {key: body[key] for key in SDK_PARAMETERS if key in body}
    extra = {key: value for key, value in body.items() if key not in SDK_PARAMETERS}
    return create(**parameters, **required, extra_body=extra)


def parse_arguments(raw: str) -> dict[str, Any] | str:
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        return raw
    return parsed if isinstance(parsed, dict) else raw


def strict_schema(tool: ToolSpec) -> bool:
    # OpenAI's strict mode rejects schemas that allow extra properties; ask for it only when the schema is ready.
    return tool.parameters.get("additionalProperties") is False


def openai_status_error(exc: openai.APIStatusError) -> tuple[str, bool]:
    body = exc.body if isinstance(exc.body, dict) else {}
    code = str(getattr(exc, "code", "") or body.get("code") or "")
    message = str(body.get("message") or exc.message)
    return message, code in OVERFLOW_CODES or any(phrase in message.lower() for phrase in OVERFLOW_PHRASES)


def map_openai_error(exc: openai.OpenAIError, *, provider: str) -> LLMError:
    """One mapping for both OpenAI APIs (Chat Completions and Responses) and compatible endpoints."""
    return stainless_sdk_error(exc, sdk=openai, provider=provider, describe_status=openai_status_error)


def data_uri(image: ImageInput) -> str:
    return f"data:{image.mime_type};base64,{base64.b64encode(image.data).decode('ascii')}"


def chat_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    body: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "user" and message.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
        parts.extend({"type": "image_url", "image_url": {"url": data_uri(image)}} for image in message.images)
        body["content"] = parts
    if message.tool_calls:
        body["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
                },
            }
            for call in message.tool_calls
        ]
    return body


class OpenAIChatClient:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.client = openai_client(settings)

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [chat_message(message) for message in request.messages],
        }
        # The official endpoint deprecated max_tokens (reasoning models refuse it); compatible servers
        # (vLLM, Ollama, DeepSeek, ...) widely know only max_tokens.
        body["max_tokens" if self.settings.base_url else "max_completion_tokens"] = request.max_output_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                        **({"strict": True} if strict_schema(tool) else {}),
                    },
                }
                for tool in request.tools
            ]
        if request.forced_tool:
            body["tool_choice"] = {"type": "function", "function": {"name": request.forced_tool}}
            body["parallel_tool_calls"] = False
        return body

    def complete(self, request: CompletionRequest) -> CompletionResult:
        return sdk_complete(
            call=lambda: create_untransformed(
                self.client.chat.completions.create, self.request_body(request), messages=()
            ),
            is_answer=lambda response: (
                isinstance(response, openai.types.chat.ChatCompletion) and bool(response.choices)
            ),
            result_from=self.result_from,
            sdk_errors=(openai.OpenAIError,),
            map_error=map_openai_error,
            provider=self.settings.name,
            secret=self.settings.api_key,
        )

    def stream(self, request: CompletionRequest, *, on_text: Callable[[str], None]) -> CompletionResult:
        provider = self.settings.name
        emit = text_emitter(on_text)
        body = self.request_body(request) | {"stream": True, "stream_options": {"include_usage": True}}
        state = ChatCompletionStreamState()
        chunks_seen = 0
        with callback_errors_unwrapped():
            try:
                with create_untransformed(self.client.chat.completions.create, body, messages=()) as chunks:
                    for chunk in chunks:
                        state.handle_chunk(chunk)
                        chunks_seen += 1
                        for choice in chunk.choices:
                            if choice.index == 0:
                                emit(choice.delta.content)
                if not chunks_seen:  # a 200 that was not an event stream (a proxy's page)
                    raise non_json_error(provider=provider, body="an empty event stream")
                response = state.get_final_completion()
                if not response.choices or response.choices[0].finish_reason is None:
                    raise incomplete_stream_error(provider=provider)
                return self.result_from(response, provider=provider)
            except openai.OpenAIError as exc:
                raise without_secret(map_openai_error(exc, provider=provider), secret=self.settings.api_key) from exc
            except MALFORMED_ANSWER_ERRORS as exc:
                raise malformed_answer_error(provider=provider, error=exc) from exc

    def result_from(self, response, *, provider: str) -> CompletionResult:
        choice = response.choices[0]
        calls = tuple(
            ToolCall(name=call.function.name, arguments=parse_arguments(call.function.arguments), id=call.id)
            for call in (choice.message.tool_calls or ())
            if getattr(call, "function", None) is not None
        )
        usage = response.usage
        return CompletionResult(
            text=choice.message.content or "",
            tool_calls=calls,
            usage=Usage(
                input_tokens=usage.prompt_tokens if usage else 0,
                output_tokens=usage.completion_tokens if usage else 0,
                cached_input_tokens=(getattr(usage.prompt_tokens_details, "cached_tokens", 0) or 0) if usage else 0,
            ),
            raw_finish_reason=choice.finish_reason or "",
        )
