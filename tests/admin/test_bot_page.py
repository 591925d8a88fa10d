"""The Bot page: the absolute webhook URL to paste into Feishu, what `inherit` resolves to now, recent activity."""

from datetime import timedelta

import pytest

from agents.models import Bot, UserProfile
from tests.admin.test_dashboard import make_judgement, make_turn
from tests.agents.factories import BotFactory, LLMModelFactory

pytestmark = pytest.mark.django_db


def test_the_bot_page_shows_the_absolute_webhook_url(admin_client, settings):
    settings.ALLOWED_HOSTS = ["hub.example.com"]
    bot = BotFactory(slug="planner")

    response = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/", HTTP_HOST="hub.example.com")

    assert response.status_code == 200
    assert response.context["bot_overview"].webhook_url == "http://hub.example.com/feishu/webhook/planner/"
    assert b'value="http://hub.example.com/feishu/webhook/planner/"' in response.content


def test_inherit_shows_the_owners_title_model_it_resolves_to_now(admin_client):
    # given a bot inheriting its judge from its owner's title model
    bot = BotFactory(discuss_probe_mode=Bot.ProbeMode.INHERIT)
    title_model = LLMModelFactory(name="judge-mini", supports_tool_calls=True, context_window=128000)
    UserProfile.objects.create(user=bot.owner, title_model=title_model)

    # when
    overview = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").context["bot_overview"]

    # then
    assert (overview.probe_mode, overview.probe_source, overview.probe_cause) == ("inherit", "inherited", "")
    assert overview.probe_model == f"judge-mini ({title_model.provider.name})"


def test_inherit_without_a_title_model_shows_why_there_is_no_judge(admin_client):
    bot = BotFactory(discuss_probe_mode=Bot.ProbeMode.INHERIT)

    overview = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").context["bot_overview"]

    assert overview.probe_model == ""
    assert overview.probe_cause != ""
    assert (
        f'data-probe-cause="{overview.probe_cause}"'.encode()
        in admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content
    )


def test_the_bot_page_lists_its_own_newest_turns_and_judgements_linked(admin_client):
    # given two bots with activity
    bot = BotFactory()
    older = make_turn(bot, age=timedelta(hours=5))
    newer = make_turn(bot, age=timedelta(hours=1))
    judgement = make_judgement(bot, age=timedelta(hours=1), outcome="no_action")
    make_turn(BotFactory(), age=timedelta(hours=1))

    # when
    overview = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").context["bot_overview"]

    # then only its own rows, newest first, each linked to its change page
    assert [(turn.pk, url) for turn, url in overview.turns] == [
        (newer.pk, f"/admin/agents/turn/{newer.pk}/change/"),
        (older.pk, f"/admin/agents/turn/{older.pk}/change/"),
    ]
    assert [(j.pk, url) for j, url in overview.judgements] == [
        (judgement.pk, f"/admin/probe/probejudgement/{judgement.pk}/change/")
    ]
    assert overview.turns_url == f"/admin/agents/turn/?bot__id__exact={bot.pk}"


def test_an_unknown_bot_is_the_admins_own_redirect_not_a_500(admin_client):
    response = admin_client.get("/admin/agents/bot/999999/change/")

    assert response.status_code == 302
