"""Seed 002's integration list, end to end: signed, encrypted events through the webhook, the bridge, threadcontext,
the agent turn on the offline `local_rules` model, and delivery through the real lark-oapi client to the local
Feishu. Each group message reaches every bot app in the chat, as Feishu pushes it to each subscribed app."""

import pytest
from lark_oapi.core.cache import LocalCache
from lark_oapi.core.token.manager import TokenManager

from agents.models import Turn
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound import webhook_bots
from feishu.outbound import client as feishu_client
from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_team"


@pytest.fixture
def team(feishu, make_feishu_bot):
    planner = make_feishu_bot(slug="planner", name="Planner")
    coder = make_feishu_bot(slug="coder", name="Coder")
    for bot in (planner, coder):
        Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, shared_thread_enabled=True)
    return planner, coder


def say_to_all(feishu, bots, *, text, message_id, mention=(), sender="ou_alice", root="", chat_type="group"):
    """One Feishu message, pushed to every bot app in the chat."""
    topic = {"root_id": root, "thread_id": f"omt_{root}", "parent_id": root} if root else {}
    for bot in bots:
        response, _ = feishu.say(
            bot,
            text=text,
            message_id=message_id,
            chat_id=CHAT,
            mention=list(mention),
            sender=sender,
            chat_type=chat_type,
            **topic,
        )
        assert response.status_code == 200


def turn_of(bot, message_id) -> Turn:
    return Turn.objects.select_related("user_message", "reply_message").get(bot=bot, source_message_id=message_id)


def sent_texts(stub, bot) -> list[str]:
    return stub.sent_texts(app_id=bot.feishu_app_id)


def test_c5_planner_then_coder_gets_the_plan(feishu, team):
    # given: a topic, and Planner's plan in it
    planner, coder = team
    bots = [planner, coder]
    say_to_all(feishu, bots, text="We need an H5 snake game", message_id="om_root")
    say_to_all(feishu, bots, text="design it", message_id="om_p1", mention=[planner], root="om_root")
    plan = turn_of(planner, "om_p1").reply_message.content
    # when: Coder is @-ed in the same topic
    say_to_all(feishu, bots, text="implement the plan above", message_id="om_c1", mention=[coder], root="om_root")
    # then: Coder's prompt carries Planner's output, labelled with its source, and the topic root
    prompt = turn_of(coder, "om_c1").user_message.prompt
    assert "[Amux Feishu Thread Mode]" in prompt
    assert f"planner: {plan}" in prompt
    assert "We need an H5 snake game" in prompt
    assert prompt.rstrip().endswith("implement the plan above")
    # and both replies were delivered in the topic
    assert len(sent_texts(feishu.stub, planner)) == 1 and len(sent_texts(feishu.stub, coder)) == 1
    assert all(r.body["reply_in_thread"] for r in feishu.stub.requests_to("reply"))


def test_c2_planner_multi_round_outputs_all_reach_coder(feishu, team):
    planner, coder = team
    bots = [planner, coder]
    say_to_all(feishu, bots, text="Build a todo app", message_id="om_root")
    say_to_all(feishu, bots, text="first draft", message_id="om_p1", mention=[planner], root="om_root")
    say_to_all(feishu, bots, text="revise it for mobile", message_id="om_p2", mention=[planner], root="om_root")
    rounds = [turn_of(planner, m).reply_message.content for m in ("om_p1", "om_p2")]

    say_to_all(feishu, bots, text="implement it", message_id="om_c1", mention=[coder], root="om_root")

    prompt = turn_of(coder, "om_c1").user_message.prompt
    assert prompt.index(f"planner: {rounds[0]}") < prompt.index(f"planner: {rounds[1]}")  # every round, oldest first
    assert ThreadEvent.objects.filter(event_type="agent_output", bot_profile="planner").count() == 2


def test_c2_owner_only_owner_gets_other_bots_outputs_others_trigger_nothing(feishu, team):
    # given: owner_only workspaces owned by ou_owner
    planner, coder = team
    bots = [planner, coder]
    Workspace.objects.update(mode="owner_only", owner_open_id="ou_owner")
    say_to_all(feishu, bots, text="Ship the billing fix", message_id="om_root", sender="ou_owner")
    say_to_all(feishu, bots, text="plan it", message_id="om_p1", mention=[planner], root="om_root", sender="ou_owner")
    say_to_all(feishu, bots, text="secret side chat", message_id="om_chat", root="om_root", sender="ou_mallory")
    # when: a non-owner and then the owner @ Coder
    say_to_all(feishu, bots, text="do it now", message_id="om_c0", mention=[coder], root="om_root", sender="ou_mallory")
    say_to_all(feishu, bots, text="implement", message_id="om_c1", mention=[coder], root="om_root", sender="ou_owner")
    # then
    assert not Turn.objects.filter(source_message_id="om_c0").exists()
    prompt = turn_of(coder, "om_c1").user_message.prompt
    assert turn_of(planner, "om_p1").reply_message.content[:40] in prompt
    assert "secret side chat" not in prompt
    assert not ThreadEvent.objects.filter(message_id="om_chat").exists()


