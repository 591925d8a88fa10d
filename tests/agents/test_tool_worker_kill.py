"""M2 under a crash, through a real Celery worker process (REDIS_URL set, PostgreSQL): a worker SIGKILLed in the
middle of a tool loop; the broker redelivers the turn (acks_late) and the re-run continues from the recorded calls.

The `counter` tool of the MCP stub counts its own invocations in a file, so the tests read how often the tool
really ran, not what the hub believes. Proved here:
- a call that completed before the crash is replayed to the model from its TurnToolCall row, never run again;
- a call in flight at the crash was never recorded, so the re-run may run it again (what docs/tools.md and
  agents.tools.turn_tools document: only tools safe to repeat should be allowed where this matters).
"""

import json

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import McpServer, Message, Provider, Turn, TurnToolCall
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from tests.stubs.mcp_server import stdio_command

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

WAIT_SECONDS = 120  # the worker starts the MCP stub server (seconds under load) before the first call
# Importing the SDK's server takes the stub tens of seconds on a loaded 2-core machine: more than the default.
WORKER_CONNECT_TIMEOUT_SECONDS = "90"


@pytest.fixture
def tool_worker(celery_worker):
    """The session's worker, restarted once with a connect timeout the stub server's start-up fits in."""
    if celery_worker.env.get("AMUX_TOOL_CONNECT_TIMEOUT_SECONDS") != WORKER_CONNECT_TIMEOUT_SECONDS:
        celery_worker.env["AMUX_TOOL_CONNECT_TIMEOUT_SECONDS"] = WORKER_CONNECT_TIMEOUT_SECONDS
        celery_worker.stop()
        celery_worker.start()
    return celery_worker


def counter_setup(llm_stub, counter_file):
    owner = UserFactory(username="owner")
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=60
    )
    bot = BotFactory(
        owner=owner,
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True),
        tool_time_budget_seconds=60.0,
        tool_call_timeout_seconds=60.0,
    )
    command, args = stdio_command()
    McpServer.objects.create(
        bot=bot,
        name="stub",
        command=command,
        args=args,
        environment=json.dumps({"STUB_COUNTER_FILE": str(counter_file)}),
        allowed_tools=["counter"],
    )
    thread = ThreadFactory(bot=bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")
    return client, thread


def post(client, thread, text: str) -> int:
    response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": text}, format="json")
    assert response.status_code == 202
    return response.json()["turn_id"]


def calls_of(turn_id: int) -> list[tuple]:
    return list(TurnToolCall.objects.filter(turn_id=turn_id).values_list("step", "index", "tool", "status", "result"))


def test_m2_a_worker_killed_after_a_completed_call_reruns_the_turn_without_repeating_it(
    tool_worker, llm_stub, tmp_path
):
    # given: step 1 calls the counter; step 2's model call is slow, so the worker dies inside it
    counter = tmp_path / "count"
    client, thread = counter_setup(llm_stub, counter)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="too late"), delay_seconds=15))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Counted once, after the restart.")))
    turn_id = post(client, thread, "count for me")
    wait_for(
        lambda: len(llm_stub.requests_for("openai_chat")) == 2,
        timeout=WAIT_SECONDS,
        worker=tool_worker,
        what="step 2's model call",
    )
    assert calls_of(turn_id) == [(1, 0, "counter", "ok", "count=1")]  # recorded before step 2 began
    assert Turn.objects.get(pk=turn_id).status == Turn.Status.RUNNING

    # when: kill -9 the worker (and with it the MCP server it started), then start it again
    tool_worker.kill()
    tool_worker.start()

    # then: the redelivered turn continues from the record: the counter ran once, the model got its result back
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.DELIVERED,
        timeout=WAIT_SECONDS,
        worker=tool_worker,
        what="the redelivered turn",
    )
    assert counter.read_text() == "x"
    assert calls_of(turn_id) == [(1, 0, "counter", "ok", "count=1")]
    rerun = llm_stub.requests_for("openai_chat")[2].json
    assert rerun["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "count=1"}
    assert rerun["messages"][-2]["tool_calls"][0]["function"]["name"] == "stub__counter"
    replies = list(
        Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    )
    assert replies == ["Counted once, after the restart."]
    assert Turn.objects.get(pk=turn_id).attempts == 2
    assert len(llm_stub.requests_for("openai_chat")) == 3


def test_m2_a_call_in_flight_when_the_worker_dies_may_run_again_and_is_recorded_once(tool_worker, llm_stub, tmp_path):
    # given: the counter counts, then takes 60 s to answer; the worker dies while it is running
    counter = tmp_path / "count"
    client, thread = counter_setup(llm_stub, counter)
    llm_stub.enqueue(
        "openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {"seconds": 60})]))
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Counted.")))
    turn_id = post(client, thread, "count for me")
    wait_for(lambda: counter.exists(), timeout=WAIT_SECONDS, worker=tool_worker, what="the counter to start")
    assert calls_of(turn_id) == []  # in flight: not recorded

    # when
    tool_worker.kill()
    tool_worker.start()

    # then: the re-run asked the model again, which called the counter again: it ran twice, one row records it
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.DELIVERED,
        timeout=WAIT_SECONDS,
        worker=tool_worker,
        what="the redelivered turn",
    )
    assert counter.read_text() == "xx"
    assert calls_of(turn_id) == [(1, 0, "counter", "ok", "count=2")]
    assert Turn.objects.get(pk=turn_id).reply_message.content == "Counted."
