"""A tool's answer made fit for a model (L3): storable text, secrets redacted, size-capped. Pure functions."""

import json
from collections.abc import Iterable
from typing import Any

from core.redaction import RedactionTally, redacted
from core.text import storable_text

TRUNCATION_MARKER = "\n…[truncated: {kept} of {total} characters]"


def capped(text: str, *, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    marker = TRUNCATION_MARKER.format(kept=max_chars, total=len(text))
    return text[: max(max_chars - len(marker), 0)] + marker


def content_block_text(block: Any) -> str:
    """One MCP content block as text: text as is, everything else as a label (models get no binary here)."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        return f"[{kind}: {getattr(block, 'mime_type', '') or 'unknown type'}]"
    if kind == "resource_link":
        return f"[resource: {getattr(block, 'uri', '')}]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        return str(text) if text is not None else f"[resource: {getattr(resource, 'uri', '')}]"
    return f"[{kind or 'unknown'} content]"


def tool_output_text(
    *,
    blocks: Iterable[Any],
    structured: Any,
    secrets: Iterable[str],
    max_chars: int,
    tally: RedactionTally | None = None,
) -> str:
    """The text the model gets for a tool's answer, in this order: join, make storable, redact, cap.

    Redaction runs before the cap so a secret cut in half at the edge can never survive as a prefix. A `tally`
    (the turn's) redacts with its secrets and counts what it masked.
    """
    parts = [content_block_text(block) for block in blocks]
    if not any(parts) and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False, default=str)]
    text = storable_text("\n".join(part for part in parts if part))
    clean = tally(text) if tally is not None else redacted(text, secrets=secrets)
    return capped(clean, max_chars=max_chars)