def test_c1_after_a_restart_coder_still_gets_the_plan(feishu, team):
    planner, coder = team
    bots = [planner, coder]
    say_to_all(feishu, bots, text="We need a CLI", message_id="om_root")
    say_to_all(feishu, bots, text="plan it", message_id="om_p1", mention=[planner], root="om_root")
    plan = turn_of(planner, "om_p1").reply_message.content
    # the hub restarts: every in-process cache is gone, only the database remains
    feishu_webhook._handlers.clear()
    webhook_bots._bots.clear()
    feishu_client._clients.clear()
    TokenManager.cache = LocalCache()

    say_to_all(feishu, bots, text="code it", message_id="om_c1", mention=[coder], root="om_root")

    assert f"planner: {plan}" in turn_of(coder, "om_c1").user_message.prompt


def test_c5_sessions_do_not_mix_across_topics_or_same_named_bots(feishu, team, make_feishu_bot):
    # given: Planner works in topic A; a second bot also named "Planner" (another app) and Coder work in topic B
    planner, coder = team
    twin = make_feishu_bot(slug="planner-two", name="Planner")
    Workspace.objects.create(bot_profile=twin.slug, chat_id=CHAT, shared_thread_enabled=True)
    bots = [planner, coder, twin]
    say_to_all(feishu, bots, text="Topic A", message_id="om_a")
    say_to_all(feishu, bots, text="plan A", message_id="om_a1", mention=[planner], root="om_a")
    say_to_all(feishu, bots, text="Topic B", message_id="om_b")
    say_to_all(feishu, bots, text="plan B", message_id="om_b1", mention=[twin], root="om_b")
    plan_a = turn_of(planner, "om_a1").reply_message.content
    plan_b = turn_of(twin, "om_b1").reply_message.content
    # when
    say_to_all(feishu, bots, text="implement", message_id="om_b2", mention=[coder], root="om_b")
    say_to_all(feishu, bots, text="again", message_id="om_b3", mention=[twin], root="om_b")
    # then: topic B sees only topic B; the twin never gets its own output back, and sessions are distinct
    coder_items = selected_items(turn_of(coder, "om_b2"))
    assert {item.root_msg_id for item in coder_items} == {"om_b"}
    assert [item.text for item in coder_items if item.item_type == "agent_output"] == [plan_b]
    assert f"planner-two: {plan_b}" in turn_of(coder, "om_b2").user_message.prompt
    assert plan_a not in turn_of(coder, "om_b2").user_message.prompt
    twin_items = selected_items(turn_of(twin, "om_b3"))
    assert twin.feishu_app_id not in {item.bridge_id for item in twin_items if item.item_type == "agent_output"}
    assert turn_of(planner, "om_a1").thread_id != turn_of(twin, "om_b1").thread_id


def selected_items(turn: Turn) -> list[ThreadContextItem]:
    decision = ThreadContextDecision.objects.get(pk=turn.context_decision_id)
    return list(ThreadContextItem.objects.filter(pk__in=decision.selected_item_ids).order_by("id"))


def test_c2_unaddressed_discussion_is_recorded_only(feishu, team):
    planner, coder = team
    say_to_all(feishu, [planner, coder], text="Lunch?", message_id="om_root")
    say_to_all(feishu, [planner, coder], text="sure, at noon", message_id="om_r1", root="om_root")

    assert Turn.objects.count() == 0
    assert feishu.stub.sent == []
    assert sorted(ThreadEvent.objects.values_list("bot_profile", "event_type")) == [
        ("coder", "human_message"),
        ("coder", "topic_root"),
        ("planner", "human_message"),
        ("planner", "topic_root"),
    ]


def test_c3_dms_never_reach_workspace_context(feishu, team):
    # given: a DM to Planner
    planner, coder = team
    feishu.say(planner, text="my private salary question", message_id="om_dm", chat_id="oc_dm", chat_type="p2p")
    assert turn_of(planner, "om_dm").trigger == "dm"
    # when: work in the group
    say_to_all(feishu, [planner, coder], text="Project kickoff", message_id="om_root")
    say_to_all(feishu, [planner, coder], text="plan", message_id="om_p1", mention=[planner], root="om_root")
    say_to_all(feishu, [planner, coder], text="build", message_id="om_c1", mention=[coder], root="om_root")
    # then
    assert not ThreadEvent.objects.filter(chat_id="oc_dm").exists()
    for bot, message_id in ((planner, "om_p1"), (coder, "om_c1")):
        assert "salary" not in turn_of(bot, message_id).user_message.prompt
