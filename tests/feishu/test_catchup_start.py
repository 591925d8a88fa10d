"""D2, the rest (issue 23b): a hub start after an outage catches up once (the worker_ready signal, the heartbeat
row's conditional claim), DMs are read too, a missed request says so in explain, and the reads take the send
budget's app share. After a webhook outage, Feishu's retries arriving between the catch-up's pages, or stored by
the web before the worker starts, leave every message stored once and each recent @ answered once. Each through
the real path: lark-oapi's client against the Feishu REST stub."""

import time
from collections import Counter
from datetime import timedelta

import pytest
from celery.signals import worker_ready
from django.db import connection
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone

from agents.models import Turn
from feishu.inbound.catchup import MISSED_TEXT, catchup_run
from feishu.inbound.hub_start import HEARTBEAT_PK, hub_start_catchup
from feishu.inbound.routing import ROUTE_MISSED
from feishu.models import HubHeartbeat, InboundEvent
from feishu.outbound import budget as send_budget
from feishu.tasks import inbound_events_sweep
from tests.feishu.conftest import listed_mention

GROUP = "oc_start_group"
DM = "oc_start_dm"


def _hub_down_since(seconds: float) -> None:
    HubHeartbeat.objects.update_or_create(
        pk=HEARTBEAT_PK, defaults={"alive_at": timezone.now() - timedelta(seconds=seconds)}
    )


def _sent_minutes_ago(event: InboundEvent, minutes: int) -> None:
    """The stored message was sent `minutes` ago (Feishu's create_time: where the catch-up starts reading)."""
    sent = timezone.now() - timedelta(minutes=minutes)
    event.payload["event"]["message"]["create_time"] = str(int(sent.timestamp() * 1000))
    event.save(update_fields=["payload"])


def _worker_starts() -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        worker_ready.send(sender=None)


@pytest.mark.django_db
def test_d2_a_worker_starting_after_an_outage_catches_up_once_a_start_without_a_gap_does_not(
    feishu, make_feishu_bot, settings
):
    # given a bot that heard a group, and a hub whose heartbeat stopped 5 minutes ago (longer than the bound)
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_before")
    _sent_minutes_ago(InboundEvent.objects.get(bot=bot, message_id="om_before"), 5)
    _hub_down_since(300)
    feishu.stub.add_message(
        message_id="om_while_down",
        chat_id=GROUP,
        text="@_user_1 anyone?",
        create_time_ms=int(time.time() * 1000) - 20_000,
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )

    # when a worker becomes ready, then a second one (started together: it finds the stamp the first one moved)
    _worker_starts()
    _worker_starts()

    # then the missed @ is stored once and answered once, and the second worker read nothing
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_while_down"]
    assert InboundEvent.objects.filter(bot=bot, message_id="om_while_down").count() == 1
    assert len(feishu.stub.requests_to("list")) == 1
    assert (timezone.now() - HubHeartbeat.objects.get().alive_at).total_seconds() < 5


@pytest.mark.django_db
def test_d2_the_claim_is_one_conditional_update_a_fresh_heartbeat_or_a_first_start_enqueue_nothing(
    make_feishu_bot, settings
):
    make_feishu_bot()
    # a first start ever: no heartbeat row yet, nothing to catch up with; the row is written
    assert hub_start_catchup() == 0
    assert HubHeartbeat.objects.count() == 1
    # beat's inbound sweeper keeps it fresh: a worker restarting meanwhile finds no gap
    _hub_down_since(300)
    inbound_events_sweep.delay().get(timeout=10)
    assert (timezone.now() - HubHeartbeat.objects.get().alive_at).total_seconds() < 5
    assert hub_start_catchup() == 0
    # two workers that both read the same stale stamp: the one whose UPDATE still matches claims, the other not
    settings.AMUX_BACKFILL_AFTER_SECONDS = 60
    _hub_down_since(120)
    stale = HubHeartbeat.objects.get().alive_at
    with TestCase.captureOnCommitCallbacks(execute=False) as enqueued:
        first = hub_start_catchup()
    assert first == 1 and len(enqueued) == 1
    assert HubHeartbeat.objects.filter(pk=HEARTBEAT_PK, alive_at=stale).update(alive_at=timezone.now()) == 0


