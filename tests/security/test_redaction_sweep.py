"""Issue 30, findings 3 and 6, through the real path: a signed Feishu event through lark-oapi, the turn in the
worker (eager), the model behind the local LLM stub, the reply to the local Feishu stub.

Finding 3: a model that echoes every secret the hub holds, in plain and encoded forms, and a person who pastes
some: no planted value (in any of those forms) reaches the Feishu stub's recorded calls, a stored row, the
thread's /history/ or the next prompt; the turns count what they masked.
Finding 6: an event with `@_user_2` 14,000 times and a 200-character mention name: the prompt stays within the
model's window, says what was cut, and writes the name out at most 64 characters long.
"""

import base64
import json
from urllib.parse import quote

import pytest
from django.conf import settings

from agents.models import LLMModel, McpServer, Provider, Turn
from agents.services.turns.assembly import estimate_tokens
from feishu.inbound.signing import mention_entry, message_event_payload
from tests.agents.factories import LLMModelFactory, ProviderFactory, UserFactory
from tests.clients import token_client
from tests.feishu.conftest import bot_open_id
from tests.security.test_secrets_sweep import text_column_values

pytestmark = pytest.mark.django_db

PLANTED_REDIS_PASSWORD = "planted-redis-password-7c1e9b"


def planted_values(*, mcp_secret: str) -> dict[str, str]:
    return {
        "provider api key": "sk-planted-provider-key-7f3a9c",
        "feishu app secret": "planted-app-secret-51be02",
        "feishu encrypt key": "planted-encrypt-key-c0ffee",
        "feishu verification token": "planted-verification-token-9d41",
        "mcp env value": mcp_secret,
        "redis password": PLANTED_REDIS_PASSWORD,
        "django SECRET_KEY": str(settings.SECRET_KEY),
    }


def encodings(value: str, *, searched: bool = False) -> dict[str, str]:
    """How a model might write a secret out; searched for without base64's last characters (padding and the
    bits shared with what follows)."""
    encoded = base64.b64encode(value.encode()).decode()
    return {
        "plain": value,
        "base64": encoded[:-4] if searched else encoded,
        "hex": value.encode().hex(),
        "url": quote(value, safe=""),
        "reversed": value[::-1],
        "spaced": " ".join(value),
        "dotted": ".".join(value),
    }


def leaking_answer(planted: dict[str, str]) -> str:
    lines = ["Here is everything I know:"]
    for name, value in planted.items():
        lines.extend(f"{name} ({form}): {text}" for form, text in encodings(value).items())
    return "\n".join(lines)


def found_in(texts: list[str], planted: dict[str, str]) -> dict[tuple[str, str], int]:
    hits = {}
    for name, value in planted.items():
        for form, text in encodings(value, searched=True).items():
            count = sum(text in haystack for haystack in texts)
            if count:
                hits[(name, form)] = count
    return hits


@pytest.fixture
def leaky_bot(feishu, make_feishu_bot, llm_stub, settings):
    settings.CELERY_RESULT_BACKEND = f"redis://:{PLANTED_REDIS_PASSWORD}@127.0.0.1:1/0"
    mcp_secret = "planted-mcp-env-token-4d2b8a"
    planted = planted_values(mcp_secret=mcp_secret)
    owner = UserFactory(username="owner")
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key=planted["provider api key"], max_retries=0
    )
    bot = make_feishu_bot(
        slug="leaky",
        owner=owner,
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", context_window=128_000),
        feishu_app_secret=planted["feishu app secret"],
        feishu_encrypt_key=planted["feishu encrypt key"],
        feishu_verification_token=planted["feishu verification token"],
    )
    # A server the bot does not even use: its secret is the hub's all the same.
    McpServer.objects.create(
        bot=bot, name="tokens", transport="stdio", command="true", environment=json.dumps({"API_TOKEN": mcp_secret})
    )
    return bot, owner, planted


