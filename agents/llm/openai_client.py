"""The openai SDK client of an OpenAI-compatible provider: the chat and responses adapters and the voice
transcription (agents.llm.transcription) share it, so one provider's key, base URL, timeout and retries apply alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.llm.settings import ProviderSettings

if TYPE_CHECKING:
    import openai


def openai_client(settings: ProviderSettings) -> openai.OpenAI:
    # Imported here, not at the top: the transcription module imports this one at startup, and the openai SDK
    # costs 1-3 s of CPU to import (agents.llm.registry imports the adapters on first use for the same reason).
    import openai

    return openai.OpenAI(
        api_key=settings.api_key or "unset",
        base_url=settings.base_url or None,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
    )
