"""`llm_client_for(model=...)`: the one way code gets a provider client, in production and in tests alike.

Tests point a `Provider.base_url` at a local stub server; nothing else differs, so the SDK call path a test
exercises is the production one.

SDK retries (`Provider.max_retries`, default 2) are deliberately kept on, and small: the SDKs retry a
connection reset, a 408/409/429/5xx within one attempt after a short backoff and honour `retry-after` /
`x-should-retry`, which absorbs the blips that are common with hosted models without re-running a turn.
Longer outages are the turn task's business: it retries `TransientError`/`RateLimitedError` with
exponential backoff and a cap, and records every attempt in `Turn.retry_history`. Worst case per attempt is
therefore timeout × (max_retries + 1); the probe's judge and stub tests set max_retries=0 so one call is one
request. google-genai never retries unless asked: it gets the same count as `HttpRetryOptions.attempts`.
"""

import functools

from agents.llm.anthropic_messages import AnthropicClient
from agents.llm.base import LLMClient, PermanentError
from agents.llm.gemini import GeminiClient
from agents.llm.local_rules import LocalRulesClient
from agents.llm.openai_chat import OpenAIChatClient
from agents.llm.openai_responses import OpenAIResponsesClient
from agents.llm.settings import ProviderSettings
from agents.models import LLMModel, Provider

ADAPTERS: dict[str, type] = {
    Provider.Kind.OPENAI_CHAT: OpenAIChatClient,
    Provider.Kind.OPENAI_RESPONSES: OpenAIResponsesClient,
    Provider.Kind.ANTHROPIC: AnthropicClient,
    Provider.Kind.GEMINI: GeminiClient,
    Provider.Kind.LOCAL_RULES: LocalRulesClient,
}


def provider_settings(*, provider: Provider) -> ProviderSettings:
    return ProviderSettings(
        name=provider.name,
        kind=provider.kind,
        base_url=provider.base_url or "",
        api_key=provider.api_key or "",
        timeout_seconds=float(provider.timeout_seconds),
        max_retries=int(provider.max_retries),
    )


@functools.lru_cache(maxsize=64)
def client_for_settings(settings: ProviderSettings) -> LLMClient:
    """SDK clients hold connection pools: one per distinct provider configuration, per process."""
    try:
        adapter = ADAPTERS[settings.kind]
    except KeyError:
        raise PermanentError(f"Unknown provider kind {settings.kind!r}.", provider=settings.name) from None
    return adapter(settings)


def llm_client_for(*, model: LLMModel) -> LLMClient:
    return client_for_settings(provider_settings(provider=model.provider))


def request_as_sent(*, client: LLMClient, request) -> dict:
    """The JSON body the adapter sends for `request` (what the admin shows as "model input as sent")."""
    body = getattr(client, "request_body", None)
    return body(request) if body else {}


CONNECTION_TEST_PROMPT = "Reply with the single word: pong"


def llm_connection_test(*, model: LLMModel) -> tuple[str, int]:
    """One tiny call to `model`: (its answer, milliseconds). Raises the provider's LLMError on failure."""
    import time

    from agents.llm.base import ChatMessage, CompletionRequest

    request = CompletionRequest(
        model=model.name,
        messages=(ChatMessage(role="user", content=CONNECTION_TEST_PROMPT),),
        max_output_tokens=16,
    )
    started = time.monotonic()
    result = llm_client_for(model=model).complete(request)
    answer = result.text or ", ".join(call.name for call in result.tool_calls)
    return answer, int((time.monotonic() - started) * 1000)
