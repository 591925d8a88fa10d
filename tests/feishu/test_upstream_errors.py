"""Secrets are redacted from every stored upstream error text (issue 35): Feishu quotes what it refused, the app
secret included. Through the real path: a signed webhook event, lark-oapi, the worker (eager), the Feishu stub."""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import pytest

from agents.models import Turn
from feishu.models import OutboundDelivery
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


def test_u3_a_refused_delivery_quoting_the_app_secret_is_stored_redacted(feishu, make_feishu_bot, mocker):
    # given Feishu refuses every reply and quotes the app secret in its message
    bot = make_feishu_bot(reply_format="text")
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.stub.fail_next("reply", status=400, code=230002, msg=f"refused for {bot.feishu_app_secret}", times=20)
    mocker.patch("feishu.outbound.client.time.sleep")

    # when someone asks the bot
    feishu.say(bot, text="hello", mention=[bot])

    # then the turn's error and the delivery's error say why, without the secret
    turn = Turn.objects.get()
    assert (turn.status, turn.error) == ("delivery_failed", "Delivery refused: 230002 refused for [redacted]")
    assert list(OutboundDelivery.objects.filter(turn=turn).values_list("error", flat=True)) == [
        "230002: refused for [redacted]"
    ]
    assert feishu.stub.sent == []