@pytest.mark.django_db
def test_d2_a_dm_active_today_is_read_and_its_missed_request_answered_as_a_dm(feishu, make_feishu_bot):
    # given a DM the bot had today, and a message said in it while the hub was away
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="hi", chat_id=DM, chat_type="p2p", message_id="om_dm_hi")
    _sent_minutes_ago(InboundEvent.objects.get(bot=bot, message_id="om_dm_hi"), 5)
    Turn.objects.filter(bot=bot).delete()
    sent_before = len(feishu.stub.sent)
    feishu.stub.add_message(
        message_id="om_dm_missed",
        chat_id=DM,
        text="what is the status?",
        sender_id="ou_alice",
        create_time_ms=int(time.time() * 1000) - 20_000,
    )

    with TestCase.captureOnCommitCallbacks(execute=True):
        result = catchup_run(bot=bot)

    # then the DM's container was read, the missed message stored as a DM and answered once
    assert result.chats == 1
    assert [r.query["container_id"] for r in feishu.stub.requests_to("list")] == [[DM]]
    missed = InboundEvent.objects.get(bot=bot, message_id="om_dm_missed")
    assert missed.payload["event"]["message"]["chat_type"] == "p2p"
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_dm_missed"]
    assert len(feishu.stub.sent) == sent_before + 1


