"""Issue 9's turn lifecycle through the real path: a signed, encrypted webhook -> lark-oapi against the local Feishu
stub -> the one turn task (eager here) -> the one runner with the Feishu channel.

L1 statuses say what happened (replied is not delivered); L2 one sweeper resumes lost deliveries and stuck runs,
bounded, and tells the chat what it gave up on; C8 the root flag follows what the prompt held; C4 quoted text has
no mention keys; item 8 automations post to their chat; item 11 a transient quote read retries; issue 10 item 3 a
poison turn fails once and says so.
"""

import json
from datetime import timedelta

import pytest
from django.db import DataError
from django.test import TestCase
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule

from agents.models import Message, Turn
from agents.services.automations import automation_create, automation_run
from agents.services.turns import DELIVERY_MAX_ATTEMPTS, TURN_MAX_SWEEPS, running_stale_seconds, turns_sweep
from agents.services.turns.channels import DELIVERY_FAILED_NOTICE_TEXT, FAILED_NOTICE_TEXT
from agents.tasks import automation_run_task
from feishu.channel.turn_channel import QUOTED_READ_FAILED_TEXT
from feishu.models import OutboundDelivery
from threadcontext.models import SessionBinding, ThreadContextDecision, Workspace

pytestmark = pytest.mark.django_db

ECHO = "[local_rules · rule-based echo] I received 0 context messages; you said: "


@pytest.fixture(autouse=True)
def no_sleep(mocker):
    return mocker.patch("feishu.outbound.client.time.sleep")


def sent_texts(stub) -> list[str]:
    return stub.sent_texts()


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


