"""A7: cost in money. Scripted turns run through the real OpenAI SDK against the LLM stub (known token counts,
cached input included) and scripted judgements; the API, the dashboard and the bot page show the figures
computed here by hand from the models' prices."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import Provider, Turn
from agents.pricing import Prices, tokens_cost
from probe.models import ProbeJudgement
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.clients import token_client
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db

# Per million tokens, USD. By hand:
#   turn 1: 1000 in of which 400 cached, 200 out = 600 x 2.50 + 400 x 1.25 + 200 x 10.00 = 4000 / 1e6 = 0.004000
#   turn 2: 3000 in, 500 out                     = 3000 x 2.50 + 500 x 10.00             = 12500 / 1e6 = 0.012500
#   judgement today: 2000 in, 100 out (judge)    = 2000 x 0.15 + 100 x 0.60              = 360 / 1e6 = 0.000360
#   judgement 10 days ago: 1000 in, 0 out        = 1000 x 0.15                           = 150 / 1e6 = 0.000150
#   judgement by an unpriced model: 70 tokens, counted as unpriced
PRIMARY_24H = "0.016500"
PROBE_24H, PROBE_30D = "0.000360", "0.000510"


@pytest.fixture
def scripted_usage(llm_stub, django_capture_on_commit_callbacks):
    owner = UserFactory(username="owner", is_staff=True, is_superuser=True)
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=5
    )
    primary = LLMModelFactory(
        provider=provider,
        name="gpt-4o",
        input_price_per_mtok=Decimal("2.50"),
        cached_input_price_per_mtok=Decimal("1.25"),
        output_price_per_mtok=Decimal("10.00"),
    )
    judge = LLMModelFactory(input_price_per_mtok=Decimal("0.15"), output_price_per_mtok=Decimal("0.60"))
    bot = BotFactory(slug="planner", name="Planner", owner=owner, primary_model=primary)
    thread = ThreadFactory(bot=bot)
    client = token_client(owner)
    for tokens in (
        {"input_tokens": 1000, "cached_tokens": 400, "output_tokens": 200},
        {"input_tokens": 3000, "output_tokens": 500},
    ):
        llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="ok", **tokens)))
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "plan it"}, format="json")
        assert response.status_code == 202
    judgement = {"bot": bot, "gate_ran": True, "cause": "ran", "outcome": "no_action", "activated": False}
    ProbeJudgement.objects.create(**judgement, model=judge, input_tokens=2000, output_tokens=100)
    old = ProbeJudgement.objects.create(**judgement, model=judge, input_tokens=1000, output_tokens=0)
    ProbeJudgement.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    ProbeJudgement.objects.create(**judgement, model=LLMModelFactory(), input_tokens=50, output_tokens=20)
    BotFactory(slug="foreign", owner=UserFactory(username="other"))  # another owner's bot, not in owner's usage
    return {"owner": owner, "bot": bot}


def test_cost_rule_prices_cached_input_at_its_own_price():
    prices = Prices(currency="USD", input=Decimal("2.50"), cached_input=Decimal("1.25"), output=Decimal("10"))
    assert tokens_cost(prices, input_tokens=1000, output_tokens=200, cached_input_tokens=400) == Decimal("0.004000")
    no_cached_price = Prices(currency="USD", input=Decimal("2.50"), cached_input=None, output=None)
    assert tokens_cost(no_cached_price, input_tokens=1000, output_tokens=200, cached_input_tokens=400) == Decimal(
        "0.002500"
    )


def test_usage_api_gives_the_hand_computed_cost(scripted_usage):
    assert [turn.status for turn in Turn.objects.all()] == ["delivered", "delivered"]
    assert Turn.objects.order_by("pk").first().usage["cached_input_tokens"] == 400

    response = token_client(UserFactory(username="other")).get("/api/v1/usage/")
    assert [row["bot"] for row in response.json()["bots"]] == ["foreign"]  # owner-scoped
    body = token_client(scripted_usage["owner"]).get("/api/v1/usage/").json()

    planner = next(row for row in body["bots"] if row["bot"] == "planner")
    day = planner["windows"]["24h"]
    assert day["primary"] == {"amounts": {"USD": PRIMARY_24H}, "unpriced_tokens": 0}
    assert day["probe"] == {"amounts": {"USD": PROBE_24H}, "unpriced_tokens": 70}
    assert day["total"]["amounts"] == {"USD": "0.016860"}
    assert planner["windows"]["30d"]["probe"]["amounts"] == {"USD": PROBE_30D}
    assert planner["windows"]["7d"]["probe"]["amounts"] == {"USD": PROBE_24H}
    assert [entry["probe"]["amounts"] for entry in planner["days"]] == [{"USD": "0.000150"}, {"USD": PROBE_24H}]


def test_dashboard_and_bot_page_show_the_cost(scripted_usage, client):
    client.force_login(scripted_usage["owner"])

    dashboard = client.get("/admin/").content.decode()
    bot_page = client.get(f"/admin/agents/bot/{scripted_usage['bot'].pk}/change/").content.decode()

    assert 'data-cost="planner-24h">0.0169 USD' in dashboard
    for window, primary, probe in (("24h", "0.0165", "0.0004"), ("30d", "0.0165", "0.0005")):
        assert f'data-cost="{window}-primary">{primary} USD' in bot_page
        assert f'data-cost="{window}-probe">{probe} USD' in bot_page