@pytest.mark.django_db
def test_d2_explain_of_a_request_read_too_late_says_it_was_not_answered(
    admin_client, feishu, make_feishu_bot, settings
):
    # given a group @ the catch-up read past the answer window, and one it answered
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_seen")
    now_ms = int(time.time() * 1000)
    feishu.stub.add_message(
        message_id="om_too_old",
        chat_id=GROUP,
        text="@_user_1 ping",
        create_time_ms=now_ms - (settings.AMUX_BACKFILL_ANSWER_WINDOW_SECONDS + 120) * 1000,
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )
    seen = InboundEvent.objects.get(bot=bot, message_id="om_seen")
    _sent_minutes_ago(seen, settings.AMUX_BACKFILL_ANSWER_WINDOW_SECONDS // 60 + 10)
    with TestCase.captureOnCommitCallbacks(execute=True):
        catchup_run(bot=bot)
    too_old = InboundEvent.objects.get(bot=bot, message_id="om_too_old")

    # when the operator opens its explain page, and the page of a message that was not missed
    page = admin_client.get(reverse("admin:feishu_inboundevent_explain", args=[too_old.pk]))
    other = admin_client.get(reverse("admin:feishu_inboundevent_explain", args=[seen.pk]))

    # then the first says it arrived while the hub was down and was not answered; the other does not
    assert page.status_code == 200 and page.context["explain"]["missed"] == MISSED_TEXT
    assert MISSED_TEXT in page.content.decode()
    assert other.status_code == 200 and other.context["explain"]["missed"] == ""
    assert MISSED_TEXT not in other.content.decode()
    assert admin_client.get(reverse("admin:feishu_inboundevent_explain", args=[999_999])).status_code == 404


@pytest.mark.django_db
def test_d2_each_catch_up_read_takes_a_token_of_the_apps_send_budget(feishu, make_feishu_bot, monkeypatch):
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_seen")
    taken: list[tuple[str, str]] = []
    real = send_budget.send_budget_acquire

    def spy(*, chat_id, app_id, sleep=None):
        taken.append((chat_id, app_id))
        return real(chat_id=chat_id, app_id=app_id, sleep=sleep)

    monkeypatch.setattr(send_budget, "send_budget_acquire", spy)
    catchup_run(bot=bot)
    reads = len(feishu.stub.requests_to("list"))
    assert reads >= 1 and taken == [("", bot.feishu_app_id)] * reads


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_d2_after_a_webhook_outage_feishu_retries_arriving_during_the_catch_up_are_stored_and_answered_once(
    feishu, make_feishu_bot, settings
):
    # given a group the bot heard 20 minutes ago, then a webhook outage of 5 minutes (the hub down): 55 messages
    # said meanwhile, two pages of the list, with an @ older than the answer window first, and three recent @s
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_before")
    _sent_minutes_ago(InboundEvent.objects.get(bot=bot, message_id="om_before"), 20)
    _hub_down_since(300)
    now_ms = int(time.time() * 1000)
    recent_ats = {"om_gap_03", "om_gap_30", "om_gap_52"}
    feishu.stub.add_message(
        message_id="om_gap_00",
        chat_id=GROUP,
        text="@_user_1 still there?",
        create_time_ms=now_ms - (settings.AMUX_BACKFILL_ANSWER_WINDOW_SECONDS + 300) * 1000,
        mentions=listed_mention(bot),
        sender_id="ou_alice",
    )
    for index in range(1, 55):
        message_id = f"om_gap_{index:02d}"
        feishu.stub.add_message(
            message_id=message_id,
            chat_id=GROUP,
            text=f"@_user_1 question {index}" if message_id in recent_ats else f"remark {index}",
            create_time_ms=now_ms - (280 - index * 5) * 1000,
            mentions=listed_mention(bot) if message_id in recent_ats else None,
            sender_id="ou_bob",
        )
    # and Feishu's retries (twice each) of messages on both pages arrive while the catch-up asks for page two:
    # the catch-up stored the first page's already, not yet the second's
    retried = ["om_gap_00", "om_gap_03", "om_gap_10", "om_gap_52", "om_gap_54"]
    statuses: list[int] = []  # the webhook's answer to each retry

    def retries_arrive(request) -> None:
        if request.query.get("page_token") != ["50"]:
            return
        try:
            for message_id in retried * 2:
                mentioned = message_id in recent_ats or message_id == "om_gap_00"
                response, _ = feishu.say(
                    bot,
                    text="retried",
                    chat_id=GROUP,
                    message_id=message_id,
                    mention=[bot] if mentioned else None,
                    sender="ou_bob",
                    event_id=f"evt_{message_id}",
                )
                statuses.append(response.status_code)
        finally:
            connection.close()  # this thread's (the stub's handler): the test database is dropped after the test

    feishu.stub.on_list = retries_arrive

    # when the hub's worker starts again
    _worker_starts()

    # then both pages were read with the retries in between, every message is stored once, each recent @ answered
    # once, and the old @ stays recorded as missed, unanswered, though Feishu retried it
    assert [r.query.get("page_token") for r in feishu.stub.requests_to("list")] == [None, ["50"]]
    assert statuses == [200] * len(retried) * 2
    stored = Counter(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True))
    assert stored == Counter(["om_before", *(f"om_gap_{index:02d}" for index in range(55))])
    assert sorted(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == sorted(recent_ats)
    assert sorted(sent["parent_id"] for sent in feishu.stub.sent) == sorted(recent_ats)
    missed = InboundEvent.objects.get(bot=bot, message_id="om_gap_00")
    assert (missed.status, missed.error) == ("ignored", ROUTE_MISSED)
    # (the first page's messages were stored by the catch-up, the second page's retried ones by the retry)
    first_by = dict(InboundEvent.objects.filter(bot=bot, message_id__in=retried).values_list("message_id", "event_id"))
    assert first_by == {
        "om_gap_00": "catchup:om_gap_00",
        "om_gap_03": "catchup:om_gap_03",
        "om_gap_10": "catchup:om_gap_10",
        "om_gap_52": "evt_om_gap_52",
        "om_gap_54": "evt_om_gap_54",
    }


@pytest.mark.django_db
def test_d2_a_retry_the_web_stored_before_the_worker_started_does_not_move_the_catch_up_past_the_gap(
    feishu, make_feishu_bot
):
    # given a hub down for 5 minutes after the bot heard a group; two messages said meanwhile, and the web (back
    # first) has stored Feishu's retry of the later one before any worker starts
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    feishu.say(bot, text="morning", chat_id=GROUP, message_id="om_before")
    _sent_minutes_ago(InboundEvent.objects.get(bot=bot, message_id="om_before"), 6)
    _hub_down_since(300)
    now_ms = int(time.time() * 1000)
    feishu.stub.add_message(
        message_id="om_early", chat_id=GROUP, text="@_user_1 early", create_time_ms=now_ms - 240_000,
        mentions=listed_mention(bot), sender_id="ou_alice",
    )  # fmt: skip
    feishu.stub.add_message(message_id="om_late", chat_id=GROUP, text="late", create_time_ms=now_ms - 10_000)
    feishu.say(bot, text="late", chat_id=GROUP, message_id="om_late")
    late_event = InboundEvent.objects.get(bot=bot, message_id="om_late")
    late_event.payload["event"]["message"]["create_time"] = str(now_ms - 10_000)
    late_event.save(update_fields=["payload"])

    # when the worker starts
    _worker_starts()

    # then the catch-up read from where the hub went down: the early @ is stored and answered once
    assert InboundEvent.objects.filter(bot=bot, message_id="om_early").count() == 1
    assert list(Turn.objects.filter(bot=bot).values_list("source_message_id", flat=True)) == ["om_early"]
