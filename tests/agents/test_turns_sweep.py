"""T2: `turns_sweep` re-enqueues REST turns whose task was lost, never one a healthy broker may still hold, and
recovers turns left `running` past the task's time limit (bounded, then failed readably)."""

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from agents.models import Message, Thread, Turn
from agents.services.turns import (
    TURN_MAX_SWEEPS,
    broker_redelivery_seconds,
    ledger,
    running_stale_seconds,
    turn_enqueue,
    turn_run,
    turns_sweep,
)
from agents.tasks import turn_run_task
from tests.agents.factories import ThreadFactory
from tests.agents.test_turns import rest_turn, stub_bot
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


@pytest.fixture
def busy_broker(mocker):
    """A healthy broker that takes every task but whose workers have not got to it yet."""
    return mocker.patch.object(turn_run_task, "apply_async")


def test_intervals_come_from_the_celery_settings(settings):
    # given
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 900}
    settings.CELERY_TASK_TIME_LIMIT = 120
    # then: redelivery = visibility timeout; a run is dead after the hard limit plus a minute
    assert (broker_redelivery_seconds(), running_stale_seconds()) == (900.0, 180.0)


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
    assert busy_broker.call_args.kwargs["args"] == [turn.pk]
    assert before <= turn.enqueued_at <= timezone.now()
    assert (turn.status, turn.sweeps) == (Turn.Status.QUEUED, 0)


def test_t2_a_refused_enqueue_is_not_stamped_and_is_swept_after_a_minute(llm_stub, mocker):
    # given: the broker refuses the enqueue
    from kombu.exceptions import OperationalError as BrokerDown

    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    delay = mocker.patch.object(turn_run_task, "apply_async", side_effect=BrokerDown("Error 111 connecting"))
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


def crash_after_claim(turn: Turn, mocker) -> None:
    """Run the turn until the database fails mid-run, after the claim committed: the turn is left running."""
    failing = mocker.patch(
        "agents.services.turns.runner._complete", side_effect=OperationalError("server closed the connection")
    )
    with pytest.raises(OperationalError):
        turn_run(turn_id=turn.pk)
    mocker.stop(failing)


def test_t2_a_turn_left_running_past_the_time_limit_is_rerun_and_ends_with_one_reply(llm_stub, mocker):
    # given: a REST turn whose run died after its claim (the task was acknowledged: nothing redelivers it)
    thread: Thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread, "hello")
    Turn.objects.filter(pk=turn.pk).update(enqueued_at=ago(5))
    crash_after_claim(turn, mocker)
    turn.refresh_from_db()
    assert (turn.status, turn.attempts, turn.reply_message_id) == (Turn.Status.RUNNING, 1, None)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="hi alice")))
    # when: swept before the time limit has passed, then after it
    early = turns_sweep()
    claimed = ago(running_stale_seconds() + 1)
    Turn.objects.filter(pk=turn.pk).update(claimed_at=claimed, enqueued_at=claimed - timedelta(seconds=1))
    late = turns_sweep()
    # then: re-run once (the claim accepts a running turn), delivered with exactly one reply and one model call
    turn.refresh_from_db()
    assert (early, late) == (0, 1)
    assert (turn.status, turn.attempts, turn.sweeps, turn.error) == (Turn.Status.DELIVERED, 2, 1, "")
    replies = list(Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).values_list("pk", "content"))
    assert replies == [(turn.reply_message_id, "hi alice")]
    assert Message.objects.filter(thread=thread, kind=Message.Kind.USER_MESSAGE).count() == 1
    assert len(llm_stub.requests_for("openai_chat")) == 1
    # and: a later sweep finds nothing to do
    Turn.objects.filter(pk=turn.pk).update(claimed_at=ago(running_stale_seconds() + 1))
    assert turns_sweep() == 0


def test_t2_a_turn_left_running_is_re_enqueued_at_most_once_per_interval_then_failed_readably(
    llm_stub, mocker, busy_broker
):
    # given: a turn left running past the time limit; the re-enqueued copies never get to run
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    crash_after_claim(turn, mocker)
    # (claimed long enough ago that every re-enqueue below comes after the claim)
    stale_claim = ago(broker_redelivery_seconds() + running_stale_seconds())
    Turn.objects.filter(pk=turn.pk).update(claimed_at=stale_claim, enqueued_at=stale_claim - timedelta(seconds=1))
    passes = []
    for _ in range(TURN_MAX_SWEEPS):
        # when: a sweep re-enqueues it, the next pass right after does not, and neither before the interval ends
        passes.append((turns_sweep(), turns_sweep()))
        Turn.objects.filter(pk=turn.pk).update(enqueued_at=ago(broker_redelivery_seconds() - 5))
        passes.append((turns_sweep(),))
        Turn.objects.filter(pk=turn.pk).update(enqueued_at=ago(broker_redelivery_seconds() + 1))
    turn.refresh_from_db()
    assert (turn.status, turn.sweeps, busy_broker.call_count) == (Turn.Status.RUNNING, TURN_MAX_SWEEPS, 3)
    final = turns_sweep()
    # then: the cap fails the turn with a readable error, without another enqueue or a model call
    turn.refresh_from_db()
    assert passes == [(1, 0), (0,)] * TURN_MAX_SWEEPS
    assert final == 0
    assert (turn.status, busy_broker.call_count, turn.reply_message_id) == (Turn.Status.FAILED, 3, None)
    assert turn.error == (
        f"The turn was left running and did not finish after {TURN_MAX_SWEEPS} re-runs by the sweeper "
        "(each past the task's time limit); giving up."
    )
    assert turn.finished_at is not None
    assert llm_stub.requests_for("openai_chat") == []


def test_t2_a_turn_waiting_for_its_celery_retry_is_left_to_it_until_the_broker_could_have_lost_it(
    llm_stub, busy_broker
):
    """A failed attempt stamps the turn as enqueued (its retry is in the broker's hands): the sweeper leaves it to
    the retry while a healthy broker could still hold that, and re-enqueues it past the redelivery interval (Redis
    restarted without persistence), so a lost retry never holds its conversation for good."""
    # given: a turn whose first attempt failed (the model errored), and a later request of its thread waiting
    bot = stub_bot(llm_stub)
    thread = ThreadFactory(bot=bot)
    retrying = rest_turn(thread)
    Turn.objects.filter(pk=retrying.pk).update(status=Turn.Status.RUNNING, attempts=1, queued_at=ago(3600))
    retrying.refresh_from_db()
    ledger.turn_requeue(turn=retrying, error="model error 503", history=[])
    later = rest_turn(thread)
    Turn.objects.filter(pk=later.pk).update(queued_at=ago(3600))
    # when / then: while the broker could hold the retry, nothing is swept (the later one waits behind it)
    assert (turns_sweep(), busy_broker.call_count) == (0, 0)
    # when: the retry was lost (older than the redelivery interval)
    Turn.objects.filter(pk=retrying.pk).update(enqueued_at=ago(broker_redelivery_seconds() + 5))
    swept = turns_sweep()
    # then: the retrying turn is enqueued again, still with its attempt counted; the later one still waits for it
    retrying.refresh_from_db()
    assert (swept, busy_broker.call_count, busy_broker.call_args.kwargs["args"]) == (1, 1, [retrying.pk])
    assert (retrying.status, retrying.attempts) == (Turn.Status.QUEUED, 1)
