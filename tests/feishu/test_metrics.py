"""A10: /metrics after a scripted conversation holds the expected series, and refuses a scrape without the token
when one is set. Real path: webhook -> lark-oapi -> worker (eager) -> the Feishu stub; the discuss judge is the
local rules model."""

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.models import Bot
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.models import FeishuConnection
from tests.agents.factories import LLMModelFactory, ProviderFactory
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_after_a_scripted_conversation(
    client, feishu, make_feishu_bot, settings, django_capture_on_commit_callbacks
):
    # given: two mentions of one bot in one chat (the second reply waits for the chat's send budget), a discuss
    # bot whose local judge sees a group message, and a long connection that is up
    settings.AMUX_METRICS_TOKEN = ""
    planner = make_feishu_bot(slug="planner")
    judge = LLMModelFactory(provider=ProviderFactory(kind="local_rules"), name="rules", supports_tool_calls=True)
    critic = make_feishu_bot(
        slug="critic",
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=judge,
    )
    Workspace.objects.create(bot_profile=critic.slug, chat_id="oc_team")
    FeishuConnection.objects.create(bot=planner, state=FeishuConnection.State.CONNECTED, reconnects=2)
    feishu.say(planner, text="draft a plan", mention=[planner], chat_id="oc_team")
    feishu.say(planner, text="and a second one", mention=[planner], chat_id="oc_team")
    feishu.say(critic, text="lunch at noon, everyone", chat_id="oc_team")
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))

    # when
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")

    # then
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = _samples(response.content.decode())
    assert samples[("amux_turns_24h", (("bot", "planner"), ("status", "delivered")))] == 2
    assert samples[("amux_deliveries_24h", (("bot", "planner"), ("status", "sent")))] == 2
    outcomes = {labels: value for (name, labels), value in samples.items() if name == "amux_gate_outcomes_24h"}
    assert sum(outcomes.values()) == 1 and all(dict(labels)["bot"] == "critic" for labels in outcomes)
    assert samples[("amux_feishu_connection_state", (("bot", "planner"), ("state", "connected")))] == 1
    assert samples[("amux_feishu_connection_state", (("bot", "planner"), ("state", "failed")))] == 0
    assert samples[("amux_feishu_connection_reconnects", (("bot", "planner"),))] == 2
    assert ("amux_turn_latency_seconds", (("bot", "planner"), ("quantile", "0.95"))) in samples
    assert not any(name == "amux_inbound_events_open" for name, _ in samples)  # every event processed
    assert samples[("amux_queue_depth", (("queue", "turns"),))] == 0
    assert samples[("amux_send_budget_waits_total", ())] >= 1  # the second reply to oc_team waited


def test_metrics_refuse_a_scrape_without_the_token_when_one_is_set(client, settings):
    settings.AMUX_METRICS_TOKEN = "scrape-token-0123456789"

    anonymous = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    wrong = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer nope")
    right = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-token-0123456789")

    assert (anonymous.status_code, wrong.status_code, right.status_code) == (403, 403, 200)
    assert b"bearer token" in anonymous.content
    assert b"amux_queue_depth" in right.content


def test_metrics_without_a_token_answer_only_the_allowed_addresses(client, settings):
    settings.AMUX_METRICS_TOKEN = ""
    settings.AMUX_METRICS_ALLOWED_IPS = ["10.0.0.5"]

    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.5").status_code == 200
