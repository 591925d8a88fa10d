"""U5 and U6 over REST: a decision after the deadline is refused, and turns, approvals and usage are the bot owner's,
or staff's who hold the matching model permissions; staff without them see nothing of other owners.

End to end as test_tool_approvals.py: the real OpenAI SDK against the LLM stub, the real MCP SDK against the stub
server (the `counter` tool counts its runs in a file, so "never ran" is a fact of the tool process).
"""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import ToolApproval, ToolApprovalDecision, Turn, TurnToolCall
from agents.services.turns import turns_sweep
from agents.services.turns.approvals import TIMED_OUT_TEXT
from tests.agents.factories import BotFactory, UserFactory, staff_user
from tests.agents.test_tool_approvals import (  # noqa: F401 - _fresh, counter_file and mcp_url are fixtures
    _fresh,
    answer,
    call,
    counter_file,
    decide,
    gated_server,
    mcp_url,
    runs,
)
from tests.agents.test_tool_turns import rest_say, rest_setup
from tests.clients import token_client

pytestmark = pytest.mark.django_db

DECIDERS = ("agents.view_turn", "agents.change_toolapproval")


@pytest.fixture
def waiting(llm_stub, mcp_url, counter_file):
    """The owner's REST turn, waiting on the gated `counter` call; the model will answer "done" once decided."""
    client, bot, thread = rest_setup(llm_stub)
    gated_server(bot, mcp_url, approval_timeout_seconds=10)
    llm_stub.enqueue("openai_chat", call(("ops__counter", {})), answer("done"))
    turn = rest_say(client, thread, "count")
    assert turn["status"] == "awaiting_approval"
    return {"owner": client, "bot": bot, "turn_id": turn["id"]}


def test_u5_a_rest_decision_after_the_deadline_is_a_409_and_the_timeout_is_recorded_once(waiting, counter_file):
    # given: the 10 s deadline passed 3 s ago
    turn_id = waiting["turn_id"]
    ToolApproval.objects.filter(turn_id=turn_id).update(expires_at=timezone.now() - timedelta(seconds=3))

    # when: the owner allows it
    response = decide(waiting["owner"], turn_id, "allow_once")

    # then: refused with a sentence; the deadline's denial is recorded as the sweeper records it; the tool never ran
    assert response.status_code == 409
    assert "expired" in response.json()["message"]
    decision = ToolApprovalDecision.objects.get()
    assert (decision.outcome, decision.via, decision.decided_by) == ("timeout", "sweeper", "")
    turn = Turn.objects.get(pk=turn_id)
    assert (turn.status, turn.reply_message.content) == ("delivered", "done")
    assert TurnToolCall.objects.get(turn=turn).result == TIMED_OUT_TEXT.format(name="ops__counter", seconds=10)
    assert runs(counter_file) == 0

    # and: another try and the sweeper change nothing
    assert decide(waiting["owner"], turn_id, "allow_once").status_code == 409
    turns_sweep()
    assert ToolApprovalDecision.objects.count() == 1 and runs(counter_file) == 0


def test_u6_staff_without_permissions_get_a_404_for_another_owners_turn_and_cannot_decide_it(waiting, counter_file):
    # given: a staff user holding no permissions
    client = token_client(staff_user("bare-staff"))
    turn_id = waiting["turn_id"]

    # when
    read = client.get(f"/api/v1/turns/{turn_id}/")
    decided = decide(client, turn_id, "allow_once")

    # then: the turn is not theirs to see (the same 404 as a missing id); nothing decided, nothing ran
    assert (read.status_code, read.json()["message"]) == (404, "Turn not found.")
    assert (decided.status_code, decided.json()["message"]) == (404, "Turn not found.")
    assert not ToolApprovalDecision.objects.exists()
    assert Turn.objects.get(pk=turn_id).status == "awaiting_approval"
    assert runs(counter_file) == 0


def test_u6_staff_who_may_view_turns_read_it_but_deciding_takes_the_change_permission(waiting, counter_file):
    # given: staff allowed to view turns, not to change approvals
    client = token_client(staff_user("reader", "agents.view_turn"))
    turn_id = waiting["turn_id"]

    # when
    read = client.get(f"/api/v1/turns/{turn_id}/")
    decided = decide(client, turn_id, "allow_once")

    # then: they read it; deciding is a 403 with a sentence; nothing decided, nothing ran
    assert read.status_code == 200 and read.json()["pending_approval"]["tool"] == "counter"
    assert decided.status_code == 403 and "change tool approvals" in decided.json()["message"]
    assert not ToolApprovalDecision.objects.exists() and runs(counter_file) == 0


def test_u6_staff_holding_the_permissions_decide_another_owners_approval(waiting, counter_file):
    # given
    client = token_client(staff_user("operator", *DECIDERS))

    # when
    response = decide(client, waiting["turn_id"], "allow_once")

    # then
    assert response.status_code == 200, response.content
    assert ToolApprovalDecision.objects.get().decided_by == "operator"
    assert Turn.objects.get(pk=waiting["turn_id"]).status == "delivered" and runs(counter_file) == 1


def test_u6_usage_lists_another_owners_bots_only_to_a_superuser_or_staff_who_may_view_bots_and_turns():
    # given: two owners' bots; a staff user owning one bot of their own
    BotFactory(slug="planner", owner=UserFactory(username="alice"))
    BotFactory(slug="vault", owner=UserFactory(username="bob"))
    bare = staff_user("bare-staff")
    BotFactory(slug="mine", owner=bare)
    viewers = {
        "bare staff": bare,
        "bots only": staff_user("bots-only", "agents.view_bot"),
        "bots and turns": staff_user("auditor", "agents.view_bot", "agents.view_turn"),
        "superuser": UserFactory(username="root", is_staff=True, is_superuser=True),
    }

    # when
    listed = {
        name: [row["bot"] for row in token_client(user).get("/api/v1/usage/").json()["bots"]]
        for name, user in viewers.items()
    }

    # then
    assert listed == {
        "bare staff": ["mine"],
        "bots only": [],
        "bots and turns": ["mine", "planner", "vault"],
        "superuser": ["mine", "planner", "vault"],
    }


def test_u6_thread_lists_follow_the_same_rule(waiting):
    # given: the owner's thread; a staff user without permissions and one who may view threads
    bare = token_client(staff_user("bare-staff"))
    viewer = token_client(staff_user("viewer", "agents.view_thread"))

    # when / then: staff without the permission list none of it and get a 404 for the thread
    assert bare.get("/api/v1/threads/").json()["count"] == 0
    thread_id = Turn.objects.get(pk=waiting["turn_id"]).thread_id
    assert bare.get(f"/api/v1/threads/{thread_id}/history/").status_code == 404
    assert viewer.get("/api/v1/threads/").json()["count"] == 1
    assert viewer.get(f"/api/v1/threads/{thread_id}/history/").status_code == 200
