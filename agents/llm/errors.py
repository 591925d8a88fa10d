"""Helpers every adapter uses to turn an HTTP failure into one of our `LLMError` types, and the one error path
of every adapter's `complete()` (`sdk_complete`).

One mapping for all providers, so "429 → rate limited" or "503 → transient" cannot drift between adapters:
401/403 → AuthenticationError; 429 → RateLimitedError (with retry-after from the headers, or Gemini's
RetryInfo); 408/409/5xx/529 → TransientError; 400-class overflow (decided per provider) →
ContextOverflowError; any other 4xx → PermanentError.
"""

import email.utils
import re
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import httpx
import httpx2

from agents.llm.base import (
    AuthenticationError,
    CompletionResult,
    ContextOverflowError,
    LLMError,
    PermanentError,
    RateLimitedError,
    TransientError,
)
from core.redaction import redacted

MAX_ERROR_MESSAGE_CHARS = 500
# A provider's error text is kept this long until its secret is redacted; only then is it cut to
# MAX_ERROR_MESSAGE_CHARS (issue 30, finding 4: a key near the cut survived in part).
MAX_RAW_ERROR_MESSAGE_CHARS = 20_000
# The openai SDK sends through httpx; anthropic and google-genai through httpx2 (pinned by them). A stream read
# raw by an SDK (anthropic, google-genai) lets a connection dropped mid-body through as these.
TIMEOUT_ERRORS: tuple[type[Exception], ...] = (httpx.TimeoutException, httpx2.TimeoutException)
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpx2.TransportError)
TRANSIENT_STATUS_CODES = frozenset({408, 409, 425, 500, 502, 503, 504, 529})


def short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_MESSAGE_CHARS else text[: MAX_ERROR_MESSAGE_CHARS - 1] + "…"


def retry_after_seconds(headers: Mapping[str, str] | None, *, body: Any = None) -> float | None:
    """Seconds to wait, from `retry-after-ms`, `retry-after` (seconds or an HTTP date) or Gemini's RetryInfo."""
    if headers:
        lowered = {str(name).lower(): str(value) for name, value in headers.items()}
        if "retry-after-ms" in lowered:
            try:
                return max(float(lowered["retry-after-ms"]) / 1000, 0.0)
            except ValueError:
                pass
        if "retry-after" in lowered:
            value = lowered["retry-after"].strip()
            try:
                return max(float(value), 0.0)
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(value) if value else None
                if parsed is not None:
                    return max(parsed.timestamp() - time.time(), 0.0)
    # Gemini puts it in the body: {"error": {"details": [{"@type": ".../google.rpc.RetryInfo", "retryDelay": "13s"}]}}
    if isinstance(body, dict):
        error = body.get("error", body)
        for detail in (error.get("details") or []) if isinstance(error, dict) else []:
            delay = isinstance(detail, dict) and detail.get("retryDelay")
            match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(delay or ""))
            if match:
                return float(match.group(1))
    return None


def error_for_status(
    *,
    status_code: int | None,
    message: str,
    provider: str,
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    is_overflow: bool = False,
) -> LLMError:
    message = " ".join(str(message).split())[:MAX_RAW_ERROR_MESSAGE_CHARS] or f"HTTP {status_code}"
    if is_overflow:
        return ContextOverflowError(message, provider=provider, status_code=status_code)
    if status_code in (401, 403):
        return AuthenticationError(message, provider=provider, status_code=status_code)
    if status_code == 429:
        retry_after = retry_after_seconds(headers, body=body)
        return RateLimitedError(message, retry_after_seconds=retry_after, provider=provider, status_code=status_code)
    if status_code is None or status_code in TRANSIENT_STATUS_CODES or status_code >= 500:
        return TransientError(message, provider=provider, status_code=status_code)
    return PermanentError(message, provider=provider, status_code=status_code)


def without_secret(error: LLMError, *, secret: str) -> LLMError:
    """`error` with `secret` (the provider's API key, in any encoding core.redaction knows) redacted in its
    message, then cut to MAX_ERROR_MESSAGE_CHARS, in place.

    Some OpenAI-compatible gateways quote the key they refused in their error body; our message becomes a
    turn's error (admin, turns API) and a log field, where no secret may appear. Redaction runs before the cut.
    """
    error.message = short(redacted(error.message, secrets=[secret]))
    error.args = (error.message,)
    return error


