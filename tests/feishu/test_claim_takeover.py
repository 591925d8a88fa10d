"""Issue 10 item 5: a redelivered task of a killed worker takes over an InboundEvent claim older than the broker's
visibility timeout, instead of finding it `processing` and waiting for STALE_CLAIM_SECONDS (600 s)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from feishu.inbound.intake import claim_takeover_seconds, inbound_events_sweep
from feishu.inbound.signing import message_event_payload
from feishu.models import InboundEvent
from feishu.tasks import inbound_event_process as inbound_event_process_task

pytestmark = pytest.mark.django_db

VISIBILITY_TIMEOUT_SECONDS = 60


@pytest.fixture
def visibility_timeout(settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS}


def claimed_event(bot, *, seconds_ago: float) -> InboundEvent:
    """An event a worker claimed `seconds_ago` and never finished (the worker was SIGKILLed)."""
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_killed",
        chat_id="oc_group",
        text="hello",
    )
    return InboundEvent.objects.create(
        bot=bot,
        event_id=payload["header"]["event_id"],
        message_id="om_killed",
        event_type="im.message.receive_v1",
        payload=payload,
        status=InboundEvent.Status.PROCESSING,
        attempts=1,
        claimed_at=timezone.now() - timedelta(seconds=seconds_ago),
    )


def test_i10_5_the_takeover_age_is_the_visibility_timeout_capped_by_the_stale_claim_age(settings, visibility_timeout):
    assert claim_takeover_seconds() == VISIBILITY_TIMEOUT_SECONDS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    assert claim_takeover_seconds() == 600


def test_i10_5_a_redelivered_task_takes_over_a_claim_older_than_the_visibility_timeout(
    feishu, make_feishu_bot, visibility_timeout
):
    # given: the first worker claimed the event 61 s ago and died; the broker redelivers its task now
    bot = make_feishu_bot()
    event = claimed_event(bot, seconds_ago=VISIBILITY_TIMEOUT_SECONDS + 1)
    # when
    inbound_event_process_task.delay(event.pk)
    # then: processed by the redelivery, as its second attempt
    event.refresh_from_db()
    assert (event.status, event.attempts, event.error) == (InboundEvent.Status.DONE, 2, "")


def test_i10_5_a_claim_younger_than_the_visibility_timeout_is_left_to_its_worker(
    feishu, make_feishu_bot, visibility_timeout
):
    # given: a worker claimed the event 10 s ago and is still at it
    bot = make_feishu_bot()
    event = claimed_event(bot, seconds_ago=10)
    claimed_at = event.claimed_at
    # when
    inbound_event_process_task.delay(event.pk)
    # then: untouched
    event.refresh_from_db()
    assert (event.status, event.attempts, event.claimed_at) == (InboundEvent.Status.PROCESSING, 1, claimed_at)


def test_i10_5_the_sweeper_releases_a_claim_after_the_same_age(make_feishu_bot, visibility_timeout, mocker):
    # given
    bot = make_feishu_bot()
    event = claimed_event(bot, seconds_ago=VISIBILITY_TIMEOUT_SECONDS + 1)
    InboundEvent.objects.filter(pk=event.pk).update(received_at=timezone.now() - timedelta(minutes=5))
    enqueue = mocker.patch.object(inbound_event_process_task, "apply_async")
    # when
    inbound_events_sweep()
    # then
    assert InboundEvent.objects.get().status == InboundEvent.Status.PENDING
    enqueue.assert_called_once_with(args=[event.pk], retry=False)
