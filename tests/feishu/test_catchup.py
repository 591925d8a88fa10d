"""D2 (partial): the admin's "catch up" reads a group's messages with im.v1.message.list (the real lark-oapi client
against the Feishu stub) and stores what the hub missed through the same intake: each message once, even when
Feishu's retry delivers it too; a recent @ is answered once, an older one is recorded as missed. A long connection
back after a gap catches up from where the gap began, though it stores new events before a worker takes the task."""

import time
from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from agents.models import Turn
from feishu import tasks as feishu_tasks
from feishu.inbound.catchup_runs import catchup_record
from feishu.inbound.routing import ROUTE_MISSED
from feishu.inbound.signing import message_event_payload
from feishu.models import CatchupRun, InboundEvent
from tests.feishu.conftest import listed_mention

CHAT = "oc_busy_group"


def _catch_up(admin_client, bot):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return admin_client.post("/admin/agents/bot/", {"action": "catch_up", "_selected_action": [bot.pk]})


@pytest.mark.django_db
def test_d2_catch_up_stores_each_missed_message_once_answers_a_recent_at_and_marks_an_old_one(
    admin_client, feishu, make_feishu_bot, settings
):
    # given a group the bot heard from, whose last stored event is 30 minutes old (the hub was down since)
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning all", chat_id=CHAT, message_id="om_seen")
    seen = InboundEvent.objects.get(bot=bot)
    seen.payload["event"]["message"]["create_time"] = str(
        int((timezone.now() - timedelta(minutes=30)).timestamp() * 1000)
    )
    seen.save(update_fields=["payload"])
    now_ms = int(time.time() * 1000)
    old_ms = now_ms - (settings.AMUX_BACKFILL_ANSWER_WINDOW_SECONDS + 300) * 1000
    stub = feishu.stub
    stub.add_message(
        message_id="om_old_at",
        chat_id=CHAT,
        text="@_user_1 still there?",
        create_time_ms=old_ms,
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )
    stub.add_message(
        message_id="om_chat", chat_id=CHAT, text="lunch?", create_time_ms=now_ms - 60_000, sender_id="ou_bob"
    )
    stub.add_message(
        message_id="om_recent_at",
        chat_id=CHAT,
        text="@_user_1 status please",
        create_time_ms=now_ms - 30_000,
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )

    # when the operator presses "catch up" (twice: a second run finds nothing new)
    first = _catch_up(admin_client, bot)
    _catch_up(admin_client, bot)
    # and Feishu's own retries of a listed message arrive after it (webhook back up): stored once all the same
    feishu.say(bot, text="lunch?", chat_id=CHAT, message_id="om_chat", sender="ou_bob")
    feishu.say(bot, text="lunch?", chat_id=CHAT, message_id="om_chat", sender="ou_bob")

    # then every message is stored once
    assert first.status_code == 302
    stored = sorted(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True))
    assert stored == ["om_chat", "om_old_at", "om_recent_at", "om_seen"]
    # the recent @ is answered once, the old one recorded as missed and not answered
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_recent_at"]
    assert len(stub.sent) == 1
    missed = InboundEvent.objects.get(bot=bot, message_id="om_old_at")
    assert (missed.status, missed.error) == ("ignored", ROUTE_MISSED)
    assert ROUTE_MISSED == "this request arrived while the hub was down and was not answered"
    listed = stub.requests_to("list")
    assert listed and all(r.query["container_id"] == [CHAT] for r in listed)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_d2_a_long_connection_back_after_a_gap_catches_up_with_what_it_could_not_deliver(
    feishu_stub, ws_stub, long_connection_bot, connect
):
    # given a long-connection bot that heard one group message
    stub, bot = ws_stub, long_connection_bot
    connection = connect(bot)
    heard = _said(bot, message_id="om_heard", text="hello", sender="ou_alice")
    stub.wait_acked([stub.push(heard)])
    # when the connection drops and an @ is said meanwhile that the long connection never delivers
    stub.drop()
    _at_said_while_away(feishu_stub, bot)
    stub.wait_connections(2, timeout=15)
    deadline = time.monotonic() + 20
    while not Turn.objects.filter(bot=bot).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    connection.flush()
    # then the catch-up stored it once and it was answered once
    assert list(InboundEvent.objects.filter(bot=bot).order_by("id").values_list("message_id", flat=True)) == [
        "om_heard",
        "om_said_while_away",
    ]
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_said_while_away"]
    assert len(feishu_stub.sent) == 1


