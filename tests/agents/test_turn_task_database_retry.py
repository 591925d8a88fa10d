"""T2: a turn whose run the database interrupted is retried by its task within seconds, from the claim, a bounded
number of times; past the bound it is left to the sweeper, as before."""

import pytest
from celery.exceptions import Retry
from django.db import InterfaceError, OperationalError

from agents.models import Message, Thread, Turn
from agents.services.turns import runner
from agents.tasks import DATABASE_RETRY_COUNTDOWNS_SECONDS, turn_run_task
from tests.agents.factories import ThreadFactory
from tests.agents.test_turns import rest_turn, stub_bot
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db


def database_fails(mocker, *, times: int, error: Exception) -> list[int]:
    """The model call step raises `error` on its first `times` runs (after the claim committed), then works."""
    complete = runner._complete
    calls: list[int] = []

    def flaky(**kwargs):
        calls.append(kwargs["turn"].pk)
        if len(calls) <= times:
            raise error
        return complete(**kwargs)

    mocker.patch("agents.services.turns.runner._complete", side_effect=flaky)
    return calls


@pytest.fixture
def broker_retry(mocker):
    """The task as a worker runs it: `retry` hands the broker a later copy (recorded here) and ends this run."""
    return mocker.patch.object(turn_run_task, "retry", side_effect=lambda **kwargs: Retry(when=kwargs["countdown"]))


@pytest.mark.parametrize("error", [OperationalError("server closed the connection"), InterfaceError("closed")])
def test_t2_a_run_the_database_interrupted_is_retried_from_the_claim_and_ends_with_one_reply(
    llm_stub, mocker, broker_retry, error
):
    # given: a turn whose first run loses the database after its claim
    thread: Thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread, "hello")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="hi alice")))
    calls = database_fails(mocker, times=1, error=error)
    # when: the worker runs the task; it asks the broker for a retry
    with pytest.raises(Retry):
        turn_run_task(turn.pk)
    # then: in seconds, not after the sweeper's time limit, carrying the count of database retries
    assert broker_retry.call_count == 1
    assert broker_retry.call_args.kwargs["countdown"] == DATABASE_RETRY_COUNTDOWNS_SECONDS[0]
    assert broker_retry.call_args.kwargs["kwargs"] == {"turn_id": turn.pk, "database_retries": 1}
    turn.refresh_from_db()
    assert (turn.status, turn.attempts) == (Turn.Status.RUNNING, 1)
    # when: the broker delivers the retry
    outcome = turn_run_task(**broker_retry.call_args.kwargs["kwargs"])
    # then: claimed again, delivered with exactly one reply and one model call
    turn.refresh_from_db()
    assert outcome == Turn.Status.DELIVERED
    assert (len(calls), turn.status, turn.attempts, turn.error) == (2, Turn.Status.DELIVERED, 2, "")
    replies = list(
        Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    )
    assert replies == ["hi alice"]
    assert len(llm_stub.requests_for("openai_chat")) == 1


def test_t2_database_retries_wait_longer_each_time_and_stop_after_the_last_countdown(llm_stub, mocker, broker_retry):
    # given: every run loses the database after its claim
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    calls = database_fails(mocker, times=100, error=OperationalError("server closed the connection"))
    # when: the worker runs the task and each retry the broker delivers
    kwargs = {"turn_id": turn.pk}
    for _ in DATABASE_RETRY_COUNTDOWNS_SECONDS:
        with pytest.raises(Retry):
            turn_run_task(**kwargs)
        kwargs = broker_retry.call_args.kwargs["kwargs"]
    # then: the last retry lets the error propagate (no further retry); the sweeper re-runs the turn later
    with pytest.raises(OperationalError):
        turn_run_task(**kwargs)
    assert [call.kwargs["countdown"] for call in broker_retry.call_args_list] == list(DATABASE_RETRY_COUNTDOWNS_SECONDS)
    assert len(calls) == 1 + len(DATABASE_RETRY_COUNTDOWNS_SECONDS)
    turn.refresh_from_db()
    assert turn.status == Turn.Status.RUNNING
    assert llm_stub.requests_for("openai_chat") == []


def test_t2_run_eagerly_a_database_error_is_retried_at_once_within_the_same_bound(llm_stub, mocker):
    # given: no broker (the embedded default's eager tests): the database stays away
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    calls = database_fails(mocker, times=100, error=OperationalError("server closed the connection"))
    # when / then: retried in-process as many times as a worker would, then the error propagates
    with pytest.raises(OperationalError):
        turn_run_task.apply(args=[turn.pk], throw=True)
    assert len(calls) == 1 + len(DATABASE_RETRY_COUNTDOWNS_SECONDS)