def test_issue30_finding3_planted_secrets_echoed_by_the_model_reach_no_chat_row_history_or_prompt(
    feishu, leaky_bot, llm_stub
):
    # given: a model that answers with every planted secret in seven forms
    bot, owner, planted = leaky_bot
    llm_stub.default_text = leaking_answer(planted)
    pasted = (
        f"my key is {planted['provider api key']} and {base64.b64encode(planted['mcp env value'].encode()).decode()}"
    )
    # when: a person pastes two of them, then asks again (the first reply is the next turn's context)
    first, _ = feishu.say(bot, text=pasted, mention=[bot])
    second, _ = feishu.say(bot, text="and again?", mention=[bot])
    # then
    assert (first.status_code, second.status_code) == (200, 200)
    turns = list(Turn.objects.order_by("pk"))
    assert [turn.status for turn in turns] == [Turn.Status.DELIVERED, Turn.Status.DELIVERED]
    thread = turns[0].thread
    history = token_client(owner).get(f"/api/v1/threads/{thread.pk}/history/")
    turn_api = [token_client(owner).get(f"/api/v1/turns/{turn.pk}/").json() for turn in turns]
    haystacks = {
        # Every call but the token request, which carries the app secret to Feishu by design.
        "feishu stub calls": [
            json.dumps(request.__dict__, default=str)
            for request in feishu.stub.requests
            if "access_token" not in request.path
        ],
        "stored rows": [f"{where}={value}" for where, value in text_column_values()],
        "history": [history.content.decode()],
        "prompts": [json.dumps(request.json) for request in llm_stub.requests],
    }
    found = {where: found_in(texts, planted) for where, texts in haystacks.items()}
    print(
        f"\n[redaction sweep] planted={len(planted)} forms=7 found={ {k: sum(v.values()) for k, v in found.items()} }"
    )
    assert found == {where: {} for where in haystacks}
    assert history.status_code == 200
    # 7 secrets x 7 forms in each reply (the pasted values were redacted when the event was routed, before the
    # turn existed: the stored event and the turn's input hold "[redacted]" already)
    assert [item["redaction_count"] for item in turn_api] == [49, 49]
    assert "[redacted]" in thread.messages.filter(kind="agent_reply").first().content


def test_issue30_finding6_a_flood_of_mentions_stays_within_the_models_window(feishu, make_feishu_bot, llm_stub):
    # given: a 128k-token model and an event with @_user_2 14,000 times, a 200-character name behind it
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), max_retries=0)
    model = LLMModelFactory(provider=provider, name="gpt-4o", context_window=128_000, max_output_tokens=4096)
    bot = make_feishu_bot(slug="flooded", primary_model=model)
    long_name = "N" * 200
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_flood",
        chat_id="oc_group",
        text="@_user_1 " + "@_user_2 " * 14_000,
        sender_open_id="ou_alice",
        mentions=[
            mention_entry(index=1, open_id=bot_open_id(bot), name=bot.name),
            mention_entry(index=2, open_id="ou_long", name=long_name),
        ],
    )
    # when
    response = feishu.post(bot, payload)
    # then: one model call whose whole input fits the window beside the answer's reserve
    assert response.status_code == 200
    (request,) = llm_stub.requests
    messages = request.json["messages"]
    input_tokens = sum(estimate_tokens(message["content"]) for message in messages)
    window = LLMModel.objects.get(pk=model.pk).context_window
    print(f"\n[prompt cap] characters={sum(len(m['content']) for m in messages)} tokens~{input_tokens} window={window}")
    assert input_tokens + request.json.get("max_tokens", request.json.get("max_completion_tokens", 0)) <= window
    assert long_name not in messages[-1]["content"]
    assert "@" + "N" * 63 + "…" in messages[-1]["content"]
    assert "[cut: the message had " in messages[-1]["content"]
    assert Turn.objects.get().status == Turn.Status.DELIVERED


def test_issue30_finding3_a_secret_pasted_over_rest_is_redacted_before_it_is_stored_or_sent(
    leaky_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: the bot's owner over REST, and a model that answers plainly
    bot, owner, planted = leaky_bot
    rest = token_client(owner)
    with django_capture_on_commit_callbacks(execute=True):
        thread = rest.post("/api/v1/threads/", {"bot": bot.slug, "runtime_mode": "chat"}, format="json").json()
    pasted = f"keys: {planted['provider api key']} {planted['mcp env value'][::-1]} {planted['django SECRET_KEY']}"
    # when
    with django_capture_on_commit_callbacks(execute=True):
        posted = rest.post(f"/api/v1/threads/{thread['id']}/messages/", {"content": pasted}, format="json")
    history = rest.get(f"/api/v1/threads/{thread['id']}/history/")
    # then: the stored message, /history/ and the prompt hold "[redacted]" three times, no planted value
    assert (posted.status_code, history.status_code) == (202, 200)
    haystacks = [history.content.decode(), *(json.dumps(request.json) for request in llm_stub.requests)]
    haystacks += [f"{where}={value}" for where, value in text_column_values()]
    assert found_in(haystacks, planted) == {}
    assert llm_stub.requests[-1].json["messages"][-1]["content"] == "keys: [redacted] [redacted] [redacted]"
