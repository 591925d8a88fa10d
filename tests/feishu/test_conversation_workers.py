"""One turn at a time per conversation across two real worker processes (ARCHITECTURE §11.1 O1-O4, issue 22), on
PostgreSQL + Redis (REDIS_URL set, DATABASE_URL PostgreSQL; skipped otherwise, like every `celery_worker` test).

Three quick messages with a slow first model answer, in each queue mode, on a REST thread (the API, the workers,
the OpenAI SDK against the LLM stub) and in a Feishu topic (signed webhooks -> intake -> the workers -> lark-oapi
against the Feishu stub); the scenario and its checks are tests/conversation_workers.py. The steering bot uses a
tool (the MCP stub over HTTP), so the later messages are taken into the running turn in one process while their
own turns were deferred in the other. And two conversations still run side by side.
"""

import pytest
from django.test import Client

from agents.models import Bot, McpServer, Provider, Turn
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound import webhook_bots
from feishu.outbound import client as feishu_client
from feishu.outbound.sdk import LocalCache, TokenManager
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.clients import token_client
from tests.conversation_workers import (
    FINAL_STATUSES,
    QUESTIONS,
    WAIT_SECONDS,
    WorkerLogs,
    answer_to,
    assert_each_input_holds_the_earlier_answers,
    assert_never_overlapped,
    assert_rest_conversation,
    assert_rest_conversations_run_side_by_side,
    assert_spread_over_both_workers,
    assert_steered_into_the_first_turn,
    model_for,
    rest_three_quickly,
    send_three_quickly,
)
from tests.feishu.conftest import FeishuHarness
from tests.helpers import wait_for
from tests.stubs.feishu_server import FeishuStubServer
from tests.stubs.mcp_server import http_server_running

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

QUEUE_MODES = [Bot.QueueMode.COLLECT, Bot.QueueMode.FOLLOWUP, Bot.QueueMode.STEER]


@pytest.fixture(scope="module")
def feishu_server():
    """One Feishu stub for the module: the workers are started pointed at it (a test's own would need a restart)."""
    server = FeishuStubServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def celery_worker_env(feishu_server) -> dict[str, str]:
    return {"AMUX_TEST_FEISHU_DOMAIN": feishu_server.url}


@pytest.fixture(scope="module")
def mcp_url():
    """The MCP stub over HTTP for the module, reached by both workers (the steering bot's tool)."""
    with http_server_running() as url:
        yield url


@pytest.fixture
def logs(celery_worker_pair) -> WorkerLogs:
    return WorkerLogs(celery_worker_pair)


@pytest.fixture
def feishu(settings, feishu_server) -> FeishuHarness:
    """The module's Feishu stub for this process too (the webhook's side), its SDK caches fresh."""
    settings.FEISHU_DOMAIN = feishu_server.url
    TokenManager.cache = LocalCache()
    feishu_client._clients.clear()
    feishu_webhook._handlers.clear()
    webhook_bots._bots.clear()
    yield FeishuHarness(Client(), feishu_server.stub)
    TokenManager.cache = LocalCache()


def primary_model(llm_stub):
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=60
    )
    return LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True)


def tool_for_steer(bot: Bot, mcp_url: str) -> Bot:
    """A steering bot gets the MCP stub's echo tool: its turn has a tool step for the later messages to join."""
    if bot.queue_mode == Bot.QueueMode.STEER:
        McpServer.objects.create(
            bot=bot, name="stub", transport=McpServer.Transport.STREAMABLE_HTTP, url=mcp_url, allowed_tools=["echo"]
        )
    return bot


def rest_api(user):
    client = token_client(user)

    def call(method: str, path: str, body: dict | None = None):
        response = client.post(path, body, format="json") if method == "post" else client.get(path)
        return response.status_code, response.json()

    return call


