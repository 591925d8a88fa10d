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

    def __repr__(self) -> str:  # never print the key
        return f"ProviderSettings(name={self.name!r}, kind={self.kind!r}, base_url={self.base_url!r})"
