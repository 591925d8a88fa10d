"""F2: exactly-once intake. Feishu delivers at least once and replays under new event_ids; one message is one
turn and one reply however often it arrives. A broker outage loses nothing: the sweeper re-enqueues."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import TestCase
from django.utils import timezone
from kombu.exceptions import OperationalError

from agents.models import Turn
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound import webhook_bots
from feishu.inbound.routing import inbound_event_process
from feishu.models import InboundEvent, OutboundDelivery
from feishu.outbound import client as feishu_client
from feishu.tasks import inbound_event_process as inbound_event_process_task
from feishu.tasks import inbound_events_sweep

pytestmark = pytest.mark.django_db


def test_f2_same_message_four_times_is_one_turn_and_one_reply(feishu, make_feishu_bot):
    # given
    bot = make_feishu_bot(name="Planner")
    response, payload = feishu.say(bot, text="draft a plan", mention=[bot], message_id="om_once")
    assert response.status_code == 200
    first_event_id = payload["header"]["event_id"]
    # when: a retry with the same event_id, a replay under a new event_id, then a replay after a "restart"
    same_again = feishu.post(bot, payload)
    payload["header"]["event_id"] = "replayed-event-id-1"
    replay = feishu.post(bot, payload)
    feishu_webhook._handlers.clear()  # the process restarted: every in-memory cache is gone
    webhook_bots._bots.clear()
    feishu_client._clients.clear()
    payload["header"]["event_id"] = "replayed-event-id-2"
    after_restart = feishu.post(bot, payload)
    # then
    assert [same_again.status_code, replay.status_code, after_restart.status_code] == [200, 200, 200]
    event = InboundEvent.objects.get()
    assert (event.event_id, event.status, event.attempts) == (first_event_id, "done", 1)
    assert Turn.objects.filter(bot=bot).count() == 1
    assert len(feishu.stub.sent) == 1
    assert OutboundDelivery.objects.filter(bot=bot).count() == 1


def test_f2_first_event_id_is_kept(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    _, payload = feishu.say(bot, text="hello", mention=[bot], event_id="first-event")
    payload["header"]["event_id"] = "second-event"

    feishu.post(bot, payload)

    assert list(InboundEvent.objects.values_list("event_id", flat=True)) == ["first-event"]


def test_f2_a_claimed_event_is_not_processed_twice(feishu, make_feishu_bot):
    # given: the event was processed
    bot = make_feishu_bot()
    feishu.say(bot, text="hello", mention=[bot])
    event = InboundEvent.objects.get()
    # when: a second worker receives the same task (redelivery)
    result = inbound_event_process(event_pk=event.pk)
    # then
    assert result is None
    assert InboundEvent.objects.get().attempts == 1
    assert len(feishu.stub.sent) == 1


def test_f2_broker_down_at_intake_still_answers_200_then_the_sweeper_processes(
    feishu, make_feishu_bot, mocker, settings, caplog
):
    # given: Redis is unreachable when the webhook enqueues
    bot = make_feishu_bot()
    mocker.patch.object(
        inbound_event_process_task, "apply_async", side_effect=OperationalError("Error 111 connecting to redis")
    )
    # when
    response, _ = feishu.say(bot, text="are you there?", mention=[bot])
    # then: acknowledged and stored, not processed, and the outage logged
    assert response.status_code == 200
    [record] = [r for r in caplog.records if r.getMessage().startswith("task not enqueued")]
    assert (record.levelname, record.what, record.error) == ("WARNING", "inbound_event", "OperationalError")
    event = InboundEvent.objects.get()
    assert event.status == InboundEvent.Status.PENDING
    assert feishu.stub.sent == []
    # when: Redis is back and the beat sweeper runs after the pending threshold
    mocker.stopall()
    InboundEvent.objects.filter(pk=event.pk).update(
        received_at=timezone.now() - timedelta(seconds=settings.FEISHU_SWEEP_PENDING_AFTER_SECONDS + 1)
    )
    with TestCase.captureOnCommitCallbacks(execute=True):
        swept = inbound_events_sweep.delay().get()
    # then
    assert swept == 1
    assert InboundEvent.objects.get().status == InboundEvent.Status.DONE
    assert len(feishu.stub.sent) == 1


def test_f2_sweeper_leaves_fresh_pending_events_alone(make_feishu_bot, mocker):
    bot = make_feishu_bot()
    InboundEvent.objects.create(
        bot=bot, event_id="e", message_id="om_fresh", event_type="im.message.receive_v1", payload={}
    )
    enqueue = mocker.patch.object(inbound_event_process_task, "apply_async")

    inbound_events_sweep()

    enqueue.assert_not_called()


def test_f2_stale_processing_claim_is_released_by_the_sweeper(make_feishu_bot, mocker):
    # given: a worker claimed the event and was killed
    bot = make_feishu_bot()
    event = InboundEvent.objects.create(
        bot=bot,
        event_id="e",
        message_id="om_killed",
        event_type="im.message.receive_v1",
        payload={},
        status=InboundEvent.Status.PROCESSING,
        claimed_at=timezone.now() - timedelta(hours=1),
    )
    InboundEvent.objects.filter(pk=event.pk).update(received_at=timezone.now() - timedelta(hours=1))
    enqueue = mocker.patch.object(inbound_event_process_task, "apply_async")
    # when
    inbound_events_sweep()
    # then
    assert InboundEvent.objects.get().status == InboundEvent.Status.PENDING
    enqueue.assert_called_once_with(args=[event.pk], retry=False)


def test_f2_unreadable_payload_is_ignored_not_retried(make_feishu_bot):
    bot = make_feishu_bot()
    event = InboundEvent.objects.create(
        bot=bot, event_id="e", message_id="om_x", event_type="im.message.receive_v1", payload={"event": "nonsense"}
    )

    inbound_event_process(event_pk=event.pk)

    event.refresh_from_db()
    assert (event.status, event.error) == (InboundEvent.Status.IGNORED, "unreadable")


def test_f2_l2_a_feishu_turn_never_enqueued_is_swept_by_the_one_turn_sweeper(make_feishu_bot, mocker):
    from agents.services.turns import turns_sweep
    from agents.tasks import turn_run_task
    from tests.agents.factories import ThreadFactory

    # given: a queued Feishu turn whose enqueue was lost, and one waiting for a provider retry
    bot = make_feishu_bot()
    thread = ThreadFactory(bot=bot, channel="feishu")
    lost = Turn.objects.create(bot=bot, thread=thread, trigger="mention", source_message_id="om_lost")
    waiting = Turn.objects.create(bot=bot, thread=thread, trigger="mention", source_message_id="om_wait", attempts=1)
    Turn.objects.update(queued_at=timezone.now() - timedelta(minutes=5))
    enqueue = mocker.patch.object(turn_run_task, "apply_async")
    # when
    swept = turns_sweep()
    # then: only the lost one (the waiting one's own Celery retry is pending); its id is all the broker carries
    assert swept == 1
    enqueue.assert_called_once_with(args=[lost.pk], retry=False)
    assert Turn.objects.get(pk=waiting.pk).status == "queued"


def test_f2_t2_a_feishu_turn_the_broker_took_is_swept_only_after_the_redelivery_interval(make_feishu_bot, mocker):
    """A busy broker may hold a turn's task for a while: a second copy then would pay the model twice."""
    from agents.services.turns import broker_redelivery_seconds, turn_enqueue, turns_sweep
    from agents.tasks import turn_run_task
    from tests.agents.factories import ThreadFactory

    # given: a queued Feishu turn whose enqueue the broker took (stamped)
    bot = make_feishu_bot()
    turn = Turn.objects.create(
        bot=bot, thread=ThreadFactory(bot=bot, channel="feishu"), trigger="mention", source_message_id="om_held"
    )
    enqueue = mocker.patch.object(turn_run_task, "apply_async")
    turn_enqueue(turn_id=turn.pk)
    assert Turn.objects.get(pk=turn.pk).enqueued_at is not None and enqueue.call_count == 1
    # when: swept five minutes later, then past the broker's redelivery interval
    five_minutes_ago = timezone.now() - timedelta(minutes=5)
    Turn.objects.filter(pk=turn.pk).update(queued_at=five_minutes_ago, enqueued_at=five_minutes_ago)
    early = turns_sweep()
    stale = timezone.now() - timedelta(seconds=broker_redelivery_seconds() + 1)
    Turn.objects.filter(pk=turn.pk).update(queued_at=stale, enqueued_at=stale)
    late = turns_sweep()
    # then: left alone while the broker could still hold it, re-enqueued (and re-stamped) after
    assert (early, late) == (0, 1)
    assert enqueue.call_count == 2
    assert Turn.objects.get(pk=turn.pk).enqueued_at > stale


def test_f1_database_outage_answers_503_so_feishu_retries(feishu, make_feishu_bot):
    from django.db import OperationalError as DatabaseOperationalError

    bot = make_feishu_bot()

    def server_closed_on_store(execute, sql, params, many, context):
        # The store's INSERT, whichever way it is issued, meets a connection the server closed.
        if sql.lstrip().upper().startswith("INSERT") and InboundEvent._meta.db_table in sql:
            raise DatabaseOperationalError("server closed")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(server_closed_on_store):
        response, _ = feishu.say(bot, text="hello", mention=[bot])

    assert response.status_code == 503
    assert response.json() == {"message": "Temporarily unavailable.", "extra": {}}
    assert InboundEvent.objects.count() == 0