@pytest.mark.parametrize("queue_mode", QUEUE_MODES)
def test_three_quick_messages_on_a_rest_thread_with_two_workers(logs, llm_stub, mcp_url, queue_mode):
    # given
    owner = UserFactory(username="owner")
    bot = BotFactory(owner=owner, primary_model=primary_model(llm_stub), queue_mode=queue_mode)
    thread = ThreadFactory(bot=tool_for_steer(bot, mcp_url))
    rest = rest_api(owner)
    # when
    model = model_for(llm_stub, queue_mode=queue_mode)
    turn_ids = rest_three_quickly(rest, thread_id=thread.pk, model=model, logs=logs)
    # then
    assert_rest_conversation(rest, llm_stub, thread_id=thread.pk, turn_ids=turn_ids, queue_mode=queue_mode, logs=logs)


@pytest.mark.parametrize("queue_mode", QUEUE_MODES)
def test_three_quick_messages_in_a_feishu_topic_with_two_workers(
    logs, llm_stub, mcp_url, feishu, make_feishu_bot, queue_mode
):
    # given: a bot in a topic; the messages' ids are this test's own (the stub lives for the module)
    bot = make_feishu_bot(primary_model=primary_model(llm_stub), reply_format="text", queue_mode=queue_mode)
    tool_for_steer(bot, mcp_url)
    topic = {"root_id": f"om_root_{bot.slug}", "thread_id": f"omt_{bot.slug}"}
    message_ids = [f"om_{bot.slug}_{number}" for number in (1, 2, 3)]

    def say(number: int, question: str) -> None:
        response, _ = feishu.say(bot, text=question, mention=[bot], message_id=message_ids[number - 1], **topic)
        assert response.status_code == 200

    # when
    send_three_quickly(say, model=model_for(llm_stub, queue_mode=queue_mode), logs=logs)
    # then: every turn finished, one reply per answer, in the order of the requests, under the newest it answers
    expected = dict.fromkeys(message_ids, "delivered")
    if queue_mode == Bot.QueueMode.FOLLOWUP:
        answered, answering = [[question] for question in QUESTIONS], message_ids
    elif queue_mode == Bot.QueueMode.COLLECT:
        answered, answering = [[QUESTIONS[0]], list(QUESTIONS[1:])], [message_ids[0], message_ids[2]]
        expected[message_ids[2]] = "skipped"  # its request is answered by the second turn's reply
    else:
        answered, answering = [list(QUESTIONS)], [message_ids[2]]
        expected.update(dict.fromkeys(message_ids[1:], "skipped"))  # taken into the first turn

    def replies() -> list[tuple[str, str]]:
        sent = [s for s in feishu.stub.sent if s["app_id"] == bot.feishu_app_id]
        return [(s["parent_id"], feishu.stub.message_text(s)) for s in sent]

    def statuses() -> dict[str, str]:
        return dict(Turn.objects.filter(bot=bot).values_list("source_message_id", "status"))

    wait_for(
        lambda: len(statuses()) == 3 and set(statuses().values()) <= set(FINAL_STATUSES),
        what="every turn finished",
        timeout=WAIT_SECONDS,
        worker=logs,
    )
    assert replies() == [(parent, answer_to(*questions)) for parent, questions in zip(answering, answered, strict=True)]
    assert statuses() == expected
    # each message got the receipt reaction once
    reacted = [r.path.split("/")[-2] for r in feishu.stub.requests_to("reaction_create")]
    assert sorted(m for m in reacted if m in message_ids) == message_ids
    assert_spread_over_both_workers(logs)
    assert_never_overlapped(llm_stub.spans)
    if queue_mode == Bot.QueueMode.STEER:
        assert_steered_into_the_first_turn(llm_stub)
    else:
        assert_each_input_holds_the_earlier_answers(llm_stub, answered=answered)


def test_two_conversations_still_run_side_by_side_on_two_workers(logs, llm_stub):
    # given: two threads of one bot
    owner = UserFactory(username="owner")
    bot = BotFactory(owner=owner, primary_model=primary_model(llm_stub))
    threads = [ThreadFactory(bot=bot), ThreadFactory(bot=bot)]
    # when / then
    assert_rest_conversations_run_side_by_side(
        rest_api(owner), llm_stub, thread_ids=[thread.pk for thread in threads], logs=logs
    )
