"""R3 exactly once through a real Celery worker (REDIS_URL set, PostgreSQL): a worker SIGKILLed while the answer
streams into its card, then restarted, leaves exactly one card, one reply and one receipt; the card ends with the
whole stored reply, its sequences strictly increase across both runs (Feishu refused none), and thread context
holds the answer once."""

import pytest

from agents.models import Message, Provider, Turn
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem, Workspace

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

ANSWER = " ".join(f"word{n}" for n in range(80))
CARD_ROUTES = ("card_content", "card_settings")
# Waits: a kill, a restart and a streamed answer on a loaded machine; polled every 50 ms so the kill lands while
# the answer still streams into the card.
WAIT_SECONDS = 90
POLL_SECONDS = 0.05


@pytest.fixture
def worker_on_the_stub(celery_worker, feishu_stub):
    """The session's worker, restarted to talk to this test's local Feishu; put back as it was afterwards."""
    celery_worker.stop()
    celery_worker.env["AMUX_TEST_FEISHU_DOMAIN"] = feishu_stub.url
    celery_worker.start()
    yield celery_worker
    celery_worker.stop()
    celery_worker.env.pop("AMUX_TEST_FEISHU_DOMAIN", None)


def test_r3_a_worker_killed_mid_stream_and_restarted_leaves_one_card_and_one_reply(
    worker_on_the_stub, feishu, make_feishu_bot, llm_stub
):
    # given: a model that streams slowly the first time (the worker dies meanwhile), quickly the second
    worker = worker_on_the_stub
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=30
    )
    bot = make_feishu_bot(primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(text=ANSWER), chunk_delay_seconds=0.2),
        StubResponse(body=openai_chat_body(text=ANSWER)),
    )
    feishu.say(bot, text="tell me", mention=[bot], message_id="om_q")
    wait_for(
        lambda: feishu.stub.accepted("card_content"),
        worker=worker,
        what="the card's first update",
        timeout=WAIT_SECONDS,
        interval=POLL_SECONDS,
    )
    # when: kill -9 mid-stream, then start the worker again
    worker.kill()
    turn = Turn.objects.get()
    assert turn.status == "running" and turn.channel_state["stream"]["message_id"]
    worker.start()
    wait_for(
        lambda: Turn.objects.get(pk=turn.pk).status in ("delivered", "failed", "delivery_failed"),
        worker=worker,
        what="the redelivered turn",
        timeout=WAIT_SECONDS,
        interval=POLL_SECONDS,
    )
    # then
    turn.refresh_from_db()
    assert (turn.status, turn.attempts) == ("delivered", 2)
    assert len(llm_stub.requests_for("openai_chat")) == 2
    [card_id] = feishu.stub.cards
    assert len(feishu.stub.accepted("card_create")) == 1
    [reply] = feishu.stub.sent
    assert reply["msg_type"] == "interactive"
    [reply_text] = Message.objects.filter(kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    assert feishu.stub.card_text(card_id) == reply_text == ANSWER
    calls = [r for r in feishu.stub.requests if r.route in CARD_ROUTES]
    sequences = [call.body["sequence"] for call in calls]
    assert sequences == sorted(set(sequences))
    assert {(call.status, call.code) for call in calls} == {(200, 0)}
    assert len(feishu.stub.requests_to("reaction_create")) == 1
    assert [(r["emoji_type"], r["deleted"]) for r in feishu.stub.reactions.values()] == [("OnIt", True)]
    assert [item.text for item in ThreadContextItem.objects.filter(item_type="agent_output")] == [ANSWER]
