"""The admin front page: per bot health with its cause, windowed numbers that link to their lists, constant queries."""

from datetime import timedelta
from itertools import count

import pytest
from django.db import connection
from django.template import engines
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from agents.models import Bot, Turn
from console.dashboard.selectors import dashboard_rows
from feishu.models import FeishuConnection, FeishuCredentialCheck, InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement
from probe.services import probe_gate_run
from tests.admin.test_costs import summary_write
from tests.agents.factories import BotFactory, ThreadFactory
from tests.probe.test_gate import TRANSCRIPT
from tests.stubs.llm_servers import StubResponse, openai_error_body

pytestmark = pytest.mark.django_db

_sources = count()


def make_turn(bot: Bot, *, age: timedelta, status=Turn.Status.DELIVERED, usage=None, duration_ms=None) -> Turn:
    now = timezone.now()
    started = now - age
    turn = Turn.objects.create(
        bot=bot,
        thread=ThreadFactory(bot=bot),
        trigger=Turn.Trigger.MENTION,
        source_message_id=f"om_{next(_sources)}",
        status=status,
        usage=usage if usage is not None else {},
        started_at=started if duration_ms is not None else None,
        finished_at=started + timedelta(milliseconds=duration_ms) if duration_ms is not None else None,
    )
    Turn.objects.filter(pk=turn.pk).update(queued_at=now - age)
    return turn


