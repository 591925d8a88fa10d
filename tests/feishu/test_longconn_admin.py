"""G6: the bot's long-connection state, read-only on its admin page; the event mode is chosen there."""

from datetime import UTC, datetime

import pytest

from agents.models import Bot
from feishu.models import FeishuConnection
from tests.agents.forms import bot_admin_form_data

pytestmark = pytest.mark.django_db


def test_g6_bot_page_shows_the_connection_state_read_only(admin_client, make_feishu_bot):
    # given
    bot = make_feishu_bot(feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    FeishuConnection.objects.create(
        bot=bot,
        state=FeishuConnection.State.CONNECTED,
        connected_since=datetime(2026, 12, 1, 20, 0, 0, tzinfo=UTC),
        last_event_at=datetime(2026, 12, 1, 20, 5, 0, tzinfo=UTC),
        events_received=7,
        reconnects=2,
        last_error="ConnectionClosedError: no close frame received or sent",
        last_error_at=datetime(2026, 12, 1, 20, 1, 0, tzinfo=UTC),
        hostname="hub-1",
        pid=4242,
    )
    # when
    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()
    # then
    assert (
        "Connected; since 2026-12-01 20:00:00 UTC; last event 2026-12-01 20:05:00 UTC; 7 event(s), 2 reconnect(s); "
        "on hub-1 (pid 4242); last error at 2026-12-01 20:01:00 UTC: ConnectionClosedError: no close frame "
        "received or sent" in page
    )
    assert 'name="feishu_connection_state"' not in page  # shown, not editable


def test_g6_a_long_connection_bot_without_a_connection_says_what_to_run(admin_client, make_feishu_bot):
    bot = make_feishu_bot(feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()
    assert "Not connected yet: is `manage.py feishu_connect` (started by `make run`) running?" in page


def test_g6_choosing_long_connection_in_the_admin_saves_the_event_mode(admin_client, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    assert bot.feishu_event_mode == "webhook"
    # when
    response = admin_client.post(
        f"/admin/agents/bot/{bot.pk}/change/", bot_admin_form_data(bot, feishu_event_mode="long_connection")
    )
    # then
    assert response.status_code == 302
    bot.refresh_from_db()
    assert bot.feishu_event_mode == "long_connection"
    assert FeishuConnection.objects.count() == 0  # the admin never writes the state; feishu_connect does
