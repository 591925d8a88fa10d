"""The webhook while the database is away (found by the fault suite's PostgreSQL restart, tests/faults): reading the
bot fails like storing the event does, and both answer 503, which Feishu retries, never a 500 with a traceback."""

import pytest
from django.db import OperationalError

from agents.models import Bot
from feishu.inbound import webhook_bots
from feishu.models import InboundEvent

pytestmark = pytest.mark.django_db


def test_the_bot_unreadable_is_a_503_and_stores_nothing(feishu, make_feishu_bot, mocker):
    # given: the bot is not cached in this process, and the database cuts the connection (a fast restart)
    bot = make_feishu_bot()
    webhook_bots._bots.clear()
    mocker.patch.object(Bot.objects, "filter", side_effect=OperationalError("terminating connection"))
    # when
    response, _ = feishu.say(bot, text="hello")
    # then
    assert response.status_code == 503
    assert response.json() == {"message": "Temporarily unavailable.", "extra": {}}
    mocker.stopall()
    assert not InboundEvent.objects.exists()


def test_after_the_outage_the_resent_event_is_stored_once(feishu, make_feishu_bot, mocker):
    # given: the first push met the outage
    bot = make_feishu_bot()
    webhook_bots._bots.clear()
    mocker.patch.object(Bot.objects, "filter", side_effect=OperationalError("connection refused"))
    first, payload = feishu.say(bot, text="hello")
    mocker.stopall()
    # when: Feishu resends the same event
    again = feishu.post(bot, payload)
    # then
    assert (first.status_code, again.status_code) == (503, 200)
    assert InboundEvent.objects.filter(bot=bot).count() == 1
