"""Queue mode steer on REST (ARCHITECTURE §11.1 O2, issue 22): a message that arrives while its conversation's turn
is working is taken into that turn at its next tool-call boundary.

The real path: the API, the turn pipeline, the OpenAI SDK against the LLM stub, the real SDK MCP stub server over
stdio. The first model call (which asks for a tool) is held until the test has posted the second message, so the
second arrives while the first turn runs and before its tool boundary; the turn's next model call must hold it.
"""

import threading

import pytest

from agents.mcp.client import mcp_connections_close_all
from agents.models import Bot, Message, Turn
from agents.services.turns.conversation import turns_steer
from agents.tools.loop import STEERED_HEADER
from tests.agents.factories import ThreadFactory
from tests.agents.test_conversation_order import in_background, post, setup_bot
from tests.agents.test_tool_turns import CONNECT_TIMEOUT_SECONDS, stdio_server, warmed
from tests.clients import token_client
from tests.conversation_workers import tool_then_answer
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

FIRST = "check the release notes"
SECOND = "and mention the migration too"


@pytest.fixture(autouse=True)
def _isolation(settings):
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = CONNECT_TIMEOUT_SECONDS
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 10.0
    yield
    mcp_connections_close_all()


def test_steer_takes_a_message_sent_during_the_turn_into_it_at_the_tool_boundary(llm_stub):
    # given: a steering bot with a tool, whose first model call (asking for the tool) waits for the test
    bot = setup_bot(llm_stub, queue_mode=Bot.QueueMode.STEER)
    bot.primary_model.supports_tool_calls = True
    bot.primary_model.save(update_fields=["supports_tool_calls"])
    warmed(stdio_server(bot, allowed=("echo",)))
    thread = ThreadFactory(bot=bot)
    release = threading.Event()

    llm_stub.respond_with("openai_chat", tool_then_answer(release, answer="Both done."))
    # when: the first message, then the second while the first turn's model call is still out
    first: list[int] = []
    worker = in_background(lambda: first.append(post(bot, thread, FIRST)))
    wait_for(lambda: llm_stub.requests_for("openai_chat"), what="the first model call", timeout=30)
    second = post(bot, thread, SECOND)
    release.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    # then: two model calls in all; the second, after the tool's result, holds the second message
    requests = llm_stub.requests_for("openai_chat")
    assert len(requests) == 2
    after_tool = [(m["role"], m["content"]) for m in requests[1].json["messages"]][-2:]
    assert after_tool[0] == ("tool", "echo: notes")
    assert after_tool[1] == ("user", f"{STEERED_HEADER}\n{SECOND}")
    assert SECOND not in str(requests[0].json["messages"])
    # and the second turn is skipped, linked to the first, which lists it; one answer in the thread
    client = token_client(bot.owner)
    shown = {pk: client.get(f"/api/v1/turns/{pk}/").json() for pk in (first[0], second)}
    assert shown[first[0]]["status"] == "delivered"
    assert shown[second]["status"] == "skipped"
    assert shown[second]["answered_by"] == first[0]
    assert shown[first[0]]["answers_also"] == [second]
    assert Turn.objects.get(pk=first[0]).channel_state["steered"] == [second]
    replies = list(Message.objects.filter(thread=thread, kind="agent_reply").values_list("content", flat=True))
    assert replies == ["Both done."]


def test_steer_takes_only_what_collect_would_and_only_into_a_turn_still_running(llm_stub):
    # given: a running turn of a steering bot, and behind it: a request, a discuss wake, a request another run
    # already claimed, and a request of another thread
    bot = setup_bot(llm_stub, queue_mode=Bot.QueueMode.STEER)
    thread, other_thread = ThreadFactory(bot=bot), ThreadFactory(bot=bot)

    def turn(trigger=Turn.Trigger.REST, *, status=Turn.Status.QUEUED, attempts=0, on=thread) -> Turn:
        source = f"m{Turn.objects.count()}"
        return Turn.objects.create(
            bot=bot, thread=on, trigger=trigger, status=status, attempts=attempts, source_message_id=source
        )

    running = turn(status=Turn.Status.RUNNING, attempts=1)
    waiting = turn()
    wake = turn(Turn.Trigger.DISCUSS)
    claimed = turn(status=Turn.Status.RUNNING, attempts=1)
    elsewhere = turn(on=other_thread)
    # when / then: the request is taken, once; the others are left as they were
    assert turns_steer(turn=running) == [waiting.pk]
    assert turns_steer(turn=running) == []
    running.refresh_from_db()
    assert running.channel_state == {"collected": [waiting.pk], "steered": [waiting.pk]}
    waiting.refresh_from_db()
    assert (waiting.status, waiting.channel_state["collected_into"]) == ("skipped", running.pk)
    assert [Turn.objects.get(pk=t.pk).status for t in (wake, claimed, elsewhere)] == ["queued", "running", "queued"]
    # and a turn that is no longer running (its claim went to another run, or it finished) takes nothing
    late = turn()
    Turn.objects.filter(pk=running.pk).update(status=Turn.Status.REPLIED)
    assert turns_steer(turn=running) == []
    assert Turn.objects.get(pk=late.pk).status == "queued"
