"""The one interface every LLM provider adapter implements, and the errors adapters map SDK errors to.

Adapters (agents/llm/<kind>.py) translate a `CompletionRequest` into their SDK's call and the SDK's
response or exception into a `CompletionResult` or one of the `LLMError` subclasses below.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ImageInput:
    """An image for a vision model, rendered by each adapter in its API's own wire format.

    The caller decides whether a model gets images (LLMModel.supports_vision); adapters render what they are
    given. `name` is for people (the admin's "model input as sent" shows it instead of the bytes).
    """

    mime_type: str  # image/png, image/jpeg, image/gif, image/webp
    data: bytes
    name: str = ""

    def __repr__(self) -> str:  # never print the bytes
        return f"ImageInput(mime_type={self.mime_type!r}, name={self.name!r}, size={len(self.data)})"


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str
    # For role="assistant" messages that called tools, and role="tool" results answering them.
    tool_calls: tuple["ToolCall", ...] = ()
    tool_call_id: str = ""
    # Only a role="user" message's images are sent; adapters ignore them on other roles.
    images: tuple[ImageInput, ...] = ()


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str  # parsed JSON object, or the raw string when it did not parse
    id: str = ""


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    # Of input_tokens, those the provider read from its prompt cache (billed at the cached-input price, A7).
    cached_input_tokens: int = 0


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    # Name of the tool the model must call (forced tool choice), or "" for none forced.
    forced_tool: str = ""
    max_output_tokens: int = 1024
    temperature: float | None = None


@dataclass(frozen=True)
class CompletionResult:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    raw_finish_reason: str = ""


class LLMError(Exception):
    """Base of the errors a provider call can end in; `retryable` says whether a later try may succeed."""

    retryable = False

    def __init__(self, message: str, *, provider: str = "", status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status_code = status_code


class ContextOverflowError(LLMError):
    """The input does not fit the model's context window."""


class RateLimitedError(LLMError):
    retryable = True

    def __init__(self, message: str, *, retry_after_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_seconds = retry_after_seconds


class AuthenticationError(LLMError):
    """Bad or missing API key, or no permission for the model."""


class TransientError(LLMError):
    """Timeouts, connection failures, 5xx, overloaded and non-JSON answers: worth another try later."""

    retryable = True


class PermanentError(LLMError):
    """A call that will not succeed as it is: a bad request, an unknown model, a JSON answer without the shape
    the API documents (agents.llm.errors.malformed_answer_error)."""


TextCallback = Callable[[str], None]


class LLMClient(Protocol):
    def complete(self, request: CompletionRequest) -> CompletionResult: ...

    def stream(self, request: CompletionRequest, *, on_text: TextCallback) -> CompletionResult:
        """The same answer as `complete`, through the SDK's streaming API: `on_text(delta)` is called with each
        piece of text as it arrives, in order; the result's text is all the deltas joined. A failure, before or
        after some deltas, raises the same `LLMError` types `complete` raises. An exception raised by `on_text`
        propagates unchanged (it is the caller's, not the provider's)."""
        ...
