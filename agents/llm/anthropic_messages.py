"""Anthropic Messages API through the official `anthropic` SDK.

System messages become the `system` parameter. Forced tool choice is
`{"type": "tool", "name": ..., "disable_parallel_tool_use": true}` (exactly one tool use). Tool input arrives
as an object. Overflow has no machine-readable code: it is recognised from the message text.
"""

from typing import Any

import anthropic

from agents.llm.base import (
    CompletionRequest,
    CompletionResult,
    ContextOverflowError,
    LLMError,
    ToolCall,
    Usage,
)
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    malformed_answer_error,
    non_json_error,
    stainless_sdk_error,
    without_secret,
)
from agents.llm.settings import ProviderSettings

OVERFLOW_PHRASES = ("prompt is too long", "exceed context limit", "context window", "input is too long")


def anthropic_status_error(exc: anthropic.APIStatusError) -> tuple[str, bool]:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = str(error.get("message") or exc.message)
    return message, any(phrase in message.lower() for phrase in OVERFLOW_PHRASES)


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
        messages: list[dict[str, Any]] = []
        for message in request.messages:
            if message.role == "system":
                continue
            if message.role == "tool":
                block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
                messages.append({"role": "user", "content": [block]})
                continue
            if not message.tool_calls:
                if message.content:  # the API refuses empty text blocks
                    messages.append({"role": message.role, "content": message.content})
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in message.tool_calls
            )
            messages.append({"role": "assistant", "content": blocks})
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
        provider = self.settings.name
        try:
            response = self.client.messages.create(**self.request_body(request))
        except anthropic.AnthropicError as exc:
            raise without_secret(map_anthropic_error(exc, provider=provider), secret=self.settings.api_key) from exc
        if not isinstance(response, anthropic.types.Message):
            raise non_json_error(provider=provider, body=response)
        try:
            return self.result_from(response, provider=provider)
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
            usage=Usage(input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens),
            raw_finish_reason=response.stop_reason or "",
        )
