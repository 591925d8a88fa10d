"""D2: a catch-up is recorded before its task is queued, so a broker that refuses or loses the task, or a worker
that dies with it, never loses the gap: the inbound sweeper queues the run again and it reads from the start its
trigger fixed. The bot's page lists the latest runs. Through the real path: lark-oapi against the Feishu REST stub."""

import time
from datetime import timedelta

import pytest
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerDown

from agents.models import Turn
from agents.services.turns import broker_redelivery_seconds
from feishu import tasks as feishu_tasks
from feishu.inbound.catchup_runs import CATCHUP_MAX_SWEEPS, catchup_enqueue, catchups_sweep
from feishu.models import CatchupRun, InboundEvent
from tests.feishu.conftest import listed_mention

pytestmark = pytest.mark.django_db

GROUP = "oc_runs_group"


def _heard_five_minutes_ago(feishu, bot) -> None:
    """The bot heard GROUP; the newest message it stored was sent five minutes ago (where a catch-up reads from)."""
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_before")
    before = InboundEvent.objects.get(bot=bot, message_id="om_before")
    before.payload["event"]["message"]["create_time"] = str(int((time.time() - 300) * 1000))
    before.save(update_fields=["payload"])


def _said_while_away(feishu, bot, *, message_id: str) -> None:
    """An @ of the bot said in GROUP half a minute ago that no push delivered (Feishu's list holds it)."""
    feishu.stub.add_message(
        message_id=message_id,
        chat_id=GROUP,
        text="@_user_1 are you there?",
        mentions=listed_mention(bot),
        sender_id="ou_alice",
        create_time_ms=int((time.time() - 30) * 1000),
    )


def _requested_ago(catchup: CatchupRun, seconds: float) -> None:
    CatchupRun.objects.filter(pk=catchup.pk).update(requested_at=timezone.now() - timedelta(seconds=seconds))


def test_d2_a_catch_up_the_broker_refused_is_queued_again_by_the_sweeper_and_reads_the_gap_once(
    admin_client, feishu, make_feishu_bot, mocker
):
    # given a bot that heard the group, an @ said while its connection was away, and a broker down when the
    # connection came back and triggered the catch-up
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _heard_five_minutes_ago(feishu, bot)
    _said_while_away(feishu, bot, message_id="om_away")
    apply_async = mocker.patch.object(feishu_tasks.catchup_run, "apply_async", side_effect=BrokerDown("Error 111"))
    with TestCase.captureOnCommitCallbacks(execute=True):
        catchup = catchup_enqueue(bot=bot, trigger=CatchupRun.Trigger.RECONNECT)
    catchup.refresh_from_db()
    assert (apply_async.call_count, catchup.enqueued_at, catchup.finished_at) == (1, None, None)
    page = admin_client.get(reverse("admin:agents_bot_change", args=[bot.pk])).content.decode()
    assert 'data-catchup="pending"' in page

    # when the broker is back: a sweep within the minute leaves the run alone, the one after it queues it
    mocker.stopall()
    assert feishu_tasks.inbound_events_sweep.delay().get() == 0
    _requested_ago(catchup, 61)
    with TestCase.captureOnCommitCallbacks(execute=True):
        queued = catchups_sweep()
    again = catchups_sweep()

    # then the gap was read once: the @ stored and answered once, the run finished with what it read
    catchup.refresh_from_db()
    assert (queued, again, catchup.sweeps, catchup.stored, catchup.error) == (1, 0, 1, 1, "")
    assert InboundEvent.objects.filter(bot=bot, message_id="om_away").count() == 1
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_away"]
    assert len(feishu.stub.sent) == 1
    page = admin_client.get(reverse("admin:agents_bot_change", args=[bot.pk])).content.decode()
    assert 'data-catchup="done"' in page and "1 message(s) read in 1 chat(s), 1 new" in page


def test_d2_a_catch_up_whose_task_was_lost_is_queued_again_a_bounded_number_of_times(feishu, make_feishu_bot, mocker):
    # given a recorded catch-up the broker took longer ago than it could still be holding its task
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _heard_five_minutes_ago(feishu, bot)
    apply_async = mocker.patch.object(feishu_tasks.catchup_run, "apply_async")  # a broker whose workers are busy
    with TestCase.captureOnCommitCallbacks(execute=True):
        catchup = catchup_enqueue(bot=bot, trigger=CatchupRun.Trigger.HUB_START)
    lost_at = timezone.now() - timedelta(seconds=broker_redelivery_seconds() + 5)

    # when it is lost again each time, sweep after sweep
    rounds = []
    for _ in range(CATCHUP_MAX_SWEEPS + 1):
        CatchupRun.objects.filter(pk=catchup.pk).update(enqueued_at=lost_at)
        rounds.append(catchups_sweep())

    # then it was queued again CATCHUP_MAX_SWEEPS times, then given up on, readably; nothing was read meanwhile
    catchup.refresh_from_db()
    assert rounds == [1] * CATCHUP_MAX_SWEEPS + [0]
    assert apply_async.call_count == 1 + CATCHUP_MAX_SWEEPS
    assert (
        catchup.finished_at is not None and catchup.error == f"Gave up: its task was lost {CATCHUP_MAX_SWEEPS} times."
    )
    assert feishu.stub.requests_to("list") == []


def test_d2_a_second_delivery_of_a_finished_catch_up_reads_nothing(feishu, make_feishu_bot):
    # given a catch-up that ran (the worker died after finishing it, before acknowledging its task)
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _heard_five_minutes_ago(feishu, bot)
    _said_while_away(feishu, bot, message_id="om_away")
    with TestCase.captureOnCommitCallbacks(execute=True):
        catchup = catchup_enqueue(bot=bot, trigger=CatchupRun.Trigger.RECONNECT)
    reads = len(feishu.stub.requests_to("list"))
    assert reads >= 1
    # when the broker hands the task out again
    with TestCase.captureOnCommitCallbacks(execute=True):
        stored = feishu_tasks.catchup_run.delay(catchup.pk).get()
    # then it reads nothing and stores nothing
    assert (stored, len(feishu.stub.requests_to("list"))) == (0, reads)
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_away"]


def test_d2_an_operators_catch_up_is_recorded_like_the_others(admin_client, feishu, make_feishu_bot):
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _heard_five_minutes_ago(feishu, bot)
    _said_while_away(feishu, bot, message_id="om_away")
    with TestCase.captureOnCommitCallbacks(execute=True):
        admin_client.post("/admin/agents/bot/", {"action": "catch_up", "_selected_action": [bot.pk]})
    run = CatchupRun.objects.get(bot=bot)
    assert (run.trigger, run.finished_at is not None, run.read, run.stored, run.error) == ("operator", True, 1, 1, "")
