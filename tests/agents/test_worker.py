"""T2 through a real Celery worker process (REDIS_URL set, PostgreSQL): REST chat round trip, and a worker
SIGKILLed mid-turn whose turn completes exactly once after a restart (acks_late + an idempotent turn)."""

import time

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Message, Provider, Turn
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def chat_setup(llm_stub):
    owner = UserFactory(username="owner")
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=30
    )
    bot = BotFactory(owner=owner, primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    thread = ThreadFactory(bot=bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")
    return client, thread


def test_t2_rest_chat_round_trip_through_a_real_worker(celery_worker, llm_stub):
    # given
    client, thread = chat_setup(llm_stub)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Hello from the worker.")))
    # when
    response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "hi"}, format="json")
    turn_id = response.json()["turn_id"]
    # then
    assert response.status_code == 202
    status = wait_for(
        lambda: client.get(f"/api/v1/turns/{turn_id}/").json()["status"] in ("delivered", "failed"),
        worker=celery_worker,
        what="the turn to finish",
    )
    assert status
    body = client.get(f"/api/v1/turns/{turn_id}/").json()
    assert (body["status"], body["attempts"], body["error"]) == ("delivered", 1, "")
    history = client.get(f"/api/v1/threads/{thread.pk}/history/").json()["results"]
    assert [(m["kind"], m["content"]) for m in history] == [
        ("agent_reply", "Hello from the worker."),
        ("user_message", "hi"),
    ]


def test_t2_worker_sigkilled_mid_turn_completes_exactly_once_after_restart(celery_worker, llm_stub):
    # given: the model answers slowly the first time, so the worker is mid-turn when it dies
    client, thread = chat_setup(llm_stub)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="too late"), delay_seconds=8))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="after the restart")))
    turn_id = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "hi"}, format="json").json()["turn_id"]
    wait_for(lambda: llm_stub.requests_for("openai_chat"), worker=celery_worker, what="the model call")
    assert Turn.objects.get(pk=turn_id).status == Turn.Status.RUNNING
    # when: kill -9 the worker, then start it again
    celery_worker.kill()
    celery_worker.start()
    # then: the broker redelivers the unacknowledged task and the turn completes once
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.DELIVERED,
        worker=celery_worker,
        what="the redelivered turn",
    )
    turn = Turn.objects.get(pk=turn_id)
    replies = list(
        Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    )
    assert replies == ["after the restart"]
    assert Message.objects.filter(thread=thread, kind=Message.Kind.USER_MESSAGE).count() == 1
    assert turn.attempts == 2
    assert len(llm_stub.requests_for("openai_chat")) == 2
    # and nothing runs it a third time
    time.sleep(1)
    assert Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).count() == 1
