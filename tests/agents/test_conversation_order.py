"""One turn at a time per conversation, in order (ARCHITECTURE §11.1 O1-O4, issue 22), on REST.

Three messages posted 0.3 s apart while the model is slow on the first, through the real path (the API, the turn
pipeline, the OpenAI SDK against the LLM stub, which records when each request started and ended). The first turn
runs in a thread of its own (eager Celery runs it inside its POST), the others are posted while it runs: they
find their conversation busy, wait without holding anything, and the finishing turn starts the next.
"""

import threading
import time

import pytest
from django.db import connection

from agents.models import Bot, Message, Provider, Turn
from agents.services.turns import turns_sweep
from agents.services.turns.conversation import turn_claim_in_order
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.clients import token_client
from tests.helpers import wait_for
from tests.stubs.llm_servers import LLMStubServer, RecordedRequest, StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db(transaction=True)


# A held answer comes back once the test releases it (at most this long): the in-memory test database (SQLite's
# shared cache) refuses a second writer at the same instant instead of waiting as a file database does, so the
# test keeps the writers apart in time; the model calls themselves still race.
HOLD_SECONDS = 30
QUESTIONS = ("draft a plan in three steps", "now list the risks", "and a timeline")


def answer_of(request: RecordedRequest) -> str:
    return "answer to: " + request.json["messages"][-1]["content"].replace("\n\n", " + ")


def held_answers(stub: LLMStubServer, *, held: dict[str, threading.Event]) -> None:
    """The model answers each request with what it answers; a request for one of `held` waits for its event."""

    def respond(request: RecordedRequest) -> StubResponse:
        release = held.get(request.json["messages"][-1]["content"])
        if release is not None:
            release.wait(timeout=HOLD_SECONDS)
        return StubResponse(body=openai_chat_body(text=answer_of(request)), delay_seconds=0.2)

    stub.respond_with("openai_chat", respond)


def setup_bot(llm_stub, *, queue_mode: str, slug: str = "planner") -> Bot:
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0)
    model = LLMModelFactory(provider=provider, name="gpt-4o")
    return BotFactory(
        slug=slug, owner=UserFactory(username=f"owner-{slug}"), primary_model=model, queue_mode=queue_mode
    )