def test_l1_a_feishu_reply_is_delivered_only_once_feishu_took_it_after_a_5xx_retry(feishu, make_feishu_bot):
    # given: Feishu answers the first reply with a 500 (a text bot: the reply is only sent once the turn delivers;
    # the streaming card's own retries are in test_reply_streaming)
    bot = make_feishu_bot(reply_format="text")
    feishu.stub.fail_next("reply", status=500, code=1, msg="internal error")
    # when
    feishu.say(bot, text="hello", mention=[bot], message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    # then: retried with the same uuid, posted once, delivered
    turn = Turn.objects.get()
    uuids = [request.body["uuid"] for request in feishu.stub.requests_to("reply")]
    assert (turn.status, turn.delivery_attempts, turn.error) == ("delivered", 2, "")
    assert len(uuids) == 2 and len(set(uuids)) == 1
    assert sent_texts(feishu.stub) == [ECHO + "hello"]
    assert Message.objects.filter(kind=Message.Kind.AGENT_REPLY).count() == 1


def test_l2_a_delivery_that_keeps_failing_ends_delivery_failed_and_the_chat_hears_one_line(feishu, make_feishu_bot):
    # given: Feishu refuses every reply attempt with a 503, then recovers (a text bot, as above)
    bot = make_feishu_bot(reply_format="text")
    feishu.stub.fail_next("reply", status=503, code=1, msg="unavailable", times=DELIVERY_MAX_ATTEMPTS)
    # when
    feishu.say(bot, text="hello", mention=[bot], message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    # then: bounded attempts, the ledger says so, the one line reached the chat, the reply was never posted
    turn = Turn.objects.get()
    assert (turn.status, turn.delivery_attempts) == ("delivery_failed", DELIVERY_MAX_ATTEMPTS)
    assert turn.error.startswith(f"Gave up after {DELIVERY_MAX_ATTEMPTS} delivery attempts. Last error: ")
    assert turn.reply_message.content == ECHO + "hello"
    assert sent_texts(feishu.stub) == [DELIVERY_FAILED_NOTICE_TEXT]
    # and a sweep does not touch it again
    Turn.objects.filter(pk=turn.pk).update(replied_at=ago(3600), claimed_at=ago(3600))
    assert turns_sweep() == 0


def test_l2_a_replied_turn_left_undelivered_is_resumed_by_the_sweeper_with_the_same_uuid(
    feishu, make_feishu_bot, mocker
):
    # given: the worker stored the reply and died before sending it (the channel's deliver never ran)
    bot = make_feishu_bot()
    from feishu.channel.turn_channel import FeishuChannel

    crash = mocker.patch.object(FeishuChannel, "deliver", side_effect=SystemExit("killed"))
    with pytest.raises(SystemExit):
        feishu.say(bot, text="hello", mention=[bot], message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    mocker.stop(crash)
    turn = Turn.objects.get()
    [card_reply] = feishu.stub.sent  # the streaming card, posted while the model wrote; not finished
    assert (turn.status, card_reply["msg_type"]) == ("replied", "interactive")
    assert feishu.stub.cards[turn.channel_state["stream"]["card_id"]]["streaming"] is True
    # when: the sweeper runs before, then after the resume interval
    early = turns_sweep()
    Turn.objects.filter(pk=turn.pk).update(replied_at=ago(600), claimed_at=ago(600), enqueued_at=ago(600))
    with TestCase.captureOnCommitCallbacks(execute=True):
        late = turns_sweep()
    # then: delivered once, no second model call, the same card finished with the whole reply
    turn.refresh_from_db()
    assert (early, late, turn.status, turn.attempts) == (0, 1, "delivered", 1)
    assert sent_texts(feishu.stub) == [ECHO + "hello"]
    assert feishu.stub.sent == [card_reply]
    assert feishu.stub.cards[turn.channel_state["stream"]["card_id"]]["streaming"] is False
    assert card_reply["uuid"] == OutboundDelivery.objects.get(turn=turn).uuid


def test_l2_a_feishu_turn_left_running_is_rerun_by_the_sweeper_then_failed_and_told_after_the_cap(
    feishu, make_feishu_bot, mocker
):
    # given: a Feishu turn whose run died after its claim (hard time limit: the task was acked)
    bot = make_feishu_bot()
    from agents.services.turns import runner

    mocker.patch.object(runner, "_complete", side_effect=SystemExit("killed"))
    with pytest.raises(SystemExit):
        feishu.say(bot, text="hello", mention=[bot], message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    turn = Turn.objects.get()
    assert turn.status == "running"
    # when: every re-run dies the same way, and each sweep comes past the time limit
    for _ in range(TURN_MAX_SWEEPS):
        stale = ago(running_stale_seconds() + 1)
        Turn.objects.filter(pk=turn.pk).update(claimed_at=stale, enqueued_at=stale - timedelta(seconds=1))
        with pytest.raises(SystemExit):
            turns_sweep()
    stale = ago(running_stale_seconds() + 1)
    Turn.objects.filter(pk=turn.pk).update(claimed_at=stale, enqueued_at=stale - timedelta(seconds=1))
    with TestCase.captureOnCommitCallbacks(execute=True):
        final = turns_sweep()
    # then: re-run TURN_MAX_SWEEPS times, then failed with the reason and one line in the chat
    turn.refresh_from_db()
    assert (final, turn.status, turn.sweeps, turn.attempts) == (0, "failed", TURN_MAX_SWEEPS, 1 + TURN_MAX_SWEEPS)
    assert turn.error.startswith(f"The turn was left running and did not finish after {TURN_MAX_SWEEPS} re-runs")
    assert sent_texts(feishu.stub) == [FAILED_NOTICE_TEXT]


def test_l2_a_feishu_turn_whose_model_call_fails_for_now_is_retried_with_the_recorded_prompt_and_one_decision(
    feishu, make_feishu_bot, mocker
):
    # given: a group @ whose first model call fails transiently
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    from agents.llm.base import TransientError
    from agents.services.turns import runner

    real = runner._complete
    calls = []

    def flaky(**kwargs):
        calls.append(kwargs["request"].messages[-1].content)
        if len(calls) == 1:
            raise TransientError("provider hiccup")
        return real(**kwargs)

    mocker.patch.object(runner, "_complete", side_effect=flaky)
    # when
    feishu.say(bot, text="status?", mention=[bot], message_id="om_q")
    # then: the retry sent exactly what the first attempt recorded, and wrote no second decision
    turn = Turn.objects.get()
    assert (turn.status, turn.attempts) == ("delivered", 2)
    assert calls == [turn.user_message.prompt or turn.user_message.content] * 2
    assert ThreadContextDecision.objects.count() == 1
    assert turn.context_decision_id == ThreadContextDecision.objects.get().pk


def test_c8_a_root_that_could_not_be_read_is_not_marked_delivered_and_is_injected_next_time(feishu, make_feishu_bot):
    # given: a topic whose root this bot never received; Feishu fails the first online read
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.stub.add_message(message_id="om_root", text="Fix the login callback", chat_id="oc_group")
    feishu.stub.fail_next("get", status=400, code=230110, msg="message not found")
    in_topic = {"root_id": "om_root", "thread_id": "omt_root", "parent_id": "om_root"}
    # when: an @ in the topic (root unreadable), then another one (root readable)
    feishu.say(bot, text="first", mention=[bot], message_id="om_a", **in_topic)
    after_first = SessionBinding.objects.get().topic_root_prompt_delivered
    feishu.say(bot, text="second", mention=[bot], message_id="om_b", **in_topic)
    # then: the first prompt went without the root and the flag stayed false; the second carried it
    first, second = Turn.objects.order_by("id")
    assert (first.status, second.status) == ("delivered", "delivered")
    assert "Fix the login callback" not in (first.user_message.prompt or first.user_message.content)
    assert after_first is False
    assert "Fix the login callback" in second.user_message.prompt
    assert SessionBinding.objects.get().topic_root_prompt_delivered is True


def test_c4_a_quoted_message_read_online_reaches_the_prompt_with_its_mentions_normalised(feishu, make_feishu_bot):
    # given: a DM reply quoting a message that @-mentions a person (Feishu returns the key and the mention)
    bot = make_feishu_bot()
    feishu.stub.add_message(message_id="om_quoted", text="@_user_1 please deploy", chat_id="oc_dm")
    feishu.stub.messages["om_quoted"]["mentions"] = [{"key": "@_user_1", "id": "ou_carol", "name": "Carol"}]
    # when
    feishu.say(bot, text="is this done?", message_id="om_q", chat_type="p2p", chat_id="oc_dm", parent_id="om_quoted")
    # then: no mention key anywhere the model or a person reads
    turn = Turn.objects.get()
    assert "@Carol please deploy" in turn.user_message.prompt
    assert "@_user_" not in turn.user_message.prompt + json.dumps(turn.model_input)


def test_item_11_a_transient_failure_reading_the_quote_retries_instead_of_answering_could_not_read(
    feishu, make_feishu_bot
):
    # given: the quoted message's first read gets a 502
    bot = make_feishu_bot()
    feishu.stub.add_message(message_id="om_quoted", text="the plan", chat_id="oc_dm")
    feishu.stub.fail_next("get", status=502, code=1, msg="bad gateway")
    # when
    feishu.say(bot, text="ok?", message_id="om_q", chat_type="p2p", chat_id="oc_dm", parent_id="om_quoted")
    # then: read again, answered with the quote; the "could not read" notice never went out
    turn = Turn.objects.get()
    assert (turn.status, turn.attempts, len(feishu.stub.requests_to("get"))) == ("delivered", 2, 2)
    assert "the plan" in turn.user_message.prompt
    assert QUOTED_READ_FAILED_TEXT not in sent_texts(feishu.stub)


def test_c7_a_quote_that_is_gone_skips_the_turn_and_tells_the_user_once(feishu, make_feishu_bot):
    # given: the quoted message does not exist (a permanent refusal)
    bot = make_feishu_bot()
    # when
    feishu.say(bot, text="ok?", message_id="om_q", chat_type="p2p", chat_id="oc_dm", parent_id="om_gone")
    # then
    turn = Turn.objects.get()
    assert (turn.status, turn.error, turn.user_message) == ("skipped", "Quoted message unreadable (230110).", None)
    assert sent_texts(feishu.stub) == [QUOTED_READ_FAILED_TEXT]


def test_issue_10_a_poison_turn_fails_once_readably_and_tells_the_chat(feishu, make_feishu_bot, mocker):
    # given: storing the reply raises a DataError (a permanent error in our own data: no retry can fix it)
    bot = make_feishu_bot()
    from agents.services.turns import ledger

    store = mocker.patch.object(ledger, "turn_reply_store", side_effect=DataError("value too long"))
    # when
    feishu.say(bot, text="hello", mention=[bot], message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    # then: one attempt, failed with the cause, one line in the chat; the sweeper leaves it alone
    turn = Turn.objects.get()
    assert (turn.status, turn.attempts, store.call_count) == ("failed", 1, 1)
    assert turn.error == "Internal error (DataError): value too long"
    assert sent_texts(feishu.stub) == [FAILED_NOTICE_TEXT]
    Turn.objects.filter(pk=turn.pk).update(claimed_at=ago(running_stale_seconds() + 1), queued_at=ago(3600))
    assert turns_sweep() == 0


def test_item_8_an_automation_with_a_feishu_chat_posts_each_run_to_it_through_the_same_delivery(
    feishu_stub, make_feishu_bot
):
    # given: an automation that posts to a chat; Feishu answers the first post with a 500
    bot = make_feishu_bot()
    daily = CrontabSchedule.objects.create(minute="0", hour="9")
    automation = automation_create(bot=bot, name="daily", prompt="Summarise.", schedule=daily, feishu_chat_id="oc_ops")
    feishu_stub.fail_next("create", status=500, code=1, msg="internal error")
    # when: two runs ("Run now"'s path: the task, with its run id)
    outcomes = [automation_run_task.delay(automation.pk, run_id).get() for run_id in ("r1", "r2")]
    # then: each run's answer posted once to the chat (same uuid on the retry), both delivered
    assert outcomes == ["delivered", "delivered"]
    creates = feishu_stub.requests_to("create")
    assert [request.body["receive_id"] for request in creates] == ["oc_ops"] * 3
    assert creates[0].body["uuid"] == creates[1].body["uuid"] != creates[2].body["uuid"]
    assert sent_texts(feishu_stub) == [ECHO + "Summarise."] * 2
    assert list(Turn.objects.values_list("status", flat=True)) == ["delivered", "delivered"]


def test_item_8_an_automation_without_a_chat_is_delivered_once_replied(make_feishu_bot, feishu_stub):
    # given
    bot = make_feishu_bot()
    daily = CrontabSchedule.objects.create(minute="0", hour="9")
    automation = automation_create(bot=bot, name="quiet", prompt="Summarise.", schedule=daily)
    # when
    outcome = automation_run(automation=automation, run_id="r1")
    # then: nothing to post, delivered (seen in /history)
    assert (outcome, Turn.objects.get().status) == ("delivered", "delivered")
    assert feishu_stub.requests == []
