"""Queue mode steer in a Feishu topic (ARCHITECTURE §11.1 O2, issue 22), through the real path: signed webhooks ->
intake -> the turn pipeline -> the OpenAI SDK against the LLM stub, the SDK MCP stub server over stdio -> lark-oapi
against the Feishu stub. A message sent while the bot works (its first model call, asking for a tool, is held
until the message was handled) reaches the running turn at its tool boundary; one reply, under the newest."""

import threading

import pytest
from django.db import connection
from django.test import Client

from agents.mcp.client import mcp_connections_close_all
from agents.models import Bot, Provider, Turn
from agents.tools.loop import STEERED_HEADER
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.agents.test_tool_turns import CONNECT_TIMEOUT_SECONDS, stdio_server, warmed
from tests.conversation_workers import tool_then_answer
from tests.feishu.conftest import FeishuHarness
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOPIC = {"root_id": "om_root", "thread_id": "omt_1"}


@pytest.fixture(autouse=True)
def _isolation(settings, mocker):
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = CONNECT_TIMEOUT_SECONDS
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 10.0
    mocker.patch("feishu.outbound.client.time.sleep")
    yield
    mcp_connections_close_all()


def test_steer_in_a_topic_answers_the_message_sent_during_the_work_in_the_same_reply(
    feishu_stub, llm_stub, make_feishu_bot
):
    # given: a steering bot with a tool; its first model call (asking for the tool) waits for the test
    release = threading.Event()

    llm_stub.respond_with("openai_chat", tool_then_answer(release, answer="Both done."))
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0)
    model = LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True)
    bot = make_feishu_bot(primary_model=model, reply_format="text", queue_mode=Bot.QueueMode.STEER)
    warmed(stdio_server(bot, allowed=("echo",)))

    def first():
        try:
            FeishuHarness(Client(), feishu_stub).say(
                bot, text="check the notes", mention=[bot], message_id="om_1", **TOPIC
            )
        finally:
            connection.close()

    # when: the second message arrives while the first turn's model call is out
    worker = threading.Thread(target=first, daemon=True)
    worker.start()
    wait_for(lambda: llm_stub.requests_for("openai_chat"), what="the first model call", timeout=30)
    FeishuHarness(Client(), feishu_stub).say(bot, text="and the migration", mention=[bot], message_id="om_2", **TOPIC)
    release.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    # then: the model's second call holds the second message after the tool's result
    requests = llm_stub.requests_for("openai_chat")
    assert len(requests) == 2
    last = requests[1].json["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith(STEERED_HEADER)
    assert "and the migration" in last["content"]
    # one reply, under the newest message; each message got its receipt once, and lost it on delivery
    assert [(sent["parent_id"], feishu_stub.message_text(sent)) for sent in feishu_stub.sent] == [
        ("om_2", "Both done.")
    ]
    reacted = sorted(request.path.split("/")[-2] for request in feishu_stub.requests_to("reaction_create"))
    assert reacted == ["om_1", "om_2"]
    assert len(feishu_stub.requests_to("reaction_delete")) == 2
    statuses = dict(Turn.objects.values_list("source_message_id", "status"))
    assert statuses == {"om_1": "delivered", "om_2": "skipped"}
