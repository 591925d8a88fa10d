"""P10 without a broker (the embedded default): an in-process timer plays the fire task's eta."""

import time

import pytest

from agents.models import Bot
from feishu.discuss.wake import discuss_wake_schedule
from feishu.models import DiscussWake
from probe.models import ProbeJudgement
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_eager_hub_fires_the_debounced_wake_from_a_timer_P10(settings, make_judge, make_discuss_bot, llm_stub):
    # given: no broker (tasks eager) and the timer on, a 200 ms debounce
    settings.AMUX_DISCUSS_WAKE_TIMER = True
    bot = make_discuss_bot(
        mode=Bot.ProbeMode.MODEL, judge=make_judge(), probe_debounce_initial_ms=200, probe_debounce_max_ms=5000
    )
    llm_stub.respond_with(
        "openai_chat",
        lambda request: StubResponse(
            body=openai_chat_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "quiet"})])
        ),
    )
    # when: two messages 100 ms apart (the second extends the wake; the first timer finds it not yet due)
    discuss_wake_schedule(bot=bot, chat_id="oc_t", root_msg_id="om_r", message_id="om_1")
    time.sleep(0.1)
    discuss_wake_schedule(bot=bot, chat_id="oc_t", root_msg_id="om_r", message_id="om_2")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not DiscussWake.objects.filter(status="done").exists():
        time.sleep(0.05)
    time.sleep(0.3)
    # then: fired once, after the extension
    wake = DiscussWake.objects.get()
    assert (wake.status, wake.attempts, wake.message_ids) == ("done", 1, ["om_1", "om_2"])
    assert ProbeJudgement.objects.filter(wake_id=wake.pk).count() == 1
