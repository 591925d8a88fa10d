"""What every adapter's `stream` shares: the caller's `on_text` kept apart from the provider's errors.

An adapter maps the SDK's exceptions to `LLMError`s, and some of those are ordinary Python types (a malformed
answer surfaces as AttributeError/KeyError, see agents.llm.errors.MALFORMED_ANSWER_ERRORS). `on_text` runs
inside that mapping, so an exception it raises is wrapped on the way out of it and unwrapped at the edge of
`stream`: the caller gets its own exception back unchanged, never dressed up as the provider's failure.
"""

import contextlib
import re
from collections.abc import Callable, Iterator


class CallbackError(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def text_emitter(on_text: Callable[[str], None]) -> Callable[[str], None]:
    """`on_text` for non-empty deltas only, with its exceptions wrapped (see the module docstring)."""

    def emit(delta: str | None) -> None:
        if not delta:
            return
        try:
            on_text(delta)
        except Exception as exc:
            raise CallbackError(exc) from exc

    return emit


@contextlib.contextmanager
def callback_errors_unwrapped() -> Iterator[None]:
    try:
        yield
    except CallbackError as wrapped:
        raise wrapped.error from None


def word_pieces(text: str) -> list[str]:
    """`text` word by word, each word with the whitespace after it; the pieces join back to `text`."""
    return re.findall(r"^\s+|\S+\s*", text)
