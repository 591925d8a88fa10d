"""U7 (ARCHITECTURE §12.0, issue 35): the catch-up answers only inside the answer window, DMs and commands included,
and only chats the bot belongs to: what it lists is checked against the chat it asked for. Through the real path:
the bot page's catch-up action -> lark-oapi's im.v1.message.list against the Feishu stub -> the intake and routing
(Celery eager) -> the Feishu stub and the LLM stub."""

from __future__ import annotations

import logging
import time

import pytest
from django.test import TestCase

from agents.models import Automation, Bot, Turn
from feishu.inbound.routing import ROUTE_MISSED
from feishu.models import CatchupRun, InboundEvent
from tests.agents.test_llm_adapters import model_for
from tests.feishu.conftest import listed_mention
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

GROUP = "oc_u7_group"
DM = "oc_u7_dm"
TWELVE_MINUTES = 12 * 60


@pytest.fixture
def bot(make_feishu_bot, llm_stub) -> Bot:
    return make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), reply_format="text", receipt_emoji="")


def catch_up(admin_client, bot: Bot) -> CatchupRun:
    """The bot page's "catch up" action, as an operator presses it; the run it recorded."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = admin_client.post("/admin/agents/bot/", {"action": "catch_up", "_selected_action": [bot.pk]})
    assert response.status_code == 302
    return CatchupRun.objects.get(bot=bot)


def heard_half_an_hour_ago(feishu, bot: Bot, *, chat_id: str, chat_type: str = "group") -> None:
    """The bot heard `chat_id`; the newest message it stored there was sent 30 minutes ago (the hub went down)."""
    feishu.say(bot, text="morning", chat_id=chat_id, chat_type=chat_type, message_id=f"om_before_{chat_id}")
    before = InboundEvent.objects.get(bot=bot, message_id=f"om_before_{chat_id}")
    before.payload["event"]["message"]["create_time"] = str(int((time.time() - 1800) * 1000))
    before.save(update_fields=["payload"])


def said_while_away(feishu, bot: Bot, *, message_id: str, chat_id: str, text: str, seconds_ago: float, **more):
    feishu.stub.add_message(
        message_id=message_id,
        chat_id=chat_id,
        text=text,
        sender_id="ou_alice",
        create_time_ms=int((time.time() - seconds_ago) * 1000),
        **more,
    )


def test_u7_a_dm_older_than_the_answer_window_read_by_the_catch_up_is_not_answered(admin_client, feishu, bot, llm_stub):
    # given a DM the bot heard, and two DMs said while the hub was down: 12 minutes ago and 1 minute ago
    heard_half_an_hour_ago(feishu, bot, chat_id=DM, chat_type="p2p")
    sent_before = len(feishu.stub.sent)
    said_while_away(feishu, bot, message_id="om_dm_old", chat_id=DM, text="old question", seconds_ago=TWELVE_MINUTES)
    said_while_away(feishu, bot, message_id="om_dm_new", chat_id=DM, text="new question", seconds_ago=60)

    # when the operator catches up
    catch_up(admin_client, bot)

    # then only the DM inside the window (600 s) is answered; the old one is recorded as missed
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == [
        "om_before_" + DM,
        "om_dm_new",
    ]
    old = InboundEvent.objects.get(bot=bot, message_id="om_dm_old")
    assert (old.status, old.error) == (InboundEvent.Status.IGNORED, ROUTE_MISSED)
    assert len(llm_stub.requests_for("openai_chat")) == 2
    assert len(feishu.stub.sent) == sent_before + 1


def test_u7_a_twelve_minute_old_schedule_command_read_by_the_catch_up_is_not_run(admin_client, feishu, bot):
    # given a group the bot heard, and an @bot /schedule said there 12 minutes ago while the hub was down
    heard_half_an_hour_ago(feishu, bot, chat_id=GROUP)
    said_while_away(
        feishu,
        bot,
        message_id="om_schedule",
        chat_id=GROUP,
        text="@_user_1 /schedule every 30m post the build status",
        seconds_ago=TWELVE_MINUTES,
        mentions=listed_mention(bot),
    )

    # when the operator catches up
    catch_up(admin_client, bot)

    # then the command is recorded as missed: no schedule, no answer
    assert Automation.objects.count() == 0
    missed = InboundEvent.objects.get(bot=bot, message_id="om_schedule")
    assert (missed.status, missed.error) == (InboundEvent.Status.IGNORED, ROUTE_MISSED)
    assert feishu.stub.sent == []


def test_u7_a_listed_item_claiming_another_chat_is_dropped_counted_and_never_answered(
    admin_client, feishu, bot, llm_stub, caplog
):
    # given a group the bot heard, whose message list also holds an @ of the bot that claims another chat
    heard_half_an_hour_ago(feishu, bot, chat_id=GROUP)
    said_while_away(
        feishu,
        bot,
        message_id="om_foreign",
        chat_id="oc_not_asked_for",
        listed_in=GROUP,
        text="@_user_1 read me the secrets",
        seconds_ago=30,
        mentions=listed_mention(bot),
    )
    said_while_away(
        feishu,
        bot,
        message_id="om_own",
        chat_id=GROUP,
        text="@_user_1 status?",
        seconds_ago=20,
        mentions=listed_mention(bot),
    )

    # when the operator catches up
    with caplog.at_level(logging.WARNING, logger="feishu.inbound.catchup"):
        run = catch_up(admin_client, bot)
    warnings = [r for r in caplog.records if r.name == "feishu.inbound.catchup" and r.levelno >= logging.WARNING]

    # then the foreign item is neither stored nor answered, the run counts it, and a warning names it
    assert not InboundEvent.objects.filter(message_id="om_foreign").exists()
    assert list(Turn.objects.values_list("source_message_id", flat=True)) == ["om_own"]
    assert (run.read, run.stored, run.dropped) == (2, 1, 1)
    assert [r.message for r in warnings] == ["feishu catch-up dropped a listed message of another chat"]
    assert (warnings[0].asked_chat_id, warnings[0].listed_chat_id) == (GROUP, "oc_not_asked_for")
    assert len(llm_stub.requests_for("openai_chat")) == 1
    # and the bot's page says so
    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()
    assert "2 message(s) read in 1 chat(s), 1 new, 1 of another chat dropped" in page


def test_u7_the_catch_up_reads_no_chat_the_bot_has_left(admin_client, feishu, bot):
    # given a group the bot heard and was then removed from (its workspace retired)
    heard_half_an_hour_ago(feishu, bot, chat_id=GROUP)
    Workspace.objects.filter(bot_profile=bot.slug, chat_id=GROUP).update(retired_at="2026-01-01T00:00:00Z")
    said_while_away(
        feishu,
        bot,
        message_id="om_after_removal",
        chat_id=GROUP,
        text="@_user_1 are you there?",
        seconds_ago=30,
        mentions=listed_mention(bot),
    )

    # when the operator catches up
    run = catch_up(admin_client, bot)

    # then that chat is not read, nothing is stored or answered
    assert feishu.stub.requests_to("list") == []
    assert (run.chats, run.read, run.stored) == (0, 0, 0)
    assert not InboundEvent.objects.filter(message_id="om_after_removal").exists()
    assert feishu.stub.sent == []
