"""`feishu_simulate` posts a scripted conversation, signed and encrypted, to a running hub (here: the live server)."""

import pytest
from django.core.management import CommandError, call_command

from agents.models import Turn
from feishu.models import InboundEvent
from feishu.simulate import ScriptStep, replies_wait, script_parse
from tests.agents.factories import BotFactory, ThreadFactory
from threadcontext.models import ThreadEvent, Workspace


def test_script_parse_reads_every_kind():
    steps = script_parse("# c\nroot: Topic\nsay: chat\n@planner @coder do it\ndm: hi\n")

    assert steps == [
        ScriptStep("root", "Topic"),
        ScriptStep("say", "chat"),
        ScriptStep("mention", "do it", ("planner", "coder")),
        ScriptStep("dm", "hi"),
    ]


def test_script_parse_refuses_an_unknown_line():
    with pytest.raises(ValueError, match="Unknown script line"):
        script_parse("shout: hello")


@pytest.mark.django_db(transaction=True)
def test_feishu_simulate_drives_a_running_hub(live_server, feishu_stub, make_feishu_bot, capsys):
    # given: a hub serving the webhook, its bot known to the local Feishu
    bot = make_feishu_bot(slug="planner", name="Planner")
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_sim")
    # when
    call_command("feishu_simulate", "--url", live_server.url, "--bot", "planner", "--chat", "oc_sim")
    # then: every event acknowledged, the @s answered in the topic, the DM answered, discussion recorded
    out = capsys.readouterr().out
    assert out.count("200 ") == 5
    assert out.startswith("Posting 5 signed, encrypted events to") and "/admin/feishu/outbounddelivery/" in out
    assert InboundEvent.objects.filter(status="done").count() == 5
    assert sorted(Turn.objects.values_list("trigger", flat=True)) == ["dm", "mention", "mention"]
    assert len(feishu_stub.sent) == 3
    # and each reply's text is printed under the message that asked for it
    replies = out.split("Replies (waiting up to 60 s for the worker):\n", 1)[1]
    for turn in Turn.objects.select_related("reply_message").order_by("id"):
        text = turn.reply_message.content
        assert text and all(f"    {line}" in replies for line in text.splitlines())
    assert replies.count("-> planner (delivered):") == 3
    assert "no turn yet" not in replies
    assert set(ThreadEvent.objects.values_list("event_type", flat=True)) == {
        "topic_root",
        "human_message",
        "user_request",
        "agent_output",
    }


@pytest.mark.django_db
def test_feishu_simulate_refuses_an_unknown_bot():
    with pytest.raises(CommandError, match="No bot with slug 'ghost'"):
        call_command("feishu_simulate", "--bot", "ghost")


@pytest.mark.django_db(transaction=True)
def test_feishu_simulate_provision_demo_bot_without_feishu_app(live_server, capsys):
    from feishu.models import OutboundDelivery
    from tests.agents.factories import BotFactory

    # given: a bot with no Feishu app at all (the embedded demo's bots)
    BotFactory(slug="demo", name="Demo")
    # when
    call_command("feishu_simulate", "--url", live_server.url, "--bot", "demo", "--provision")
    # then: provisioned, every event acknowledged, replies recorded rather than sent (F5)
    out = capsys.readouterr().out
    assert "provisioned local webhook credentials for demo" in out
    assert out.count("200 ") == 5
    assert sorted(Turn.objects.values_list("trigger", flat=True)) == ["dm", "mention", "mention"]
    assert set(OutboundDelivery.objects.values_list("status", flat=True)) == {"recorded"}


@pytest.mark.django_db
def test_feishu_simulate_without_credentials_or_provision_is_refused():
    from tests.agents.factories import BotFactory

    BotFactory(slug="bare")

    with pytest.raises(CommandError, match="has no Feishu verification token"):
        call_command("feishu_simulate", "--bot", "bare")


@pytest.mark.django_db
def test_a_message_collected_into_another_turn_says_which_turn_answered_it():
    # given: the second of two quick messages was answered together with the first (queue mode collect)
    bot = BotFactory()
    thread = ThreadFactory(bot=bot)
    why = "Answered together with the other messages of turn 7 (queue mode collect)."
    Turn.objects.create(
        bot=bot, thread=thread, trigger="mention", source_message_id="om_2", status="skipped", error=why
    )
    # when the simulation reads the replies
    (reply,) = replies_wait(message_ids=["om_2"], expected={"om_2"}, timeout=0)
    # then it prints why there is no reply of its own, not "(no text)"
    assert (reply.status, reply.text) == ("skipped", why)
