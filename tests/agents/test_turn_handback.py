"""Issue 30, finding 10: what a hand-back (a worker stopped mid-turn, core.worker_stop) leaves behind.

The real worker's SIGTERM is tested in test_worker_graceful_stop.py; here the stop is raised at a chosen point of
an eager run, so the ledger's state after it and the re-run it enqueues are read exactly.
"""

import pytest

from agents.models import Message, Turn
from agents.services.turns import turns_sweep
from agents.services.turns.channels import RestChannel
from agents.services.turns.handback import turn_hand_back
from agents.services.turns.ledger import turn_claim
from agents.tasks import turn_run_task
from core.worker_stop import WorkerStopping
from tests.agents.factories import ThreadFactory
from tests.agents.test_turns import rest_turn, stub_bot
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db


def test_i30_10_a_handed_back_run_is_queued_again_unclaimed_and_its_attempt_not_counted(llm_stub, mocker):
    # given: a turn claimed by a run (running, one attempt), the broker taking every task without running it
    busy_broker = mocker.patch.object(turn_run_task, "apply_async")
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    turn_claim(turn_id=turn.pk)
    # when
    enqueued = turn_hand_back(turn_id=turn.pk)
    # then: queued at once for the next worker, and the sweeper leaves it to the broker that holds it
    turn.refresh_from_db()
    assert (enqueued, busy_broker.call_count) == (True, 1)
    assert (turn.status, turn.claimed_at, turn.attempts) == (Turn.Status.QUEUED, None, 0)
    assert turn.enqueued_at is not None
    assert turns_sweep() == 0
    assert llm_stub.requests_for("openai_chat") == []


def test_i30_10_a_stop_after_the_reply_is_stored_delivers_it_once_without_a_second_model_call(llm_stub, mocker):
    # given: the model answers once; the worker is stopped while the reply is being delivered
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Stored before the stop.")))
    turn = rest_turn(ThreadFactory(bot=stub_bot(llm_stub)))
    deliver = mocker.patch.object(RestChannel, "deliver", autospec=True, side_effect=[WorkerStopping(turn.pk), None])
    # when: the task runs (eagerly: the hand-back's re-enqueue runs the turn again at once)
    outcome = turn_run_task.delay(turn.pk).get()
    # then: the hand-back kept the reply, the re-run only delivered it; the model was called once
    turn.refresh_from_db()
    assert (outcome, turn.status) == ("handed back", Turn.Status.DELIVERED)
    assert deliver.call_count == 2
    replies = list(
        Message.objects.filter(thread=turn.thread, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    )
    assert replies == ["Stored before the stop."]
    assert len(llm_stub.requests_for("openai_chat")) == 1
    assert turn.attempts == 1
