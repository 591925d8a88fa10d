"""Approvals of risky tool calls (issue 26, H1) through REST, end to end: the real OpenAI SDK against the LLM stub,
the real MCP SDK against the stub server over streamable HTTP (one process for the module), the turn task eager.

The `counter` tool needs approval; it counts its runs in a file, so "ran exactly once" and "never ran" are facts
of the tool process, not of our records.
"""

import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import TestCase
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.mcp.client import mcp_connections_close_all
from agents.models import McpServer, ToolApproval, ToolApprovalDecision, Turn, TurnToolCall
from agents.services.turns import turns_sweep
from agents.services.turns.approvals import DENIED_TEXT, TIMED_OUT_TEXT, arguments_shown
from tests.agents.factories import ThreadFactory, UserFactory
from tests.agents.test_tool_turns import rest_say, rest_setup
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from tests.stubs.mcp_server import http_server_running

pytestmark = pytest.mark.django_db

SECRET = "sk-provider-key-1618"  # the provider's API key (rest_setup): a hub secret the card must never show


@pytest.fixture(scope="module")
def counter_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("approvals") / "counter"


@pytest.fixture(scope="module")
def mcp_url(counter_file) -> Iterator[str]:
    """One MCP stub process over HTTP for the module; its `counter` tool counts into `counter_file`."""
    before = os.environ.get("STUB_COUNTER_FILE")
    os.environ["STUB_COUNTER_FILE"] = str(counter_file)
    try:
        with http_server_running() as url:
            yield url
    finally:
        if before is None:
            os.environ.pop("STUB_COUNTER_FILE", None)
        else:
            os.environ["STUB_COUNTER_FILE"] = before


@pytest.fixture(autouse=True)
def _fresh(counter_file, settings) -> Iterator[None]:
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 60.0
    counter_file.write_text("")
    yield
    mcp_connections_close_all()


def runs(counter_file: Path) -> int:
    return len(counter_file.read_text())


def gated_server(bot, url: str, **fields) -> McpServer:
    return McpServer.objects.create(
        bot=bot,
        name="ops",
        transport=McpServer.Transport.STREAMABLE_HTTP,
        url=url,
        allowed_tools=["echo", "counter"],
        approval_tools=["counter"],
        **fields,
    )


def call(*names_and_args) -> StubResponse:
    return StubResponse(body=openai_chat_body(tool_calls=list(names_and_args)))


def answer(text: str) -> StubResponse:
    return StubResponse(body=openai_chat_body(text=text))


def decide(client, turn_id: int, decision: str):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(f"/api/v1/turns/{turn_id}/approvals/", {"decision": decision}, format="json")


def test_h1_a_rest_turn_pauses_on_a_gated_call_and_allow_once_runs_it_once_and_resumes(llm_stub, mcp_url, counter_file):
    # given: the model echoes (no approval needed), then calls counter (needs one) with a secret in its arguments
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue(
        "openai_chat",
        call(("ops__echo", {"text": "first"}), ("ops__counter", {"seconds": 0, "note": f"key {SECRET} " + "y" * 500})),
        answer("Counted once."),
    )

    # when
    turn = rest_say(client, thread, "count it")

    # then: the turn waits, the echo before it ran, counter did not; the API shows the pending call, redacted and cut
    assert turn["status"] == "awaiting_approval"
    assert runs(counter_file) == 0
    assert list(TurnToolCall.objects.filter(turn_id=turn["id"]).values_list("tool", "status")) == [("echo", "ok")]
    pending = turn["pending_approval"]
    assert (pending["server"], pending["tool"], pending["requested_by"], pending["decision"]) == (
        "ops",
        "counter",
        "owner",
        None,
    )
    assert SECRET not in json.dumps(turn) and "y" * 300 not in pending["arguments"]
    assert len(llm_stub.requests_for("openai_chat")) == 1

    # when: the owner allows it once
    response = decide(client, turn["id"], "allow_once")

    # then: the call ran exactly once, the echo was not repeated, the model got both results and answered
    assert response.status_code == 200, response.content
    final = client.get(f"/api/v1/turns/{turn['id']}/").json()
    assert (final["status"], final["reply"]["content"]) == ("delivered", "Counted once.")
    assert runs(counter_file) == 1
    assert list(TurnToolCall.objects.filter(turn_id=turn["id"]).values_list("step", "index", "tool", "status")) == [
        (1, 0, "echo", "ok"),
        (1, 1, "counter", "ok"),
    ]
    second = llm_stub.requests_for("openai_chat")[1].json
    assert [m.get("content") for m in second["messages"] if m["role"] == "tool"] == ["echo: first", "count=1"]
    assert final["approvals"][0]["decision"]["outcome"] == "allow_once"
    assert final["approvals"][0]["decision"]["decided_by"] == "owner"
    assert final["pending_approval"] is None

    # and: a second decision is refused, nothing runs again
    assert decide(client, turn["id"], "deny").status_code == 409
    assert runs(counter_file) == 1


