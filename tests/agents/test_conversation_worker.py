"""O1 across a crash, through a real Celery worker process (REDIS_URL set, PostgreSQL; issue 22): a worker
SIGKILLed while a conversation's first turn is with the model, a second message waiting behind it. The killed
turn keeps the conversation only until it is run again (the broker's redelivery, or the sweeper once its claim
is stale); then it answers once and hands the conversation to the waiting turn, whose input holds that answer."""

import pytest

from agents.models import Message, Turn
from tests.agents.test_worker import chat_setup
from tests.helpers import wait_for
from tests.stubs.llm_servers import RecordedRequest, StubResponse, openai_chat_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_a_conversation_continues_in_order_after_its_worker_is_killed_mid_turn(celery_worker, llm_stub):
    # given: the model is slow on its first call only, so the worker is mid-turn when it dies
    calls: list[str] = []

    def respond(request: RecordedRequest) -> StubResponse:
        question = request.json["messages"][-1]["content"]
        calls.append(question)
        delay = 8.0 if len(calls) == 1 else 0.0
        return StubResponse(body=openai_chat_body(text=f"answer to: {question}"), delay_seconds=delay)

    llm_stub.respond_with("openai_chat", respond)
    client, thread = chat_setup(llm_stub)

    def post(text: str) -> int:
        response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": text}, format="json")
        assert response.status_code == 202
        return response.json()["turn_id"]

    first = post("draft a plan")
    wait_for(lambda: calls, worker=celery_worker, what="the first model call")
    second = post("now list the risks")
    # when: kill -9 the worker mid-call, then start it again
    celery_worker.kill()
    celery_worker.start()
    # then: both turns end delivered, in order, each answered once
    wait_for(
        lambda: Turn.objects.get(pk=second).status == Turn.Status.DELIVERED,
        timeout=90,
        worker=celery_worker,
        what="the waiting turn, after the killed one",
    )
    turns = {turn.pk: turn for turn in Turn.objects.filter(pk__in=[first, second])}
    assert turns[first].status == Turn.Status.DELIVERED
    assert turns[first].reply_message_id < turns[second].reply_message_id
    replies = list(
        Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY)
        .order_by("pk")
        .values_list("content", flat=True)
    )
    assert replies == ["answer to: draft a plan", "answer to: now list the risks"]
    # the second message never reached the model before the first one's answer, which its input holds
    assert calls == ["draft a plan", "draft a plan", "now list the risks"]
    assert turns[second].model_input["messages"][-3:] == [
        {"role": "user", "content": "draft a plan"},
        {"role": "assistant", "content": "answer to: draft a plan"},
        {"role": "user", "content": "now list the risks"},
    ]
