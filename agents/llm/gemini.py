"""Google Gemini `generateContent` through the official `google-genai` SDK.

System messages become `systemInstruction`; assistant turns are role "model". Forced tool choice is
`toolConfig.functionCallingConfig = {mode: ANY, allowedFunctionNames: [name]}`; the SDK's automatic function
calling is off (we never let the SDK run tools). Function-call `args` arrive as an object.

Tool round trips: the model's `functionCall` parts, then one user Content holding a `functionResponse` part
per call (consecutive tool results are merged, as Gemini's parallel-calling docs send them), each under the
name of the call it answers. A user message's images are `inline_data` parts, before its text (Gemini's
advice for image prompts).

`stream` reads `generate_content_stream` (`:streamGenerateContent?alt=sse`): each chunk's text parts go to
`on_text`; all chunks' parts, the last finish reason and the last usage are folded into one response read by
the same `result_from` as `complete`'s. An error object in the stream raises the SDK's APIError, mapped as
before the stream.
"""

import json
from collections.abc import Callable
from typing import Any

import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from agents.llm.base import CompletionRequest, CompletionResult, LLMError, PermanentError, ToolCall, Usage
from agents.llm.errors import (
    MALFORMED_ANSWER_ERRORS,
    TRANSPORT_ERRORS,
    error_for_status,
    incomplete_stream_error,
    malformed_answer_error,
    non_json_error,
    sdk_complete,
    short,
    transport_error,
    without_secret,
)
from agents.llm.settings import ProviderSettings
from agents.llm.streaming import callback_errors_unwrapped, text_emitter

RETRYABLE_STATUS_CODES = [408, 429, 500, 502, 503, 504]
# What a call through google-genai can raise for the provider's fault (map_gemini_error sorts them): its APIError,
# a ValueError for a body that is not the JSON it expects, and the transport's errors it lets through.
SDK_ERRORS: tuple[type[Exception], ...] = (genai_errors.APIError, ValueError, *TRANSPORT_ERRORS)


def is_overflow_message(message: str) -> bool:
    lowered = message.lower()
    return "token count" in lowered and "exceeds" in lowered or "context window" in lowered or "too long" in lowered


def map_gemini_error(exc: Exception, *, provider: str) -> LLMError:
    if isinstance(exc, genai_errors.APIError):
        message = str(exc.message or exc.status or exc)
        headers = getattr(getattr(exc, "response", None), "headers", None)
        return error_for_status(
            status_code=exc.code,
            message=f"{provider}: {exc.status or ''} {message}".replace("  ", " "),
            provider=provider,
            headers=headers,
            body=exc.details,
            is_overflow=exc.code == 400 and is_overflow_message(message),
        )
    if isinstance(exc, TRANSPORT_ERRORS):
        return transport_error(exc, provider=provider)
    if isinstance(exc, pydantic.ValidationError):  # JSON, but not the shape the API documents
        return malformed_answer_error(provider=provider, error=exc)
    if isinstance(exc, ValueError):  # json.JSONDecodeError: a 2xx body that is not JSON
        return non_json_error(provider=provider, body=exc)
    return error_for_status(status_code=400, message=f"{provider}: {short(str(exc))}", provider=provider)


def tool_result_name(*, calls: tuple[ToolCall, ...], tool_call_id: str, position: int) -> str:
    """The function name a tool result answers: its call's (by id, else the n-th call), or a readable error."""
    for call in calls:
        if tool_call_id and call.id == tool_call_id:
            return call.name
    if not tool_call_id and position < len(calls):
        return calls[position].name
    raise PermanentError(
        f"A tool result (call id {tool_call_id!r}) answers no tool call of the preceding assistant message."
    )