def stainless_sdk_error(
    exc: Exception, *, sdk: ModuleType, provider: str, describe_status: Callable[[Any], tuple[str, bool]]
) -> LLMError:
    """The mapping the `openai` and `anthropic` SDKs share (one code generator, one exception tree).

    `describe_status(exc)` reads an `APIStatusError`'s body in that API's own shape: (message, is it an overflow).
    """
    if isinstance(exc, sdk.APIStatusError) and exc.status_code >= 400:
        message, is_overflow = describe_status(exc)
        return error_for_status(
            status_code=exc.status_code,
            message=f"{provider}: {message}",
            provider=provider,
            headers=exc.response.headers,
            body=exc.body,
            is_overflow=exc.status_code in (400, 413) and is_overflow,
        )
    if isinstance(exc, sdk.APITimeoutError):  # before APIConnectionError, its base class
        return error_for_status(status_code=None, message=f"{provider}: request timed out", provider=provider)
    if isinstance(exc, sdk.APIConnectionError):
        return error_for_status(status_code=None, message=f"{provider}: connection failed: {exc}", provider=provider)
    if isinstance(exc, sdk.APIResponseValidationError):
        return non_json_error(provider=provider, body=exc.body)
    if isinstance(exc, sdk.APIError):
        # An error event inside a 200 stream (OpenAI: a `data:` object holding "error"; Anthropic: `event:
        # error`, which the SDK raises as a status error of the 200): mapped by its error type.
        message, is_overflow = describe_status(exc)
        status_code = stream_error_status(exc.body)
        return error_for_status(
            status_code=status_code,
            message=f"{provider}: {message}",
            provider=provider,
            body=exc.body,
            is_overflow=status_code in (400, 413) and is_overflow,
        )
    return error_for_status(status_code=400, message=f"{provider}: {short(str(exc))}", provider=provider)


# The HTTP status each documented error type comes with when it is not in a stream (Anthropic's error types;
# OpenAI's error `type`/`code` values), so an error event mid-stream maps as the same error would before it.
ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}
# An error event of a type we do not know, after the stream began: the provider failed mid-answer.
UNKNOWN_STREAM_ERROR_STATUS = 500


def stream_error_status(body: Any) -> int:
    """The status an in-stream error event's body stands for (its `code`, else its `type`)."""
    error = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(error, dict):
        return UNKNOWN_STREAM_ERROR_STATUS
    for key in ("code", "type"):
        status = ERROR_TYPE_STATUS.get(str(error.get(key) or ""))
        if status:
            return status
    if error.get("code") in OVERFLOW_ERROR_CODES:
        return 400
    return UNKNOWN_STREAM_ERROR_STATUS


OVERFLOW_ERROR_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})


def transport_error(exc: Exception, *, provider: str) -> LLMError:
    """A timeout or a connection failure below the SDK (`exc` one of TRANSPORT_ERRORS): transient."""
    if isinstance(exc, TIMEOUT_ERRORS):
        return error_for_status(status_code=None, message=f"{provider}: request timed out", provider=provider)
    return error_for_status(status_code=None, message=f"{provider}: connection failed: {exc}", provider=provider)


def incomplete_stream_error(*, provider: str) -> TransientError:
    """A stream that ended without the API's closing event: the answer is cut off, another try may finish it."""
    return TransientError(f"{provider}: the stream ended before the answer was complete", provider=provider)


def non_json_error(*, provider: str, body: object) -> TransientError:
    """A 2xx answer that is not the JSON object the API documents (a proxy's HTML page, a truncated body)."""
    return TransientError(
        f"{provider}: the provider answered with a non-JSON body: {short(str(body))[:120]}", provider=provider
    )


# What reading an answer of the wrong shape raises: the SDKs build responses without validation, so a field
# the API documents but the server left out is None or missing only when it is used.
MALFORMED_ANSWER_ERRORS: tuple[type[Exception], ...] = (AttributeError, TypeError, KeyError, ValueError, IndexError)


def malformed_answer_error(*, provider: str, error: Exception) -> PermanentError:
    """A JSON answer without the shape the API documents (an incompatible "compatible" server): not retried."""
    return PermanentError(
        f"{provider}: the provider's answer does not have the shape its API documents "
        f"({type(error).__name__}: {short(str(error))[:120]})",
        provider=provider,
    )


def any_response(response: Any) -> bool:
    return True


def sdk_complete(
    *,
    call: Callable[[], Any],
    result_from: Callable[..., CompletionResult],
    sdk_errors: tuple[type[Exception], ...],
    map_error: Callable[..., LLMError],
    provider: str,
    secret: str,
    is_answer: Callable[[Any], bool] = any_response,
) -> CompletionResult:
    """One non-streamed call, the same way for every adapter: `call()` makes the SDK's request, and each way it can
    fail becomes one of our errors.

    - an SDK error (one of `sdk_errors`) is mapped by `map_error(exc, provider=...)`, the API key masked in it;
    - a response `is_answer` refuses (an SDK that hands back a proxy's page as text) is a non-JSON answer;
    - reading the answer (`result_from(response, provider=...)`) with the wrong shape is a malformed answer.
    Anything else (a bug of ours while building the request) propagates unchanged.
    """
    try:
        response = call()
    except sdk_errors as exc:
        raise without_secret(map_error(exc, provider=provider), secret=secret) from exc
    if not is_answer(response):
        raise non_json_error(provider=provider, body=response)
    try:
        return result_from(response, provider=provider)
    except MALFORMED_ANSWER_ERRORS as exc:
        raise malformed_answer_error(provider=provider, error=exc) from exc
