"""R1: the receipt reaction, through the real webhook, the one turn runner and the real lark-oapi client against
the local Feishu: added to an addressed message before anything is posted, removed once the reply is there,
replaced by the failure emoji (plus one line) when the turn fails, never added twice, never on a discuss wake,
and a reaction Feishu refuses never fails the turn."""

from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from agents.models import Bot, Message, Provider, Turn
from agents.services.turns import running_stale_seconds, turns_sweep
from agents.services.turns.channels import FAILED_NOTICE_TEXT
from feishu.discuss.sweep import discuss_wakes_sweep
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.stubs.llm_servers import StubResponse, openai_error_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

ECHO = "[local_rules · rule-based echo] I received 0 context messages; you said: "


def openai_model(llm_stub, **fields):
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=10
    )
    return LLMModelFactory(provider=provider, name="gpt-4o", **fields)


READS = frozenset({"token", "bot_info", "chat_get", "get"})


def routes(stub) -> list[str]:
    """The calls that change something a person sees, in the order they reached Feishu."""
    return [request.route for request in stub.requests if request.route not in READS]


def reactions_on(stub, message_id: str) -> list[tuple[str, bool]]:
    return [(r["emoji_type"], r["deleted"]) for r in stub.reactions.values() if r["message_id"] == message_id]


@pytest.mark.parametrize("where", ["mention", "dm"])
def test_r1_the_receipt_comes_before_the_reply_and_goes_after_it(feishu, make_feishu_bot, where):
    # given
    bot = make_feishu_bot()
    # when
    if where == "dm":
        feishu.say(bot, text="hello", message_id="om_q", chat_type="p2p", chat_id="oc_dm")
    else:
        feishu.say(bot, text="hello", mention=[bot], message_id="om_q")
    # then: the reaction on the asker's message first, then the card and its reply, the reaction removed last
    calls = routes(feishu.stub)
    assert calls[0] == "reaction_create"
    assert calls[-1] == "reaction_delete"
    assert calls.index("reaction_create") < calls.index("card_create") < calls.index("reply")
    [create] = feishu.stub.requests_to("reaction_create")
    assert (create.path, create.body) == (
        "/open-apis/im/v1/messages/om_q/reactions",
        {"reaction_type": {"emoji_type": "OnIt"}},
    )
    assert reactions_on(feishu.stub, "om_q") == [("OnIt", True)]
    turn = Turn.objects.get()
    assert turn.status == "delivered"
    receipt = turn.channel_state["receipt"]
    assert (receipt["emoji"], receipt["removed"], receipt["reaction_id"] in feishu.stub.reactions) == (
        "OnIt",
        True,
        True,
    )


def test_r1_a_failed_turn_swaps_the_receipt_for_the_failure_emoji_and_says_so_in_one_line(
    feishu, make_feishu_bot, llm_stub
):
    # given: the provider refuses the request for good (a 400: no retry)
    bot = make_feishu_bot(primary_model=openai_model(llm_stub), failure_emoji="Frown")
    llm_stub.enqueue(
        "openai_chat", StubResponse(status=400, body=openai_error_body(message="context too long for this model"))
    )
    # when
    feishu.say(bot, text="hello", mention=[bot], message_id="om_q")
    # then: the receipt went, the failure emoji came, one line without the provider's words
    turn = Turn.objects.get()
    assert turn.status == "failed"
    assert reactions_on(feishu.stub, "om_q") == [("OnIt", True), ("Frown", False)]
    assert feishu.stub.sent_texts() == [FAILED_NOTICE_TEXT]
    assert "context too long" not in str(feishu.stub.sent)
    assert turn.channel_state["failure_reaction"]["emoji"] == "Frown"


def test_r1_a_rerun_of_the_turn_never_adds_a_second_receipt(feishu, make_feishu_bot, mocker):
    # given: the run added the receipt, then died while the model worked
    bot = make_feishu_bot()
    from agents.services.turns import runner

    crash = mocker.patch.object(runner, "_complete", side_effect=SystemExit("killed"))
    with pytest.raises(SystemExit):
        feishu.say(bot, text="hello", mention=[bot], message_id="om_q")
    mocker.stop(crash)
    turn = Turn.objects.get()
    assert reactions_on(feishu.stub, "om_q") == [("OnIt", False)]
    # when: the sweeper re-runs it, past the time limit
    stale = timezone.now() - timedelta(seconds=running_stale_seconds() + 1)
    Turn.objects.filter(pk=turn.pk).update(claimed_at=stale, enqueued_at=stale - timedelta(seconds=1))
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()
    # then: one reaction in all, removed after the reply
    turn.refresh_from_db()
    assert (turn.status, turn.attempts) == ("delivered", 2)
    assert len(feishu.stub.requests_to("reaction_create")) == 1
    assert reactions_on(feishu.stub, "om_q") == [("OnIt", True)]
    assert feishu.stub.sent_texts() == [ECHO + "hello"]


def test_r1_a_reaction_feishu_refuses_never_fails_the_turn(feishu, make_feishu_bot):
    # given: Feishu refuses the reaction (say, the emoji is unknown to it)
    bot = make_feishu_bot()
    feishu.stub.fail_next("reaction_create", status=400, code=231001, msg="reaction type is invalid")
    # when
    feishu.say(bot, text="hello", mention=[bot], message_id="om_q")
    # then: the answer is delivered as if nothing happened, nothing to remove
    turn = Turn.objects.get()
    assert turn.status == "delivered"
    assert feishu.stub.sent_texts() == [ECHO + "hello"]
    assert feishu.stub.requests_to("reaction_delete") == []
    assert turn.channel_state["receipt"]["reaction_id"] == ""


def test_r1_a_bot_without_a_receipt_emoji_adds_none(feishu, make_feishu_bot):
    bot = make_feishu_bot(receipt_emoji="")

    feishu.say(bot, text="hello", mention=[bot], message_id="om_q")

    assert Turn.objects.get().status == "delivered"
    assert feishu.stub.requests_to("reaction_create") == []


def test_r1_a_discuss_wake_gets_no_reaction(feishu, make_feishu_bot, django_capture_on_commit_callbacks):
    # given: a discuss bot whose gate is off (every wake runs a turn), in a workspace group
    bot = make_feishu_bot(group_reply_mode=Bot.GroupReplyMode.DISCUSS, discuss_probe_mode=Bot.ProbeMode.OFF)
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_team")
    feishu.say(bot, text="anyone around?", chat_id="oc_team", message_id="om_chatter")
    # when the wake fires
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    # then: the bot spoke, without a reaction on anyone's message
    turn = Turn.objects.get()
    assert (turn.trigger, turn.status) == ("discuss", "delivered")
    assert Message.objects.filter(kind=Message.Kind.AGENT_REPLY).count() == 1
    assert len(feishu.stub.sent) == 1
    assert feishu.stub.requests_to("reaction_create") == []
    assert "receipt" not in turn.channel_state