class GeminiClient:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        retry_options = None  # google-genai: no retry_options = never retry
        if settings.max_retries > 0:
            retry_options = types.HttpRetryOptions(
                attempts=settings.max_retries + 1, http_status_codes=RETRYABLE_STATUS_CODES
            )
        self.client = genai.Client(
            api_key=settings.api_key or "unset",
            http_options=types.HttpOptions(
                base_url=settings.base_url or None,
                timeout=int(settings.timeout_seconds * 1000),  # milliseconds
                retry_options=retry_options,
            ),
        )

    def request_parts(self, request: CompletionRequest) -> tuple[list[types.Content], types.GenerateContentConfig]:
        system = "\n\n".join(message.content for message in request.messages if message.role == "system")
        contents: list[types.Content] = []
        # Gemini matches a functionResponse to its functionCall by the function's *name* (and, for several calls,
        # by order), not by our call id: a tool result takes the name of the ToolCall it answers in the
        # preceding assistant message - by id, else by position (Gemini's own calls often carry no id).
        calls_answered: tuple[ToolCall, ...] = ()
        results_since_calls = 0
        previous_role = ""
        for message in request.messages:
            if message.role == "system":
                continue
            merge, previous_role = previous_role == "tool", message.role
            if message.role == "tool":
                try:
                    response: Any = json.loads(message.content)
                except ValueError:
                    response = message.content
                part = types.Part.from_function_response(
                    name=tool_result_name(
                        calls=calls_answered, tool_call_id=message.tool_call_id, position=results_since_calls
                    ),
                    response=response if isinstance(response, dict) else {"result": response},
                )
                earlier_parts = contents[-1].parts if merge else None
                if earlier_parts is not None:  # the step's earlier results: one Content for all
                    earlier_parts.append(part)
                else:
                    contents.append(types.Content(role="user", parts=[part]))
                results_since_calls += 1
                continue
            if message.role == "assistant":
                calls_answered, results_since_calls = message.tool_calls, 0
            parts: list[types.Part] = []
            if message.role == "user":
                parts.extend(
                    types.Part(inline_data=types.Blob(mime_type=image.mime_type, data=image.data))
                    for image in message.images
                )
            parts += [types.Part(text=message.content)] if message.content else []
            parts.extend(
                types.Part(function_call=types.FunctionCall(name=call.name, args=call.arguments))
                for call in message.tool_calls
                if isinstance(call.arguments, dict)
            )
            if parts:
                contents.append(types.Content(role="model" if message.role == "assistant" else "user", parts=parts))
        config = types.GenerateContentConfig(
            system_instruction=system or None,
            max_output_tokens=request.max_output_tokens,
            temperature=request.temperature,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        if request.tools:
            config.tools = [
                types.Tool(
                    function_declarations=[
                        types.FunctionDeclaration(
                            name=tool.name, description=tool.description, parameters_json_schema=tool.parameters
                        )
                        for tool in request.tools
                    ]
                )
            ]
        if request.forced_tool:
            config.tool_config = types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=[request.forced_tool]
                )
            )
        return contents, config

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """A JSON-able view of the request, for the admin's "model input as sent"."""
        contents, config = self.request_parts(request)
        return {
            "model": request.model,
            "contents": [content.model_dump(mode="json", exclude_none=True) for content in contents],
            "config": config.model_dump(mode="json", exclude_none=True),
        }

    def complete(self, request: CompletionRequest) -> CompletionResult:
        # Built outside `call`: a ValueError while building the request is ours, not a provider's non-JSON body.
        contents, config = self.request_parts(request)
        return sdk_complete(
            call=lambda: self.client.models.generate_content(model=request.model, contents=contents, config=config),
            result_from=self.result_from,
            sdk_errors=SDK_ERRORS,
            map_error=map_gemini_error,
            provider=self.settings.name,
            secret=self.settings.api_key,
        )

    def stream(self, request: CompletionRequest, *, on_text: Callable[[str], None]) -> CompletionResult:
        provider = self.settings.name
        emit = text_emitter(on_text)
        contents, config = self.request_parts(request)
        parts: list[types.Part] = []
        seen_candidates = False
        finish_reason = usage = prompt_feedback = None
        with callback_errors_unwrapped():
            try:
                for chunk in self.client.models.generate_content_stream(
                    model=request.model, contents=contents, config=config
                ):
                    prompt_feedback = chunk.prompt_feedback or prompt_feedback
                    usage = chunk.usage_metadata or usage
                    if not chunk.candidates:
                        continue
                    seen_candidates = True
                    candidate = chunk.candidates[0]
                    finish_reason = candidate.finish_reason or finish_reason
                    for part in (candidate.content.parts if candidate.content else None) or []:
                        if part.text and not part.thought:
                            emit(part.text)
                        parts.append(part)
            except SDK_ERRORS as exc:
                raise without_secret(map_gemini_error(exc, provider=provider), secret=self.settings.api_key) from exc
            if seen_candidates and finish_reason is None:  # the stream ended without its last chunk
                raise incomplete_stream_error(provider=provider)
            response = types.GenerateContentResponse(
                candidates=[
                    types.Candidate(content=types.Content(role="model", parts=parts), finish_reason=finish_reason)
                ]
                if seen_candidates
                else None,
                usage_metadata=usage,
                prompt_feedback=prompt_feedback,
            )
            try:
                return self.result_from(response, provider=provider)
            except MALFORMED_ANSWER_ERRORS as exc:
                raise malformed_answer_error(provider=provider, error=exc) from exc

    def result_from(self, response, *, provider: str) -> CompletionResult:
        if not response.candidates:
            feedback = response.prompt_feedback
            reason = feedback.block_reason if feedback and feedback.block_reason else "no candidates"
            raise PermanentError(f"{provider}: the model returned no answer ({reason})", provider=provider)
        candidate = response.candidates[0]
        parts = (candidate.content.parts if candidate.content else None) or []
        texts = [part.text for part in parts if part.text and not part.thought]
        # Gemini's calls often carry no id; the tool loop needs one to pair each result with its call (and
        # request_parts finds the function's name again by it): number them in order.
        calls = tuple(
            ToolCall(
                name=part.function_call.name or "",
                arguments=dict(part.function_call.args or {}),
                id=part.function_call.id or f"gemini_call_{number}",
            )
            for number, part in enumerate((part for part in parts if part.function_call), start=1)
        )
        usage = response.usage_metadata
        finish = candidate.finish_reason
        return CompletionResult(
            text="".join(texts),
            tool_calls=calls,
            usage=Usage(
                input_tokens=(usage.prompt_token_count or 0) if usage else 0,
                output_tokens=(usage.candidates_token_count or 0) if usage else 0,
                # Part of prompt_token_count, as our Usage wants: the tokens read from a cached content (A7).
                cached_input_tokens=(usage.cached_content_token_count or 0) if usage else 0,
            ),
            raw_finish_reason=str(finish.value if hasattr(finish, "value") else finish or ""),
        )
