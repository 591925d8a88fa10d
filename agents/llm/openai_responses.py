"""OpenAI Responses API through the official `openai` SDK.

System messages become `instructions`; the rest is the `input` list. Tools are flat (`name`, `parameters`,
`strict` at the tool's top level) and the forced choice is `{"type": "function", "name": ...}`. Responses
are not stored on OpenAI's side (`store: false`): the hub keeps its own record. A tool round trip is a
`function_call` item (with the model's call id) followed by a `function_call_output` item with the same
`call_id`. A user message's images are `input_image` parts (a base64 data URI) after an `input_text` part.

`stream` reads the typed events of `stream: true`: `response.output_text.delta` goes to `on_text`, and the
closing `response.completed` / `response.incomplete` / `response.failed` carries the whole response, which
goes through the same `result_from` as `complete`'s; an `error` event maps by its code.
"""

import json
from collections.abc import Callable
from typing import Any

import openai

from agents.llm.base import ChatMessage, CompletionRequest, CompletionResult, PermanentError, ToolCall, Usage
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    error_for_status,
    incomplete_stream_error,
    malformed_answer_error,
    sdk_complete,
    stream_error_status,
    without_secret,
)
from agents.llm.openai_chat import (
    create_untransformed,
    data_uri,
    map_openai_error,
    parse_arguments,
    strict_schema,
)
from agents.llm.openai_client import openai_client
from agents.llm.settings import ProviderSettings
from agents.llm.streaming import callback_errors_unwrapped, text_emitter

CLOSING_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def message_item(message: ChatMessage) -> dict[str, Any]:
    if message.role != "user" or not message.images:
        return {"role": message.role, "content": message.content}
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": message.content}] if message.content else []
    # `detail` is required by the API's schema; "auto" lets the model choose the resolution.
    parts.extend({"type": "input_image", "image_url": data_uri(image), "detail": "auto"} for image in message.images)
    return {"role": "user", "content": parts}


class OpenAIResponsesClient:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.client = openai_client(settings)

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        instructions = "\n\n".join(message.content for message in request.messages if message.role == "system")
        items: list[dict[str, Any]] = []
        for message in request.messages:
            if message.role == "system":
                continue
            if message.role == "tool":
                items.append(
                    {"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}
                )
                continue
            if message.content or message.images or not message.tool_calls:
                items.append(message_item(message))
            for call in message.tool_calls:
                arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
                items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments})
        body: dict[str, Any] = {
            "model": request.model,
            "input": items,
            "max_output_tokens": request.max_output_tokens,
            "store": False,
        }
        if instructions:
            body["instructions"] = instructions
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    # The default of `strict` is not settled for this API: always say it.
                    "strict": strict_schema(tool),
                }
                for tool in request.tools
            ]
        if request.forced_tool:
            body["tool_choice"] = {"type": "function", "name": request.forced_tool}
            body["parallel_tool_calls"] = False
        return body

    def complete(self, request: CompletionRequest) -> CompletionResult:
        return sdk_complete(
            call=lambda: create_untransformed(self.client.responses.create, self.request_body(request)),
            is_answer=lambda response: isinstance(response, openai.types.responses.Response),
            result_from=self.result_from,
            sdk_errors=(openai.OpenAIError,),
            map_error=map_openai_error,
            provider=self.settings.name,
            secret=self.settings.api_key,
        )

    def stream(self, request: CompletionRequest, *, on_text: Callable[[str], None]) -> CompletionResult:
        provider = self.settings.name
        emit = text_emitter(on_text)
        final = None
        with callback_errors_unwrapped():
            try:
                body = self.request_body(request) | {"stream": True}
                with create_untransformed(self.client.responses.create, body) as events:
                    for event in events:
                        if event.type == "response.output_text.delta":
                            emit(event.delta)
                        elif event.type in CLOSING_EVENTS:
                            final = event.response
                        elif event.type == "error":
                            status_code = stream_error_status({"code": event.code})
                            error = error_for_status(
                                status_code=status_code,
                                message=f"{provider}: {event.message}",
                                provider=provider,
                                is_overflow=event.code == "context_length_exceeded",
                            )
                            raise without_secret(error, secret=self.settings.api_key)
                if final is None:
                    raise incomplete_stream_error(provider=provider)
                return self.result_from(final, provider=provider)
            except openai.OpenAIError as exc:
                raise without_secret(map_openai_error(exc, provider=provider), secret=self.settings.api_key) from exc
            except MALFORMED_ANSWER_ERRORS as exc:
                raise malformed_answer_error(provider=provider, error=exc) from exc

    def result_from(self, response, *, provider: str) -> CompletionResult:
        if response.status == "failed":
            detail = response.error
            message = f"{provider}: response failed: {detail.message if detail else 'no detail'}"
            is_server = bool(detail and detail.code == "server_error")
            # Redacted, then cut, like every provider error (issue 30, finding 4): the model's text may echo the key.
            error = error_for_status(status_code=500 if is_server else 400, message=message, provider=provider)
            raise without_secret(error, secret=self.settings.api_key)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for item in response.output:
            if item.type == "message":
                texts.extend(part.text for part in item.content if part.type == "output_text")
            elif item.type == "function_call":
                calls.append(ToolCall(name=item.name, arguments=parse_arguments(item.arguments), id=item.call_id))
        finish = response.status or ""
        if response.status == "incomplete" and response.incomplete_details:
            finish = f"incomplete:{response.incomplete_details.reason}"
        if not texts and not calls and response.status not in ("completed", "incomplete"):
            raise PermanentError(f"{provider}: response ended with status {response.status!r}", provider=provider)
        usage = response.usage
        return CompletionResult(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=Usage(
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cached_input_tokens=(getattr(usage.input_tokens_details, "cached_tokens", 0) or 0) if usage else 0,
            ),
            raw_finish_reason=finish,
        )