def make_judgement(bot: Bot, *, age: timedelta, outcome: str, input_tokens=0, output_tokens=0) -> ProbeJudgement:
    judgement = ProbeJudgement.objects.create(
        bot=bot,
        gate_ran=True,
        cause="bench",
        outcome=outcome,
        activated=outcome == ProbeJudgement.Outcome.ACT,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
    ProbeJudgement.objects.filter(pk=judgement.pk).update(created_at=timezone.now() - age)
    return judgement


def row_of(response, bot: Bot):
    return next(row for row in response.context["dashboard_rows"] if row.bot.pk == bot.pk)


def test_the_dashboard_shows_a_bot_failing_closed_after_a_provider_failure_and_links_to_its_judgements(
    admin_client, make_judge, make_discuss_bot, llm_stub
):
    # given a discuss bot whose judge's provider answers 503 (a real gate run through the SDK)
    bot = make_discuss_bot(judge=make_judge("openai_chat"), feishu_app_id="cli_a", feishu_app_secret="s")
    llm_stub.enqueue("openai_chat", StubResponse(status=503, body=openai_error_body(message="down", type_="x")))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert result.activated is False
    healthy = BotFactory(name="Zeta", feishu_app_id="cli_b", feishu_app_secret="s")

    # when the admin opens the front page
    response = admin_client.get("/admin/")

    # then the bot is failing closed, its number links to exactly that judgement, the other bot is healthy
    assert response.status_code == 200
    row = row_of(response, bot)
    assert row.state == "failing_closed"
    assert [cause for cause, _label, _url in row.causes] == ["failing_closed"]
    assert row.numbers["failed_closed_24h"].value == 1
    assert row_of(response, healthy).state == "healthy"
    listed = admin_client.get(row.numbers["failed_closed_24h"].url)
    assert listed.status_code == 200
    assert [j.pk for j in listed.context["cl"].result_list] == list(
        ProbeJudgement.objects.filter(bot=bot).values_list("pk", flat=True)
    )
    assert row.causes[0][2] == row.numbers["failed_closed_24h"].url
    assert b'data-health="failing_closed"' in response.content
    # the stock admin's app list is still below the dashboard
    assert response.context["app_list"]


def test_numbers_count_only_their_window_and_split_primary_from_probe_tokens(admin_client):
    # given turns and judgements inside 24 h, inside 7 days, and older
    bot = BotFactory(feishu_app_id="cli_a", feishu_app_secret="s")
    make_turn(bot, age=timedelta(hours=1), usage={"input_tokens": 100, "output_tokens": 10})
    make_turn(bot, age=timedelta(hours=2), status=Turn.Status.SKIPPED, usage={})
    make_turn(bot, age=timedelta(days=3), usage={"input_tokens": 1000, "output_tokens": 100})
    make_turn(bot, age=timedelta(days=9), usage={"input_tokens": 99999, "output_tokens": 99999})
    make_judgement(bot, age=timedelta(hours=1), outcome="no_action", input_tokens=7, output_tokens=1)
    make_judgement(bot, age=timedelta(hours=3), outcome="act", input_tokens=5, output_tokens=2)
    make_judgement(bot, age=timedelta(days=2), outcome="no_action", input_tokens=50, output_tokens=20)
    make_judgement(bot, age=timedelta(days=8), outcome="error", input_tokens=9999, output_tokens=9999)

    # when
    row = row_of(admin_client.get("/admin/"), bot)

    # then
    numbers = {name: link.value for name, link in row.numbers.items()}
    assert numbers == {
        "turns_24h": 2,
        "replies_24h": 1,
        "failed_closed_24h": 0,
        "primary_in_24h": 100,
        "primary_out_24h": 10,
        "primary_in_7d": 1100,
        "primary_out_7d": 110,
        "probe_in_24h": 12,
        "probe_out_24h": 3,
        "probe_in_7d": 62,
        "probe_out_7d": 23,
    }
    assert {outcome: link.value for outcome, link in row.silences} == {
        "no_action": 1,
        "missing": 0,
        "malformed": 0,
        "error": 0,
        "disabled": 0,
    }
    assert row.state == "healthy"
    assert sum(bar.value for bar in row.token_bars) == 1100 + 110 + 62 + 23
    assert len(row.token_bars) == 7


def test_each_number_links_to_the_admin_list_of_the_rows_it_counts(admin_client):
    # given one reply and one failed turn in 24 h, one older reply
    bot = BotFactory(feishu_app_id="cli_a", feishu_app_secret="s")
    reply = make_turn(bot, age=timedelta(hours=1))
    failed = make_turn(bot, age=timedelta(hours=2), status=Turn.Status.FAILED)
    make_turn(bot, age=timedelta(days=2))
    other = BotFactory()
    make_turn(other, age=timedelta(hours=1))

    # when
    row = row_of(admin_client.get("/admin/"), bot)

    # then every linked list holds exactly the rows behind its number
    def listed(url: str) -> set[int]:
        response = admin_client.get(url)
        assert response.status_code == 200
        return {obj.pk for obj in response.context["cl"].result_list}

    assert listed(row.numbers["turns_24h"].url) == {reply.pk, failed.pk}
    assert listed(row.numbers["replies_24h"].url) == {reply.pk}
    assert row.state == "turns_failing"
    assert listed(row.causes[0][2]) == {failed.pk}


def test_a_turn_whose_delivery_failed_is_a_reply_and_flags_deliveries_failing(admin_client):
    # given a replied turn and one whose delivery failed
    bot = BotFactory(feishu_app_id="cli_a", feishu_app_secret="s")
    replied = make_turn(bot, age=timedelta(hours=1), status=Turn.Status.REPLIED)
    undelivered = make_turn(bot, age=timedelta(hours=1), status=Turn.Status.DELIVERY_FAILED)

    # when
    row = row_of(admin_client.get("/admin/"), bot)

    # then both are replies; the cause links to the undelivered turn
    assert row.numbers["replies_24h"].value == 2
    assert [cause for cause, _label, _url in row.causes] == ["deliveries_failing"]
    listed = admin_client.get(row.causes[0][2])
    assert [turn.pk for turn in listed.context["cl"].result_list] == [undelivered.pk]
    replies = admin_client.get(row.numbers["replies_24h"].url)
    assert {turn.pk for turn in replies.context["cl"].result_list} == {replied.pk, undelivered.pk}


def test_failed_deliveries_and_a_missing_feishu_app_are_health_causes(admin_client):
    # given a bot without Feishu credentials (and no event received) whose delivery failed
    bot = BotFactory()
    turn = make_turn(bot, age=timedelta(hours=1))
    OutboundDelivery.objects.create(
        bot=bot, turn=turn, chat_id="oc_1", uuid="u-1", content="hi", status=OutboundDelivery.Status.FAILED
    )

    # when
    row = row_of(admin_client.get("/admin/"), bot)

    # then
    assert [cause for cause, _label, _url in row.causes] == ["deliveries_failing", "feishu_not_set_up"]
    assert row.state == "deliveries_failing"
    assert row.causes[1][2] == f"/admin/agents/bot/{bot.pk}/setup/"  # the page that fixes it


def test_a_bot_without_a_feishu_app_that_receives_events_is_not_flagged(admin_client):
    """The demo bots: local webhook credentials only (replies recorded), events arriving. Issue 27, finding 1."""
    bot = BotFactory(feishu_verification_token="vt", feishu_encrypt_key="ek")
    InboundEvent.objects.create(
        bot=bot, event_id="e1", message_id="om_1", event_type="im.message.receive_v1", payload={}
    )

    row = row_of(admin_client.get("/admin/"), bot)

    assert (row.state, row.causes) == ("healthy", [])


def test_refused_credentials_and_a_down_long_connection_are_health_causes(admin_client):
    bot = BotFactory(feishu_app_id="cli_a", feishu_app_secret="s", feishu_event_mode="long_connection")
    FeishuCredentialCheck.objects.create(bot=bot, ok=False, checked_at=timezone.now(), detail="app secret invalid")
    FeishuConnection.objects.create(bot=bot, state=FeishuConnection.State.FAILED, last_error="refused")

    row = row_of(admin_client.get("/admin/"), bot)

    assert [cause for cause, _sentence, _url in row.causes] == ["credentials_refused", "connection_down"]
    assert "Feishu refused the app id and secret" in row.causes[0][1]


def test_a_provider_whose_last_test_failed_makes_its_bots_unhealthy(admin_client):
    bot = BotFactory(feishu_app_id="cli_a", feishu_app_secret="s")
    provider = bot.primary_model.provider
    provider.last_test_ok = False
    provider.last_test_at = timezone.now()
    provider.save()

    row = row_of(admin_client.get("/admin/"), bot)

    assert row.state == "provider_test_failed"
    assert row.causes[0][2] == f"/admin/agents/provider/{provider.pk}/change/"


def test_turn_latency_p50_and_p95_over_24_hours(admin_client):
    # given ten finished turns of 100..1000 ms in 24 h and a slow one a week ago
    bot = BotFactory()
    for step in range(1, 11):
        make_turn(bot, age=timedelta(hours=1), duration_ms=step * 100)
    make_turn(bot, age=timedelta(days=3), duration_ms=60_000)

    row = row_of(admin_client.get("/admin/"), bot)

    assert (row.latency_p50_ms, row.latency_p95_ms) == (500, 1000)


def test_queries_per_render_do_not_grow_with_bots_or_rows(admin_client):
    # given one bot with one row of each kind
    first = BotFactory()
    make_turn(first, age=timedelta(hours=1), usage={"input_tokens": 1, "output_tokens": 1}, duration_ms=5)
    make_judgement(first, age=timedelta(hours=1), outcome="error")
    with CaptureQueriesContext(connection) as small:
        assert admin_client.get("/admin/").status_code == 200

    # when there are six bots and many more rows over the week
    for _ in range(5):
        bot = BotFactory()
        for age in (timedelta(hours=1), timedelta(days=2), timedelta(days=5)):
            make_turn(bot, age=age, usage={"input_tokens": 3, "output_tokens": 4}, duration_ms=50)
            make_judgement(bot, age=age, outcome="no_action")
            make_judgement(bot, age=age, outcome="act")
            summary_write(bot, model="gpt-4o", provider="", tokens=(10, 5), age=age)  # the third cost kind (K3)
    with CaptureQueriesContext(connection) as large:
        assert admin_client.get("/admin/").status_code == 200

    # then the render makes the same number of queries
    assert len(large) == len(small)


def test_the_dashboard_needs_a_staff_login():
    response = Client().get("/admin/")

    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/login/?next=/admin/"


def test_a_site_without_bots_still_renders_the_front_page(admin_client):
    response = admin_client.get("/admin/")

    assert response.status_code == 200
    assert response.context["dashboard_rows"] == []
    assert b"No bots yet." in response.content


# The chart loops the template tags replaced, kept here as the reference the tags' markup must equal.
CHART_LOOPS = (
    "{% for bar in token_bars %}"
    '<rect class="bar" x="{{ bar.x }}" y="{{ bar.y }}" width="8" height="{{ bar.height }}">'
    "<title>{{ bar.title }}</title></rect>{% endfor %}|"
    "{% for x, day, segments in gate_bars %}{% for segment in segments %}"
    '<rect class="o-{{ segment.name }}" x="{{ x }}" y="{{ segment.y }}" width="8" height="{{ segment.height }}">'
    "<title>{{ day.isoformat }}: {{ segment.value }} {{ segment.name }}</title></rect>{% endfor %}{% endfor %}"
)
CHART_TAGS = "{% load dashboard_charts %}{% token_bar_rects token_bars %}|{% gate_bar_rects gate_bars %}"


@pytest.mark.parametrize("language", ["en", "zh-hans", "ja"])
def test_the_chart_tags_write_the_markup_of_the_template_loops_they_replaced(language):
    bot = BotFactory()
    for age_days, usage in ((0, {"input_tokens": 12_345, "output_tokens": 678}), (3, {"input_tokens": 9})):
        make_turn(bot, age=timedelta(days=age_days, minutes=5), usage=usage)
    for _ in range(3):
        make_judgement(
            bot,
            age=timedelta(minutes=5),
            outcome=ProbeJudgement.Outcome.NO_ACTION,
            input_tokens=1_500,
            output_tokens=20,
        )
    make_judgement(bot, age=timedelta(minutes=5), outcome=ProbeJudgement.Outcome.ERROR)
    (row,) = dashboard_rows(now=timezone.now())
    context = {"token_bars": row.token_bars, "gate_bars": row.gate_bars}
    engine = engines["django"]
    with translation.override(language):
        loops = engine.from_string(CHART_LOOPS).render(context)
        tags = engine.from_string(CHART_TAGS).render(context)
    assert tags == loops
    assert loops.count("<rect") == 7 + 2


def test_the_app_list_is_in_the_hubs_order_in_every_language(admin_client):
    """Issue 27: in zh-hans and ja the stock sort by translated name put "Axes" first."""
    for language in ("en", "zh-hans", "ja"):
        admin_client.cookies["django_language"] = language
        labels = [app["app_label"] for app in admin_client.get("/admin/").context["app_list"]]
        assert labels[:5] == ["agents", "feishu", "threadcontext", "probe", "playground"], language
        assert labels.index("axes") > labels.index("auth")
