"""H1 under a crash, through a real Celery worker (REDIS_URL set, PostgreSQL): the worker resuming an allowed call is
SIGKILLed after the call completed (inside the model's final call); the broker redelivers the turn and it ends once,
the tool having run exactly once (the MCP stub over HTTP counts its own runs in a file)."""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import pytest

from agents.models import McpServer, Message, ToolApprovalDecision, Turn
from tests.agents.test_tool_approvals import counter_file, mcp_url, runs  # noqa: F401 - fixtures
from tests.agents.test_tool_worker_kill import WAIT_SECONDS, calls_of, counter_setup, post
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_h1_a_worker_killed_after_the_decision_resumes_the_turn_exactly_once(
    celery_worker, llm_stub, mcp_url, counter_file
):
    # given: a gated counter over HTTP; after the approval the model's final call is slow, so the worker dies in it
    counter_file.write_text("")
    client, thread = counter_setup(llm_stub, counter_file)
    McpServer.objects.filter(bot=thread.bot).update(
        transport="streamable_http", url=mcp_url, command="", args=[], approval_tools=["counter"]
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__counter", {})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="too late"), delay_seconds=6))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Counted once, after the restart.")))
    turn_id = post(client, thread, "count for me")
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.AWAITING_APPROVAL,
        timeout=WAIT_SECONDS,
        worker=celery_worker,
        what="the pause",
    )
    assert runs(counter_file) == 0

    # when: the owner allows it; the worker resumes, runs the call, and is killed inside the final model call
    assert (
        client.post(f"/api/v1/turns/{turn_id}/approvals/", {"decision": "allow_once"}, format="json").status_code == 200
    )
    wait_for(
        lambda: len(llm_stub.requests_for("openai_chat")) == 2,
        timeout=WAIT_SECONDS,
        worker=celery_worker,
        what="the resumed turn's final model call",
    )
    assert calls_of(turn_id) == [(1, 0, "counter", "ok", "count=1")]
    celery_worker.kill()
    celery_worker.start()

    # then: redelivered, replayed from the record: delivered once, the tool ran once, one decision
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.DELIVERED,
        timeout=WAIT_SECONDS,
        worker=celery_worker,
        what="the redelivered turn",
    )
    assert runs(counter_file) == 1
    assert calls_of(turn_id) == [(1, 0, "counter", "ok", "count=1")]
    replies = Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    assert list(replies) == ["Counted once, after the restart."]
    assert ToolApprovalDecision.objects.count() == 1
