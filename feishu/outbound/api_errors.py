"""What a refused or failed Feishu call raises, for every outbound call of the bridge (feishu/outbound/client.py).

One exception type, `FeishuApiError`, carries Feishu's own code and the HTTP status, and says whether a later try
may succeed (`is_retryable`), so each caller decides the same way: a turn's delivery is retried, a refusal is
final. This module does not import lark-oapi: a caller can name these types at import time (an `except`, an
annotation) without loading the SDK, which the calls themselves load lazily (feishu/__init__.py).
"""

# Feishu's rate-limit answers (99991400 comes with HTTP 429 and `x-ogw-ratelimit-reset`); an HTTP 429 is one too.
RATE_LIMIT_CODES = frozenset({99991400, 230020, 11232, 11233, 1000004, 1000005})
# Ours, not Feishu's: the resource is larger than the caller accepts.
MESSAGE_RESOURCE_TOO_LARGE_CODE = -413


class FeishuApiError(Exception):
    """A Feishu call that did not succeed: `code` is Feishu's (None for a transport failure), `http_status` the
    answer's status when there was one."""

    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status

    @property
    def is_rate_limited(self) -> bool:
        return self.code in RATE_LIMIT_CODES or self.http_status == 429

    @property
    def is_retryable(self) -> bool:
        """A later try may succeed: rate limits, transport failures (no code), Feishu's own 5xx."""
        return self.is_rate_limited or self.code is None or (self.http_status or 0) >= 500


class ResourceTooLarge(FeishuApiError):
    """The resource is larger than the caller accepts; it was not read (not retryable)."""

    def __init__(self, *, size: int | None, max_bytes: int) -> None:
        shown = "unknown" if size is None else str(size)
        super().__init__(f"resource of {shown} bytes exceeds {max_bytes} bytes", code=MESSAGE_RESOURCE_TOO_LARGE_CODE)
        self.size = size
        self.max_bytes = max_bytes
