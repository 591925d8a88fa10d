"""T2: `turns_sweep` re-enqueues REST turns whose task was lost, never one a healthy broker may still hold."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Turn
from agents.services.turns import (
    broker_redelivery_seconds,
    turn_enqueue,
    turns_sweep,
)
from agents.tasks import turn_run_task
from tests.agents.factories import ThreadFactory
from tests.agents.test_turns import rest_turn, stub_bot

pytestmark = pytest.mark.django_db


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


@pytest.fixture
def busy_broker(mocker):
    """A healthy broker that takes every task but whose workers have not got to it yet."""
    return mocker.patch.object(turn_run_task, "delay")


def test_intervals_come_from_the_celery_settings(settings):
    # given
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 900}
    # then: redelivery = visibility timeout
    assert broker_redelivery_seconds() == 900.0


def test_t2_a_turn_the_broker_took_is_not_swept_while_the_broker_could_still_hold_it(llm_stub, busy_broker):
    """A busy broker: the turn waits in the queue for minutes. Re-enqueueing it every minute put copies next to
    each other that could run at once, each paying for a model call."""
    # given: a REST turn created ten minutes ago whose enqueue the broker took just under its redelivery interval ago
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    assert turn_enqueue(turn_id=turn.pk) is True
    Turn.objects.filter(pk=turn.pk).update(
        queued_at=ago(broker_redelivery_seconds() + 60), enqueued_at=ago(broker_redelivery_seconds() - 5)
    )
    # when
    swept = turns_sweep()
    # then: left alone, still queued, one copy in the broker
    turn.refresh_from_db()
    assert (swept, busy_broker.call_count, turn.status, turn.attempts) == (0, 1, Turn.Status.QUEUED, 0)
    assert llm_stub.requests_for("openai_chat") == []


def test_t2_a_turn_the_broker_took_is_swept_once_per_redelivery_interval(llm_stub, busy_broker):
    # given: the broker took the turn's task longer ago than it could still be holding it (the task was lost)
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    turn_enqueue(turn_id=turn.pk)
    stale_stamp = ago(broker_redelivery_seconds() + 5)
    Turn.objects.filter(pk=turn.pk).update(queued_at=stale_stamp, enqueued_at=stale_stamp)
    before = timezone.now()
    # when: two sweep passes a moment apart
    first, second = turns_sweep(), turns_sweep()
    # then: re-enqueued once, re-stamped, so the next pass leaves it alone
    turn.refresh_from_db()
    assert (first, second, busy_broker.call_count) == (1, 0, 2)
    assert busy_broker.call_args.args == (turn.pk,)
    assert before <= turn.enqueued_at <= timezone.now()
    assert turn.status == Turn.Status.QUEUED


def test_t2_a_refused_enqueue_is_not_stamped_and_is_swept_after_a_minute(llm_stub, mocker):
    # given: the broker refuses the enqueue
    from kombu.exceptions import OperationalError as BrokerDown

    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    delay = mocker.patch.object(turn_run_task, "delay", side_effect=BrokerDown("Error 111 connecting"))
    assert turn_enqueue(turn_id=turn.pk) is False
    turn.refresh_from_db()
    assert turn.enqueued_at is None
    # when: a minute later the broker is back
    delay.side_effect = None
    Turn.objects.filter(pk=turn.pk).update(queued_at=ago(61))
    swept = turns_sweep()
    # then
    turn.refresh_from_db()
    assert (swept, delay.call_count, turn.enqueued_at is not None) == (1, 2, True)


def test_t2_sweep_leaves_other_turns_alone(llm_stub, busy_broker):
    """Feishu turns have the bridge's sweeper; a queued turn waiting for a Celery retry has attempts > 0."""
    # given
    bot = stub_bot(llm_stub)
    retrying = rest_turn(ThreadFactory(bot=bot))
    feishu = rest_turn(ThreadFactory(bot=bot))
    Turn.objects.filter(pk=retrying.pk).update(attempts=1, queued_at=ago(3600))
    Turn.objects.filter(pk=feishu.pk).update(trigger=Turn.Trigger.MENTION, queued_at=ago(3600))
    # when / then
    assert (turns_sweep(), busy_broker.call_count) == (0, 0)
