"""A7: cost in money. Scripted turns run through the real OpenAI SDK against the LLM stub (known token counts,
cached input included) and scripted judgements; the API, the dashboard and the bot page show the figures
computed here by hand from the models' prices."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Bot, Provider, Turn
from agents.pricing import Prices, tokens_cost
from console.dashboard.costs import bot_costs
from probe.models import ProbeJudgement
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.clients import token_client
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem
from threadcontext.services.summaries import SummarySource, context_summary_record

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


# Summaries (K3), per million tokens as above. By hand:
#   today, by the judge model (provider recorded): 4000 in, 300 out = 4000 x 0.15 + 300 x 0.60 = 780 / 1e6 = 0.000780
#   10 days ago, gpt-4o named without its provider (stored before providers were): 1000 in, 100 out
#                                                  = 1000 x 2.50 + 100 x 10.00 = 3500 / 1e6 = 0.003500
#   today, by a model the hub does not know: 20 + 10 tokens, counted as unpriced
#   another owner's bot's summary: not the planner's
SUMMARY_24H, SUMMARY_30D = "0.000780", "0.004280"


def summary_write(bot, *, model: str, provider: str, tokens: tuple[int, int], age=timedelta(0)):
    source = SummarySource(
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        chat_id="oc_chat",
        root_msg_id="om_root",
        previous_text="",
        previous_covers=(),
        items=((1, "Ann", "we ship friday"),),
    )
    item = context_summary_record(
        source=source,
        summary="Ann: ship friday.",
        model_name=model,
        provider_name=provider,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )
    ThreadContextItem.objects.filter(pk=item.pk).update(created_at=timezone.now() - age)


@pytest.fixture
def scripted_summaries(scripted_usage):
    planner = scripted_usage["bot"]
    judge = ProbeJudgement.objects.order_by("pk").first().model
    summary_write(planner, model=judge.name, provider=judge.provider.name, tokens=(4000, 300))
    summary_write(planner, model="gpt-4o", provider="", tokens=(1000, 100), age=timedelta(days=10))
    summary_write(planner, model="unknown-model", provider="nobody", tokens=(20, 10))
    summary_write(Bot.objects.get(slug="foreign"), model=judge.name, provider=judge.provider.name, tokens=(9000, 900))
    return scripted_usage


def test_summaries_cost_beside_primary_and_probe_in_the_api(scripted_summaries):
    body = token_client(scripted_summaries["owner"]).get("/api/v1/usage/").json()

    planner = next(row for row in body["bots"] if row["bot"] == "planner")
    day = planner["windows"]["24h"]
    assert day["summary"] == {"amounts": {"USD": SUMMARY_24H}, "unpriced_tokens": 30}
    assert day["primary"]["amounts"] == {"USD": PRIMARY_24H}  # the other kinds unchanged
    assert day["total"] == {"amounts": {"USD": "0.017640"}, "unpriced_tokens": 100}
    assert planner["windows"]["7d"]["summary"]["amounts"] == {"USD": SUMMARY_24H}
    assert planner["windows"]["30d"]["summary"]["amounts"] == {"USD": SUMMARY_30D}
    assert [entry["summary"]["amounts"] for entry in planner["days"]] == [{"USD": "0.003500"}, {"USD": SUMMARY_24H}]


def test_summaries_cost_on_the_dashboard_and_the_bot_page(scripted_summaries, client):
    client.force_login(scripted_summaries["owner"])

    dashboard = client.get("/admin/").content.decode()
    bot_page = client.get(f"/admin/agents/bot/{scripted_summaries['bot'].pk}/change/").content.decode()

    assert 'data-cost="planner-24h">0.0176 USD' in dashboard
    assert 'data-cost-summary="planner-24h">summaries 0.0008 USD' in dashboard
    for window, summary in (("24h", "0.0008"), ("7d", "0.0008"), ("30d", "0.0043")):
        assert f'data-cost="{window}-summary">{summary} USD' in bot_page


def test_the_summary_cost_query_reads_the_type_and_time_index():
    bot = BotFactory(slug="indexed")
    with CaptureQueriesContext(connection) as queries:
        bot_costs(now=timezone.now(), bots=[bot])
    (sql,) = [query["sql"] for query in queries.captured_queries if "threadcontext_threadcontextitem" in query["sql"]]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "contextitem_type_created" in plan, plan
        else:  # on PostgreSQL a tiny table may be read whole; the index must at least be usable
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}")
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "contextitem_type_created" in plan, plan