def test_h1_deny_tells_the_model_and_the_tool_never_runs(llm_stub, mcp_url, counter_file):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("I was not allowed to count."))
    turn = rest_say(client, thread, "count it")

    decide(client, turn["id"], "deny")

    final = client.get(f"/api/v1/turns/{turn['id']}/").json()
    assert (final["status"], final["reply"]["content"]) == ("delivered", "I was not allowed to count.")
    assert runs(counter_file) == 0
    row = TurnToolCall.objects.get(turn_id=turn["id"])
    assert (row.status, row.result) == ("denied", DENIED_TEXT.format(name="ops__counter"))
    assert llm_stub.requests_for("openai_chat")[1].json["messages"][-1]["content"] == row.result


def test_h1_allow_in_this_conversation_skips_the_next_approval_in_the_thread_only(llm_stub, mcp_url, counter_file):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("one"))
    first = rest_say(client, thread, "count")
    decide(client, first["id"], "allow_conversation")

    # when: the next turn of the same thread calls counter again
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("two"))
    second = rest_say(client, thread, "count again")

    # then: it ran without asking
    assert (second["status"], second["reply"]["content"], second["approvals"]) == ("delivered", "two", [])
    assert runs(counter_file) == 2

    # and: another thread of the same bot still asks
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})))
    third = rest_say(client, ThreadFactory(bot=bot), "count elsewhere")
    assert third["status"] == "awaiting_approval"
    assert runs(counter_file) == 2


def test_h1_no_decision_within_the_timeout_is_a_denial_applied_by_the_sweeper(llm_stub, mcp_url, counter_file):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url, approval_timeout_seconds=30)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("Nobody answered, so I did not count."))
    turn = rest_say(client, thread, "count")
    approval = ToolApproval.objects.get(turn_id=turn["id"])
    assert timedelta(seconds=25) < approval.expires_at - timezone.now() <= timedelta(seconds=30)

    # when: the sweeper runs before, then after the timeout
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()
    assert Turn.objects.get(pk=turn["id"]).status == "awaiting_approval"
    ToolApproval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()

    # then: denied by timeout, the model told so, the turn delivered, the tool never ran
    final = Turn.objects.get(pk=turn["id"])
    assert (final.status, final.reply_message.content) == ("delivered", "Nobody answered, so I did not count.")
    decision = ToolApprovalDecision.objects.get(approval=approval)
    assert (decision.outcome, decision.via) == ("timeout", "sweeper")
    assert TurnToolCall.objects.get(turn=final).result == TIMED_OUT_TEXT.format(name="ops__counter", seconds=30)
    assert runs(counter_file) == 0


def test_h1_a_decision_whose_enqueue_was_lost_is_resumed_by_the_sweeper(llm_stub, mcp_url, counter_file):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("done"))
    turn = rest_say(client, thread, "count")
    approval = ToolApproval.objects.get(turn_id=turn["id"])
    # given: the decision committed, but the process died before its enqueue (no on-commit callback ran)
    ToolApprovalDecision.objects.create(approval=approval, outcome="allow_once", via="rest", decided_by="owner")
    ToolApprovalDecision.objects.filter(approval=approval).update(decided_at=timezone.now() - timedelta(minutes=2))
    Turn.objects.filter(pk=turn["id"]).update(enqueued_at=timezone.now() - timedelta(minutes=3))

    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()

    final = Turn.objects.get(pk=turn["id"])
    assert (final.status, final.reply_message.content) == ("delivered", "done")
    assert runs(counter_file) == 1
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()  # nothing left to resume
    assert runs(counter_file) == 1