def post(bot: Bot, thread, text: str) -> int:
    response = token_client(bot.owner).post(f"/api/v1/threads/{thread.pk}/messages/", {"content": text}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["turn_id"]


def in_background(target) -> threading.Thread:
    def run():
        try:
            target()
        finally:
            connection.close()  # this thread's own database connection

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker


def post_three_quickly(llm_stub, bot: Bot, thread) -> list[int]:
    """The first message, then the two others 0.3 s apart while the model is still on the first; the turn ids."""
    release = threading.Event()
    held_answers(llm_stub, held={QUESTIONS[0]: release})
    first: list[int] = []
    worker = in_background(lambda: first.append(post(bot, thread, QUESTIONS[0])))
    wait_for(lambda: llm_stub.requests_for("openai_chat"), what="the first model call", timeout=30)
    later = []
    for question in QUESTIONS[1:]:
        time.sleep(0.3)
        later.append(post(bot, thread, question))
    assert len(llm_stub.requests_for("openai_chat")) == 1  # the later ones wait, without a model call
    release.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    return [*first, *later]


def assert_never_overlapped(spans: list[tuple[float, float]]) -> None:
    ordered = sorted(spans)
    for (_, end), (start, _) in zip(ordered, ordered[1:], strict=False):
        assert start >= end, f"model calls overlapped: {ordered}"


def conversation(thread) -> list[tuple[str, str]]:
    return list(Message.objects.filter(thread=thread).order_by("pk").values_list("kind", "content"))


def test_followup_answers_each_message_in_order_one_model_call_at_a_time(llm_stub):
    # given: follow-up mode, a slow first answer
    bot = setup_bot(llm_stub, queue_mode=Bot.QueueMode.FOLLOWUP)
    thread = ThreadFactory(bot=bot)
    # when
    turn_ids = post_three_quickly(llm_stub, bot, thread)
    # then: one model call per message, never two at once, each later one holding the earlier answers in order
    assert_never_overlapped(llm_stub.spans)
    turns = [Turn.objects.get(pk=pk) for pk in turn_ids]
    assert [turn.status for turn in turns] == ["delivered"] * 3
    assert [turn.reply_message.content for turn in turns] == [f"answer to: {question}" for question in QUESTIONS]
    third_input = [(m["role"], m["content"]) for m in llm_stub.requests_for("openai_chat")[2].json["messages"]]
    assert third_input[-5:] == [
        ("user", QUESTIONS[0]),
        ("assistant", f"answer to: {QUESTIONS[0]}"),
        ("user", QUESTIONS[1]),
        ("assistant", f"answer to: {QUESTIONS[1]}"),
        ("user", QUESTIONS[2]),
    ]
    # and /context shows the thread in the same order: each answer right after its question
    context = token_client(bot.owner).get(f"/api/v1/threads/{thread.pk}/context/").json()
    shown = [m["content"] for m in (context["results"] if isinstance(context, dict) else context)]
    assert shown == [
        QUESTIONS[0],
        f"answer to: {QUESTIONS[0]}",
        QUESTIONS[1],
        f"answer to: {QUESTIONS[1]}",
        QUESTIONS[2],
        f"answer to: {QUESTIONS[2]}",
    ]
    # and the second turn, posted before the first answer existed, got it right before its own question
    assert turns[1].model_input["messages"][-3:] == [
        {"role": "user", "content": QUESTIONS[0]},
        {"role": "assistant", "content": f"answer to: {QUESTIONS[0]}"},
        {"role": "user", "content": QUESTIONS[1]},
    ]


@pytest.mark.parametrize("queue_mode", [Bot.QueueMode.COLLECT, Bot.QueueMode.STEER])
def test_collect_answers_the_waiting_messages_together_and_links_their_turns(llm_stub, queue_mode):
    # given
    bot = setup_bot(llm_stub, queue_mode=queue_mode)
    thread = ThreadFactory(bot=bot)
    # when
    first, second, third = post_three_quickly(llm_stub, bot, thread)
    # then: two model calls, in order; the second answers both waiting messages at once
    assert_never_overlapped(llm_stub.spans)
    assert len(llm_stub.requests_for("openai_chat")) == 2
    joined = f"{QUESTIONS[1]}\n\n{QUESTIONS[2]}"
    assert llm_stub.requests_for("openai_chat")[1].json["messages"][-3:] == [
        {"role": "user", "content": QUESTIONS[0]},
        {"role": "assistant", "content": f"answer to: {QUESTIONS[0]}"},
        {"role": "user", "content": joined},
    ]
    # each message answered exactly once: the third's turn is skipped and says which turn answered it
    client = token_client(bot.owner)
    shown = {pk: client.get(f"/api/v1/turns/{pk}/").json() for pk in (first, second, third)}
    assert [shown[pk]["status"] for pk in (first, second, third)] == ["delivered", "delivered", "skipped"]
    assert shown[third]["answered_by"] == second
    assert shown[second]["answers_also"] == [third]
    # the thread as stored (in the order things happened): three questions, two answers, in order
    assert [content for kind, content in conversation(thread) if kind == "agent_reply"] == [
        f"answer to: {QUESTIONS[0]}",
        f"answer to: {QUESTIONS[1]} + {QUESTIONS[2]}",
    ]
    assert [content for kind, content in conversation(thread) if kind == "user_message"] == list(QUESTIONS)


def test_two_conversations_still_run_side_by_side(llm_stub):
    # given: two threads of one bot
    bot = setup_bot(llm_stub, queue_mode=Bot.QueueMode.COLLECT)
    threads = [ThreadFactory(bot=bot), ThreadFactory(bot=bot)]
    releases = {"left": threading.Event(), "right": threading.Event()}
    held_answers(llm_stub, held=releases)
    # when: both are with the model at once (each held there), then answered one after the other
    workers = [in_background(lambda: post(bot, threads[0], "left"))]
    wait_for(lambda: llm_stub.requests_for("openai_chat"), what="the first model call", timeout=30)
    workers.append(in_background(lambda: post(bot, threads[1], "right")))
    wait_for(lambda: len(llm_stub.requests_for("openai_chat")) == 2, what="the second model call", timeout=30)
    for worker, name in zip(workers, ("left", "right"), strict=True):
        releases[name].set()
        worker.join(timeout=60)
    # then: both answered, and their model calls overlapped
    (a_start, a_end), (b_start, b_end) = sorted(llm_stub.spans)
    assert b_start < a_end
    assert Turn.objects.filter(status="delivered").count() == 2


def test_a_turn_that_found_its_conversation_busy_and_lost_its_hand_back_is_recovered_by_the_sweeper(llm_stub):
    # given: turn 1 holds the conversation (running); turn 2 finds it busy and waits
    bot = setup_bot(llm_stub, queue_mode=Bot.QueueMode.FOLLOWUP)
    thread = ThreadFactory(bot=bot)
    llm_stub.default_text = "fine"
    holder = Turn.objects.create(bot=bot, thread=thread, trigger="rest", source_message_id="rest:a", status="running")
    waiting = Turn.objects.create(
        bot=bot,
        thread=thread,
        trigger="rest",
        source_message_id="rest:b",
        user_message=Message.objects.create(thread=thread, kind="user_message", content="hi", visibility_mask=3),
    )
    assert turn_claim_in_order(turn_id=waiting.pk) == "deferred"
    assert turns_sweep(older_than_seconds=0) == 0  # still behind the holder: left to it
    # when: the holder ends without handing on (its worker died after finishing)
    Turn.objects.filter(pk=holder.pk).update(status="failed")
    # then: the sweeper starts the waiting turn
    assert turns_sweep(older_than_seconds=0) == 1
    waiting.refresh_from_db()
    assert (waiting.status, waiting.reply_message.content) == ("delivered", "fine")
