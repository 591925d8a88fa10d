"""The bridge side of the discuss wake (P9, P10): the activation contract survives a lost enqueue, and a broker
outage when a wake is opened is logged and left to the sweeper. Real path: webhook → wake → gate → turn → the
LLM stub's recorded body; Feishu and the LLM providers are stubs on 127.0.0.1."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from agents.models import Bot, Turn
from agents.services.turns import turns_sweep
from agents.tasks import turn_run_task
from amuxweb.celery import app as celery_app
from feishu.discuss.fire import FIRE_DECLINED, FIRE_STARTED
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.discuss.wake import discuss_wake_schedule
from feishu.models import DiscussWake
from feishu.tasks import discuss_wake_fire_task
from probe.prompts import activation_contract
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.probe.conftest import make_discuss_bot, make_judge, stub_base_url  # noqa: F401  (fixtures)
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def discuss_bot(make_feishu_bot, make_judge, llm_stub):  # noqa: F811
    """A discuss-mode Feishu bot: judge = Anthropic at the stub, primary = OpenAI chat at the stub."""
    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    bot = make_feishu_bot(
        name="Planner",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_team")
    return bot


def test_a_discuss_turn_requeued_by_the_sweeper_keeps_its_activation_contract_P9(
    feishu, discuss_bot, llm_stub, mocker, caplog, django_capture_on_commit_callbacks
):
    """P9: the judge says send, the turn's enqueue is lost (broker down); the sweeper's re-queue still runs the
    primary with the contract (the judge's reason as notes) as its last message."""
    # given: a group message the judge activates, and a broker that refuses the turn's enqueue
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "carol asks"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Because of X.")))
    feishu.say(discuss_bot, text="why is the build red?", chat_id="oc_team")
    lost = mocker.patch.object(turn_run_task, "apply_async", side_effect=OperationalError("redis down"))
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    assert outcomes == [FIRE_STARTED]
    assert lost.call_count == 1
    turn = Turn.objects.get(bot=discuss_bot)
    [record] = [r for r in caplog.records if r.getMessage().startswith("task not enqueued")]
    assert (record.what, record.task_args) == ("turn", [turn.pk])  # the contract never travels with it
    assert (turn.status, turn.attempts) == ("queued", 0)
    assert llm_stub.requests_for("openai_chat") == []
    # when: the broker is back and the one turn sweeper finds the lost turn minutes later
    mocker.stopall()
    Turn.objects.filter(pk=turn.pk).update(queued_at=timezone.now() - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        swept = turns_sweep()
    # then: one primary call whose last message is the contract (rebuilt from the judgement), one reply
    assert swept == 1
    (primary,) = llm_stub.requests_for("openai_chat")
    assert primary.json["messages"][-1] == {"role": "user", "content": activation_contract(reason="carol asks")}
    turn.refresh_from_db()
    assert turn.status == "delivered"
    assert len(feishu.stub.sent) == 1


def test_a_swept_ungated_discuss_turn_runs_without_a_contract_P9(make_discuss_bot, mocker):  # noqa: F811
    """P9: only a judge's `send` brings a contract; an ungated discuss turn is re-queued without one."""
    from feishu.channel.turn_channel import discuss_contract_get
    from tests.agents.factories import ThreadFactory

    bot = make_discuss_bot(mode=Bot.ProbeMode.OFF)
    turn = Turn.objects.create(
        bot=bot, thread=ThreadFactory(bot=bot, channel="feishu"), trigger="discuss", source_message_id="om_1"
    )
    assert discuss_contract_get(turn=turn) == ""


def test_a_broker_outage_when_a_wake_opens_is_logged_and_the_sweeper_fires_it_P10(
    discuss_bot, llm_stub, mocker, caplog, django_capture_on_commit_callbacks
):
    """P10: with a real broker configured but down, opening a wake neither raises nor loses it."""
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "chatter"})])),
    )
    celery_app.conf.task_always_eager = False  # a broker is configured (the autouse fixture restores eager)
    mocker.patch.object(discuss_wake_fire_task, "apply_async", side_effect=OperationalError("redis down"))
    caplog.set_level(logging.WARNING, logger="core.tasks_enqueue")
    # when
    with django_capture_on_commit_callbacks(execute=True):
        wake = discuss_wake_schedule(bot=discuss_bot, chat_id="oc_team", root_msg_id="om_1", message_id="om_1")
    # then: logged, still pending; the sweeper fires it once due
    [record] = [r for r in caplog.records if r.getMessage().startswith("task not enqueued")]
    assert (record.what, record.task_args, record.error) == ("discuss_wake", [wake.pk], "OperationalError")
    assert DiscussWake.objects.get().status == "pending"
    mocker.stopall()
    celery_app.conf.task_always_eager = True
    assert discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1)) == [FIRE_DECLINED]
