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

import base64
import functools
import importlib
import logging
import sys
import threading
import time

from django.conf import settings as django_settings
from django.db import DatabaseError
from django.db import connections as db_connections

from agents.llm.base import ChatMessage, CompletionRequest, LLMClient, PermanentError
from agents.llm.settings import ProviderSettings
from agents.models import LLMModel, Provider

logger = logging.getLogger(__name__)

# The adapter of each provider kind, imported on first use: importing a provider SDK costs 1-3 s of CPU and tens
# of MB (openai, anthropic, google-genai; issue 11), and a process uses one kind or none - a management command
# that never calls a model should not pay for all three.
ADAPTERS: dict[str, str] = {
    Provider.Kind.OPENAI_CHAT: "agents.llm.openai_chat.OpenAIChatClient",
    Provider.Kind.OPENAI_RESPONSES: "agents.llm.openai_responses.OpenAIResponsesClient",
    Provider.Kind.ANTHROPIC: "agents.llm.anthropic_messages.AnthropicClient",
    Provider.Kind.GEMINI: "agents.llm.gemini.GeminiClient",
    Provider.Kind.LOCAL_RULES: "agents.llm.local_rules.LocalRulesClient",
}


_adapter_import_lock = threading.Lock()


def adapter_class(kind: str) -> type:
    """The adapter class of a provider kind, importing its SDK on first use.

    An import interrupted half-way (a Celery soft time limit fires inside it, a KeyboardInterrupt) leaves
    behind the modules it finished, some holding references to the half-run ones Python then drops: the next
    import would succeed on that mix and every later call in the process would fail. So every module the failed
    attempt added is dropped, and the next attempt imports the whole SDK afresh. Workers avoid the case by
    importing the configured kinds at boot (`provider_adapters_preload`).
    """
    module_name, _, class_name = ADAPTERS[kind].rpartition(".")
    with _adapter_import_lock:  # one import at a time, so a failure drops only its own modules
        before = set(sys.modules)
        try:
            module = importlib.import_module(module_name)  # a dictionary look-up once imported
        except BaseException:
            for name in set(sys.modules) - before:
                sys.modules.pop(name, None)
            raise
    return getattr(module, class_name)


def provider_kinds_configured() -> list[str]:
    """The kinds of the enabled providers, each once (what a worker will call)."""
    kinds = Provider.objects.filter(is_enabled=True).values_list("kind", flat=True).distinct()
    return sorted(kind for kind in kinds if kind in ADAPTERS)


def provider_adapters_preload() -> list[str]:
    """Import the adapters (and SDKs) of the configured provider kinds now; returns the kinds loaded.

    A worker calls this as it boots, before the pool forks: an SDK import then never runs inside a task, where a
    soft time limit could interrupt it, and the children share its pages. A database not reachable or not
    migrated yet loads nothing: the first turn then imports its adapter, as before.
    """
    try:
        kinds = provider_kinds_configured()
    except DatabaseError as error:
        logger.warning("provider adapters not preloaded", extra={"error_type": type(error).__name__})
        return []
    finally:
        db_connections.close_all()  # the pool's children must not share this process's database connection
    for kind in kinds:
        adapter_class(kind)
    return kinds


def provider_settings(*, provider: Provider) -> ProviderSettings:
    return ProviderSettings(
        name=provider.name,
        kind=provider.kind,
        base_url=provider.base_url or "",
        api_key=provider.api_key or "",
        timeout_seconds=float(provider.timeout_seconds),
        max_retries=int(provider.max_retries),
        stream_word_delay_seconds=(
            django_settings.AMUX_LOCAL_RULES_STREAM_DELAY_MS / 1000
            if provider.kind == Provider.Kind.LOCAL_RULES
            else 0.0
        ),
    )


@functools.lru_cache(maxsize=64)
def client_for_settings(settings: ProviderSettings) -> LLMClient:
    """SDK clients hold connection pools: one per distinct provider configuration, per process."""
    try:
        adapter = adapter_class(settings.kind)
    except KeyError:
        raise PermanentError(f"Unknown provider kind {settings.kind!r}.", provider=settings.name) from None
    return adapter(settings)


def llm_client_for(*, model: LLMModel) -> LLMClient:
    return client_for_settings(provider_settings(provider=model.provider))


def request_as_sent(*, client: LLMClient, request: CompletionRequest) -> dict:
    """The JSON body the adapter sends for `request` (what the admin shows as "model input as sent").

    Image bytes are replaced by a label ("[image: name, 1234 bytes]"): this record is stored on the turn, and
    the database never holds a resource's bytes (issue 12).
    """
    body = getattr(client, "request_body", None)
    if not body:
        return {}
    sent = body(request)
    labels = {
        # google-genai serialises bytes as URL-safe base64, the others as standard base64
        encoded: f"[image: {image.name or image.mime_type}, {len(image.data)} bytes]"
        for message in request.messages
        for image in message.images
        if image.data
        for encoded in (
            base64.b64encode(image.data).decode("ascii"),
            base64.urlsafe_b64encode(image.data).decode("ascii"),
        )
    }
    return without_image_data(sent, labels=labels) if labels else sent


def without_image_data(value, *, labels: dict[str, str]):
    """`value` (a JSON body) with every string holding an image's base64 (alone or in a data URI) replaced."""
    if isinstance(value, dict):
        return {key: without_image_data(item, labels=labels) for key, item in value.items()}
    if isinstance(value, list):
        return [without_image_data(item, labels=labels) for item in value]
    if isinstance(value, str):
        for encoded, label in labels.items():
            if encoded in value:
                return label
    return value


CONNECTION_TEST_PROMPT = "Reply with the single word: pong"


def llm_connection_test(*, model: LLMModel) -> tuple[str, int]:
    """One tiny call to `model`: (its answer, milliseconds). Raises the provider's LLMError on failure."""
    request = CompletionRequest(
        model=model.name,
        messages=(ChatMessage(role="user", content=CONNECTION_TEST_PROMPT),),
        max_output_tokens=16,
    )
    started = time.monotonic()
    result = llm_client_for(model=model).complete(request)
    answer = result.text or ", ".join(call.name for call in result.tool_calls)
    return answer, int((time.monotonic() - started) * 1000)