def test_h1_only_the_bots_owner_or_staff_may_decide_and_bad_input_is_a_4xx(llm_stub, mcp_url, api_client):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})))
    turn = rest_say(client, thread, "count")
    stranger = UserFactory(username="stranger")
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=stranger).key}")
    assert decide(api_client, turn["id"], "allow_once").status_code == 404
    assert decide(client, turn["id"], "maybe").status_code == 400
    assert not ToolApprovalDecision.objects.exists()
    assert Turn.objects.get(pk=turn["id"]).status == "awaiting_approval"


def test_h1_arguments_shown_redact_secrets_and_cut_long_values():
    shown = arguments_shown({"token": "abc-secret-123", "body": "z" * 5000, "n": 3}, secrets=("abc-secret-123",))
    assert "abc-secret-123" not in shown and "z" * 300 not in shown and '"n": 3' in shown


def test_h1_the_admin_lists_pending_approvals_and_the_turn_page_shows_each_decision(
    llm_stub, mcp_url, admin_client, counter_file
):
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("ok"))
    turn = rest_say(client, thread, "count")
    approval = ToolApproval.objects.get(turn_id=turn["id"])

    pending = admin_client.get("/admin/agents/toolapproval/?decided=no")
    assert pending.status_code == 200 and b"counter" in pending.content and b"pending until" in pending.content

    decide(client, turn["id"], "allow_once")
    assert b"pending until" not in admin_client.get("/admin/agents/toolapproval/?decided=no").content
    page = admin_client.get(f"/admin/agents/turn/{turn['id']}/change/")
    assert page.status_code == 200 and b"Allowed once \xc2\xb7 owner" in page.content
    assert admin_client.get(f"/admin/agents/toolapproval/{approval.pk}/change/").status_code == 200


def test_h1_the_server_form_refuses_approval_for_a_tool_off_the_allowlist():
    from agents.admin.mcp import McpServerForm
    from tests.agents.factories import BotFactory

    form = McpServerForm(
        data={
            "bot": BotFactory().pk,
            "name": "ops",
            "transport": "streamable_http",
            "url": "https://mcp.example.com/mcp",
            "allowed_tools": '["echo"]',
            "approval_tools": '["deploy"]',
            "args": "[]",
            "on_failure": "continue",
            "is_enabled": "on",
        }
    )
    assert not form.is_valid()
    assert "Not on the allowlist: deploy" in str(form.errors["approval_tools"])


def test_h1_o1_a_turn_waiting_for_approval_holds_its_conversation_and_the_next_request_is_answered_after_it(
    llm_stub, mcp_url, counter_file
):
    """A turn paused for a person's approval keeps its place: a later request of the same conversation waits for
    its answer (O1, O4), then runs with that answer in its input (O3)."""
    # given: the first request's model calls a gated tool, then answers; the second request is answered plainly
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url)
    llm_stub.enqueue(
        "openai_chat",
        call(("ops__counter", {"seconds": 0})),
        answer("Counted once."),
        answer("Second answer."),
    )
    first = rest_say(client, thread, "count it")
    assert first["status"] == "awaiting_approval"

    # when: a second message arrives while the first waits for the person
    second = rest_say(client, thread, "and then summarise")

    # then: it waits behind the first; no model call was made for it
    assert second["status"] == "queued"
    assert len(llm_stub.requests_for("openai_chat")) == 1

    # when: the owner allows the call
    decide(client, first["id"], "allow_once")

    # then: the first is answered, then the second, whose model input holds the first answer before its question
    first_after = client.get(f"/api/v1/turns/{first['id']}/").json()
    second_after = client.get(f"/api/v1/turns/{second['id']}/").json()
    assert (first_after["status"], first_after["reply"]["content"]) == ("delivered", "Counted once.")
    assert (second_after["status"], second_after["reply"]["content"]) == ("delivered", "Second answer.")
    assert Turn.objects.get(pk=first["id"]).finished_at <= Turn.objects.get(pk=second["id"]).started_at
    last_input = json.dumps(llm_stub.requests_for("openai_chat")[-1].json, ensure_ascii=False)
    assert last_input.index("Counted once.") < last_input.index("and then summarise")
    assert runs(counter_file) == 1