def _at_said_while_away(feishu_stub, bot, *, seconds_ago: float = 0) -> None:
    """An @ of the bot said in CHAT `seconds_ago` that no push delivers: only Feishu's message list holds it."""
    feishu_stub.add_message(
        message_id="om_said_while_away",
        chat_id=CHAT,
        text="@_user_1 you there?",
        mentions=listed_mention(bot),
        sender_id="ou_alice",
        create_time_ms=int((time.time() - seconds_ago) * 1000),
    )


def _said(bot, *, message_id: str, text: str, sender: str) -> dict:
    """A group message to the long-connection bot, as Feishu pushes it."""
    return message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=message_id,
        chat_id=CHAT,
        text=text,
        sender_open_id=sender,
    )


def _sent_at(payload: dict, *, seconds_ago: float) -> dict:
    """The event of a message sent `seconds_ago` (Feishu's create_time: where a catch-up starts reading)."""
    payload["event"]["message"]["create_time"] = str(int((time.time() - seconds_ago) * 1000))
    return payload


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_d2_the_catch_up_reads_from_where_the_gap_began_though_the_connection_stores_new_events_before_it_runs(
    feishu_stub, ws_stub, long_connection_bot, connect, monkeypatch
):
    # given a long-connection bot that heard a group a minute ago; its catch-up task waits in the queue (as for a
    # busy worker) instead of running at once
    stub, bot = ws_stub, long_connection_bot
    stub.keeps_undelivered = False  # the long connection has no redelivery of what it never delivered
    queued: list[list] = []
    monkeypatch.setattr(feishu_tasks.catchup_run, "apply_async", lambda args, **options: queued.append(args))
    connection = connect(bot)
    heard = _said(bot, message_id="om_heard", text="hello", sender="ou_alice")
    stub.wait_acked([stub.push(_sent_at(heard, seconds_ago=60))])
    # when the connection drops, an @ is said meanwhile (30 s ago), and once it is back a new message is
    # stored before any worker takes the queued catch-up
    stub.drop()
    _at_said_while_away(feishu_stub, bot, seconds_ago=30)
    stub.wait_connections(2, timeout=15)
    new = _said(bot, message_id="om_new", text="back to work", sender="ou_bob")
    stub.wait_acked([stub.push(new)])
    connection.flush()
    assert len(queued) == 1
    with TestCase.captureOnCommitCallbacks(execute=True):
        feishu_tasks.catchup_run.apply(args=queued[0])
    # then the catch-up read from the gap's start: the @ said while away is stored once and answered once
    assert sorted(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True)) == [
        "om_heard",
        "om_new",
        "om_said_while_away",
    ]
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_said_while_away"]
    assert len(feishu_stub.sent) == 1


@pytest.mark.django_db
def test_d2_a_catch_up_feishu_cannot_answer_for_now_is_retried_from_the_same_start_and_a_refusal_is_not(
    feishu, make_feishu_bot
):
    # given a group the bot heard, an @ said while the hub was away, and Feishu answering the list with 500 twice
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning all", chat_id=CHAT, message_id="om_seen")
    gap_started = timezone.now() - timedelta(minutes=5)
    feishu.stub.add_message(
        message_id="om_said_away",
        chat_id=CHAT,
        text="@_user_1 ping",
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )
    feishu.stub.fail_next("list", status=500, code=55001, msg="internal error", times=2)
    # when the recorded catch-up's task runs (eagerly here: each retry runs at once)
    catchup = catchup_record(bot=bot, trigger=CatchupRun.Trigger.RECONNECT, gap_started=gap_started)
    with TestCase.captureOnCommitCallbacks(execute=True):
        stored = feishu_tasks.catchup_run.delay(catchup.pk).get()
    # then the third try read the gap from the same start: the @ stored once and answered once, the run finished
    starts = {tuple(r.query["start_time"]) for r in feishu.stub.requests_to("list")}
    assert (stored, len(feishu.stub.requests_to("list")), starts) == (1, 3, {(str(int(gap_started.timestamp())),)})
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_said_away"]
    catchup.refresh_from_db()
    assert (catchup.finished_at is not None, catchup.read, catchup.stored, catchup.error) == (True, 1, 1, "")

    # given Feishu refusing the read (the app lacks the group-history scope): final, not retried, recorded
    feishu.stub.fail_next("list", status=400, code=99991672, msg="Access denied: im:message.group_msg")
    reads_before = len(feishu.stub.requests_to("list"))
    refused = catchup_record(bot=bot, trigger=CatchupRun.Trigger.OPERATOR)
    assert feishu_tasks.catchup_run.delay(refused.pk).get() == 0
    assert len(feishu.stub.requests_to("list")) == reads_before + 1
    refused.refresh_from_db()
    assert refused.finished_at is not None and "Access denied" in refused.error
