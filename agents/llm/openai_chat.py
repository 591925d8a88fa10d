"""OpenAI Chat Completions through the official `openai` SDK; also every OpenAI-compatible endpoint.

Forced tool choice is the named form `{"type": "function", "function": {"name": ...}}` plus
`parallel_tool_calls: false` ("required" could legally return several calls). Tool arguments arrive as a
JSON string and are parsed here; a string that does not parse is kept as is for the caller to judge.
"""

import json
from typing import Any

import openai

from agents.llm.base import ChatMessage, CompletionRequest, CompletionResult, LLMError, ToolCall, ToolSpec, Usage
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    malformed_answer_error,
    non_json_error,
    stainless_sdk_error,
    without_secret,
)
from agents.llm.settings import ProviderSettings

OVERFLOW_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
OVERFLOW_PHRASES = ("maximum context length", "context window", "context_length_exceeded", "too many tokens")


def openai_client(settings: ProviderSettings) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=settings.api_key or "unset",
        base_url=settings.base_url or None,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
    )


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


def chat_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    body: dict[str, Any] = {"role": message.role, "content": message.content}
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
        provider = self.settings.name
        try:
            response = self.client.chat.completions.create(**self.request_body(request))
        except openai.OpenAIError as exc:
            raise without_secret(map_openai_error(exc, provider=provider), secret=self.settings.api_key) from exc
        if not isinstance(response, openai.types.chat.ChatCompletion) or not response.choices:
            raise non_json_error(provider=provider, body=response)
        try:
            return self.result_from(response, provider=provider)
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
            ),
            raw_finish_reason=choice.finish_reason or "",
        )
