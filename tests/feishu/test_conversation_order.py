"""One turn at a time per conversation in a Feishu topic (ARCHITECTURE §11.1 O1-O4, issue 22), through the real
path: signed webhooks -> intake -> the turn pipeline -> the OpenAI SDK against the LLM stub (which records when
each request started and ended) -> lark-oapi against the Feishu stub.

Three @-messages in one topic 0.3 s apart while the model is slow on the first. The first message's webhook runs
its turn in a thread of its own (eager Celery runs it inside the request); the others arrive while it runs.
"""

import threading
import time

import pytest
from django.db import connection
from django.test import Client

from agents.models import Bot, Provider, Turn
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.feishu.conftest import FeishuHarness
from tests.helpers import wait_for
from tests.stubs.llm_servers import RecordedRequest, StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db(transaction=True)


QUESTIONS = ("draft a plan in three steps", "now list the risks", "and a timeline")
TOPIC = {"root_id": "om_root", "thread_id": "omt_1"}
# The first answer is held until both later webhooks were handled (at most this long), then comes back: the
# in-memory test database (SQLite's shared cache) refuses a second writer at the same instant instead of waiting
# as a file database does, so the test keeps the writers apart in time; the model calls themselves still race.
HOLD_SECONDS = 30


@pytest.fixture(autouse=True)
def no_sleep(mocker):
    return mocker.patch("feishu.outbound.client.time.sleep")


def last_question(request: RecordedRequest) -> str:
    return request.json["messages"][-1]["content"].split("\n")[-1]


def topic_bot(make_feishu_bot, llm_stub, *, queue_mode: str, release: threading.Event) -> Bot:
    def respond(request: RecordedRequest) -> StubResponse:
        if last_question(request) == QUESTIONS[0]:
            release.wait(timeout=HOLD_SECONDS)
        delay = 0.3 if last_question(request) == QUESTIONS[0] else 0.0
        text = "answer to: " + " + ".join(
            line for line in request.json["messages"][-1]["content"].split("\n") if line in QUESTIONS
        )
        return StubResponse(body=openai_chat_body(text=text), delay_seconds=delay)

    llm_stub.respond_with("openai_chat", respond)
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0)
    model = LLMModelFactory(provider=provider, name="gpt-4o")
    return make_feishu_bot(primary_model=model, reply_format="text", queue_mode=queue_mode)


def say_three_quickly(feishu_stub, llm_stub, bot: Bot, release: threading.Event) -> None:
    def first():
        try:
            FeishuHarness(Client(), feishu_stub).say(bot, text=QUESTIONS[0], mention=[bot], message_id="om_1", **TOPIC)
        finally:
            connection.close()

    worker = threading.Thread(target=first, daemon=True)
    worker.start()
    wait_for(lambda: llm_stub.requests_for("openai_chat"), what="the first model call", timeout=30)
    harness = FeishuHarness(Client(), feishu_stub)
    for number, question in enumerate(QUESTIONS[1:], start=2):
        time.sleep(0.3)
        harness.say(bot, text=question, mention=[bot], message_id=f"om_{number}", **TOPIC)
    release.set()  # the first answer comes back now
    worker.join(timeout=60)
    assert not worker.is_alive()


def never_overlapped(spans) -> bool:
    ordered = sorted(spans)
    return all(start >= end for (_, end), (start, _) in zip(ordered, ordered[1:], strict=False))


def replies(feishu_stub) -> list[tuple[str, str]]:
    """(the message replied to, the text) of every reply posted, in the order Feishu got them."""
    return [(sent["parent_id"], feishu_stub.message_text(sent)) for sent in feishu_stub.sent]


def test_followup_in_a_topic_answers_each_message_in_order(feishu_stub, llm_stub, make_feishu_bot):
    # given
    release = threading.Event()
    bot = topic_bot(make_feishu_bot, llm_stub, queue_mode=Bot.QueueMode.FOLLOWUP, release=release)
    # when
    say_three_quickly(feishu_stub, llm_stub, bot, release)
    # then: three model calls one after the other, three replies in order, each under its own message
    assert never_overlapped(llm_stub.spans), sorted(llm_stub.spans)
    assert replies(feishu_stub) == [(f"om_{n}", f"answer to: {q}") for n, q in enumerate(QUESTIONS, start=1)]
    # and the last request held both earlier exchanges, in order, before its question
    roles = [(m["role"], m["content"]) for m in llm_stub.requests_for("openai_chat")[2].json["messages"]]
    answers = [content for role, content in roles if role == "assistant"]
    assert answers == [f"answer to: {QUESTIONS[0]}", f"answer to: {QUESTIONS[1]}"]
    assert QUESTIONS[2] in roles[-1][1] and QUESTIONS[1] not in roles[-1][1]
    assert set(Turn.objects.values_list("status", flat=True)) == {"delivered"}


def test_collect_in_a_topic_answers_the_waiting_messages_with_one_reply_to_the_newest(
    feishu_stub, llm_stub, make_feishu_bot
):
    # given
    release = threading.Event()
    bot = topic_bot(make_feishu_bot, llm_stub, queue_mode=Bot.QueueMode.COLLECT, release=release)
    # when
    say_three_quickly(feishu_stub, llm_stub, bot, release)
    # then: two model calls in order; the second answers both waiting messages, under the newest one
    assert never_overlapped(llm_stub.spans), sorted(llm_stub.spans)
    assert replies(feishu_stub) == [
        ("om_1", f"answer to: {QUESTIONS[0]}"),
        ("om_3", f"answer to: {QUESTIONS[1]} + {QUESTIONS[2]}"),
    ]
    second_input = llm_stub.requests_for("openai_chat")[1].json["messages"]
    assert second_input[-2]["content"] == f"answer to: {QUESTIONS[0]}"
    # each message got the receipt reaction exactly once, and every one was taken off again
    reacted = sorted(request.path.split("/")[-2] for request in feishu_stub.requests_to("reaction_create"))
    assert reacted == ["om_1", "om_2", "om_3"]
    assert len(feishu_stub.requests_to("reaction_delete")) == 3
    statuses = dict(Turn.objects.values_list("source_message_id", "status"))
    assert statuses == {"om_1": "delivered", "om_2": "delivered", "om_3": "skipped"}
