"""Anthropic Messages API through the official `anthropic` SDK.

System messages become the `system` parameter. Forced tool choice is
`{"type": "tool", "name": ..., "disable_parallel_tool_use": true}` (exactly one tool use). Tool input arrives
as an object. Overflow has no machine-readable code: it is recognised from the message text.

Tool round trips: the assistant's `tool_use` blocks, then ONE user message holding a `tool_result` block per
call (consecutive tool results are merged: the API wants every result of a step in the next message). The API
refuses `tool_use`/`tool_result` blocks in a request that defines no tools (anthropic-sdk-python#494), so a
follow-up without tools (the tool loop's "now answer") renders that history as text instead.
A user message's images are `image` blocks with a base64 source, before its text (Anthropic's advice).

`stream` uses the SDK's `messages.stream` helper: `text_stream` feeds `on_text`, `get_final_message()` is the
accumulated Message (tool input JSON included), read by the same `result_from` as `complete`'s. An `error`
event mid-stream maps by its error type (overloaded_error → transient, ...).
"""

import base64
import json
from collections.abc import Callable
from typing import Any

import anthropic

from agents.llm.base import (
    ChatMessage,
    CompletionRequest,
    CompletionResult,
    ContextOverflowError,
    ImageInput,
    LLMError,
    ToolCall,
    Usage,
)
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    TRANSPORT_ERRORS,
    incomplete_stream_error,
    malformed_answer_error,
    sdk_complete,
    stainless_sdk_error,
    transport_error,
    without_secret,
)
from agents.llm.settings import ProviderSettings
from agents.llm.streaming import callback_errors_unwrapped, text_emitter

OVERFLOW_PHRASES = ("prompt is too long", "exceed context limit", "context window", "input is too long")


def anthropic_status_error(exc: anthropic.APIStatusError) -> tuple[str, bool]:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    if not isinstance(error, dict):
        error = {}
    message = str(error.get("message") or exc.message)
    return message, any(phrase in message.lower() for phrase in OVERFLOW_PHRASES)


def image_block(image: ImageInput) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": data}}


def tool_call_text(call: ToolCall) -> str:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
    return f"[called tool {call.name} (call {call.id}) with {arguments}]"


def tool_result_text(message: ChatMessage) -> str:
    return f"[result of tool call {message.tool_call_id}]\n{message.content}"


def map_anthropic_error(exc: anthropic.AnthropicError, *, provider: str) -> LLMError:
    return stainless_sdk_error(exc, sdk=anthropic, provider=provider, describe_status=anthropic_status_error)


class AnthropicClient:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.client = anthropic.Anthropic(
            api_key=settings.api_key or "unset",
            base_url=settings.base_url or None,
            timeout=settings.timeout_seconds,
            max_retries=settings.max_retries,
        )

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        system = "\n\n".join(message.content for message in request.messages if message.role == "system")
        as_blocks = bool(request.tools)  # tool history as tool blocks only when the request defines tools
        messages: list[dict[str, Any]] = []
        for message in request.messages:
            if message.role == "system":
                continue
            if message.role == "tool":
                if as_blocks:
                    block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
                else:
                    block = {"type": "text", "text": tool_result_text(message)}
                previous = messages[-1] if messages else None
                if previous and previous["role"] == "user" and previous.get("tool_results"):
                    previous["content"].append(block)
                else:
                    messages.append({"role": "user", "content": [block], "tool_results": True})
                continue
            if message.role == "user" and message.images:
                blocks = [image_block(image) for image in message.images]
                blocks += [{"type": "text", "text": message.content}] if message.content else []
                messages.append({"role": "user", "content": blocks})
                continue
            if not message.tool_calls:
                if message.content:  # the API refuses empty text blocks
                    messages.append({"role": message.role, "content": message.content})
                continue
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            if as_blocks:
                blocks.extend(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                    for call in message.tool_calls
                )
            else:
                blocks.extend({"type": "text", "text": tool_call_text(call)} for call in message.tool_calls)
            messages.append({"role": "assistant", "content": blocks})
        for api_message in messages:
            api_message.pop("tool_results", None)  # our marker for merging, not part of the API
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
                for tool in request.tools
            ]
        if request.forced_tool:
            body["tool_choice"] = {"type": "tool", "name": request.forced_tool, "disable_parallel_tool_use": True}
        return body

    def complete(self, request: CompletionRequest) -> CompletionResult:
        return sdk_complete(
            call=lambda: self.client.messages.create(**self.request_body(request)),
            is_answer=lambda response: isinstance(response, anthropic.types.Message),
            result_from=self.result_from,
            sdk_errors=(anthropic.AnthropicError,),
            map_error=map_anthropic_error,
            provider=self.settings.name,
            secret=self.settings.api_key,
        )

    def stream(self, request: CompletionRequest, *, on_text: Callable[[str], None]) -> CompletionResult:
        provider = self.settings.name
        emit = text_emitter(on_text)
        with callback_errors_unwrapped():
            try:
                with self.client.messages.stream(**self.request_body(request)) as stream:
                    for text in stream.text_stream:
                        emit(text)
                    try:
                        response = stream.get_final_message()
                    except AssertionError:  # the SDK's way of saying no message_start arrived
                        raise incomplete_stream_error(provider=provider) from None
                if response.stop_reason is None:  # no message_delta: the body ended mid-answer
                    raise incomplete_stream_error(provider=provider)
                return self.result_from(response, provider=provider)
            except anthropic.AnthropicError as exc:
                raise without_secret(map_anthropic_error(exc, provider=provider), secret=self.settings.api_key) from exc
            except TRANSPORT_ERRORS as exc:  # the SDK reads a stream's body without wrapping httpx's errors
                raise transport_error(exc, provider=provider) from exc
            except MALFORMED_ANSWER_ERRORS as exc:
                raise malformed_answer_error(provider=provider, error=exc) from exc

    def result_from(self, response, *, provider: str) -> CompletionResult:
        texts = [block.text for block in response.content if block.type == "text"]
        calls = tuple(
            ToolCall(
                name=block.name,
                arguments=block.input if isinstance(block.input, dict) else str(block.input),
                id=block.id,
            )
            for block in response.content
            if block.type == "tool_use"
        )
        if response.stop_reason == "model_context_window_exceeded" and not texts and not calls:
            raise ContextOverflowError(f"{provider}: the model's context window was exceeded", provider=provider)
        return CompletionResult(
            text="".join(texts),
            tool_calls=calls,
            usage=anthropic_usage(response.usage),
            raw_finish_reason=response.stop_reason or "",
        )


def anthropic_usage(usage) -> Usage:
    """Anthropic counts prompt-cache reads and writes apart from `input_tokens`; our Usage counts every prompt
    token in input_tokens and the cache reads again in cached_input_tokens (priced at the cached price, A7).
    Cache writes have no price of their own here: they count as plain input."""
    cache_read = getattr(usage, "cache_read_input_tokens", None) or 0
    cache_write = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Usage(
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
        output_tokens=usage.output_tokens or 0,
        cached_input_tokens=cache_read,
    )
