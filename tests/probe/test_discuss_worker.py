"""P10 through a real Celery worker (REDIS_URL + PostgreSQL): the fire task is queued with an eta, finds the wake
extended, re-queues itself for the new due time, and probes once."""

import time

import pytest

from agents.models import Bot, Provider
from feishu.discuss.wake import discuss_wake_schedule
from feishu.models import DiscussWake
from probe.models import ProbeJudgement
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem, ThreadEvent

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_debounced_wake_fires_once_on_a_real_worker_P10(celery_worker, llm_stub):
    # given a discuss bot with a 600 ms debounce and a judge at the stub that declines
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0)
    judge = LLMModelFactory(provider=provider, supports_tool_calls=True, context_window=128000)
    bot = BotFactory(
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=judge,
        probe_debounce_initial_ms=600,
        probe_debounce_max_ms=10_000,
    )
    llm_stub.respond_with(
        "openai_chat",
        lambda request: StubResponse(
            body=openai_chat_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "chatter"})])
        ),
    )
    # when: three messages 300 ms apart, each committed as routing commits them
    for index in range(3):
        event = ThreadEvent.objects.create(
            chat_id="oc_w", root_msg_id="om_r", message_id=f"om_{index}", event_type="human_message",
            bridge_id=bot.bridge_id, bot_profile=bot.slug, text=f"message {index}",
        )  # fmt: skip
        ThreadContextItem.objects.create(
            event=event, chat_id="oc_w", root_msg_id="om_r", bridge_id=bot.bridge_id, item_type="human_message",
            author_label="ou_alice", text=f"message {index}",
        )  # fmt: skip
        discuss_wake_schedule(bot=bot, chat_id="oc_w", root_msg_id="om_r", message_id=f"om_{index}")
        time.sleep(0.3)
    # then: the worker fired the wake once, after the last extension
    wait_for(lambda: DiscussWake.objects.filter(status="done").exists(), worker=celery_worker, what="the wake to fire")
    time.sleep(1.0)  # any stray duplicate fire would land by now
    wake = DiscussWake.objects.get()
    assert (wake.status, wake.attempts, len(wake.message_ids)) == ("done", 1, 3)
    assert ProbeJudgement.objects.filter(wake_id=wake.pk).count() == 1
    assert len(llm_stub.requests_for("openai_chat")) == 1
    assert wake.updated_at >= wake.due_at
