"""What an adapter needs to know about its provider, without the Django model (adapters stay ORM-free)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    kind: str
    base_url: str  # "" = the SDK's default endpoint
    api_key: str
    timeout_seconds: float
    # Retries the SDK makes inside one attempt (see agents/llm/registry.py for why this is not zero).
    max_retries: int
    # local_rules only: the pause between streamed words, so a demo shows the answer being written.
    stream_word_delay_seconds: float = 0.0

    def __repr__(self) -> str:  # never print the key
        return f"ProviderSettings(name={self.name!r}, kind={self.kind!r}, base_url={self.base_url!r})"
