"""Fixtures of the probe tests: a clean config cache, judge models pointed at the local LLM stub."""

import pytest
from django.core.cache import cache

from agents.models import Bot, Provider, UserProfile
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (the bridge's harness)

MODEL_NAMES = {
    "openai_chat": "gpt-4o-mini",
    "openai_responses": "gpt-4.1-mini",
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
    "local_rules": "rules",
}


@pytest.fixture(autouse=True)
def _fresh_gate_config_cache():
    cache.clear()
    yield
    cache.clear()


def stub_base_url(kind: str, stub) -> str:
    # OpenAI-style base URLs include the version prefix; the Anthropic and Gemini SDKs add their own.
    return stub.url("/v1") if kind.startswith("openai") else stub.url()


@pytest.fixture
def make_judge(llm_stub):
    """A judge model of a provider kind, reachable at the stub (max_retries=0: one call is one request)."""

    def make(kind: str = "openai_chat", **model_fields):
        provider = ProviderFactory(
            kind=kind,
            base_url="" if kind == Provider.Kind.LOCAL_RULES else stub_base_url(kind, llm_stub),
            api_key="sk-judge-secret-0001",
            timeout_seconds=5.0,
            max_retries=0,
        )
        fields = {"supports_tool_calls": True, "context_window": 128000, **model_fields}
        return LLMModelFactory(provider=provider, name=MODEL_NAMES[kind], **fields)

    return make


@pytest.fixture
def make_discuss_bot():
    def make(*, mode: str = Bot.ProbeMode.MODEL, judge=None, title_model=None, **fields) -> Bot:
        bot = BotFactory(
            name="Planner",
            group_reply_mode=Bot.GroupReplyMode.DISCUSS,
            discuss_probe_mode=mode,
            discuss_probe_model=judge,
            **fields,
        )
        if title_model is not None:
            UserProfile.objects.create(user=bot.owner, title_model=title_model)
        return Bot.objects.get(pk=bot.pk)  # as the bridge loads it: no related rows cached

    return make
