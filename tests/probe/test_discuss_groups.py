"""Feishu groups as they are (ARCHITECTURE §10.2 G1-G5, G7 recall; issue 9 items 1, 2, 5, 9; issue 12 items 4, 6).

Every test goes through the real path: a signed, encrypted webhook -> routing (chat.get through lark-oapi against
the Feishu stub) -> the wake -> the sweeper's fire task (eager) -> the judge and the primary at the LLM stub.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Bot, Turn
from feishu.discuss import fire as discuss_fire
from feishu.discuss.fire import FIRE_ABSORBED, FIRE_DECLINED, FIRE_STARTED, discuss_wake_fire
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.discuss.wake import ABSORBED_ERROR
from feishu.models import DiscussWake, InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement
from tests.feishu.conftest import fixture_payload
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.explain import decision_explain_text
from threadcontext.models import MAIN_TIMELINE_KEY, ThreadContextDecision, ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

PLAIN = "oc_plain"  # an ordinary group (chat_mode "group", group_message_type "chat")


@pytest.fixture
def group_bot(make_feishu_bot, make_judge, llm_stub, feishu):
    """A discuss-mode bot (judge: Anthropic, primary: OpenAI chat, both at the stub) and NO workspace configured."""
    from tests.agents.factories import LLMModelFactory, ProviderFactory

    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    feishu.stub.chat_set(PLAIN, chat_mode="group", group_message_type="chat", name="Plain team")
    return make_feishu_bot(
        name="Planner",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )


def judge_says(llm_stub, should_act: str, reason: str = "asked") -> None:
    decide = ("decide", {"should_act": should_act, "reason": reason})
    llm_stub.enqueue("anthropic", StubResponse(body=anthropic_body(tool_calls=[decide])))


def sweep_later(django_capture_on_commit_callbacks) -> list[str]:
    with django_capture_on_commit_callbacks(execute=True):
        return discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))


def test_g1_three_quick_unaddressed_messages_of_an_ordinary_group_are_one_wake_and_one_judgement(
    feishu, group_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: three quick top-level messages (no root_id, no thread_id) in an ordinary group
    judge_says(llm_stub, "no_action", "chatter")
    for text in ("is the deploy done?", "the dashboard is red", "anyone?"):
        feishu.say(group_bot, text=text, chat_id=PLAIN)
    # then: one wake for the chat's main timeline, holding all three
    wake = DiscussWake.objects.get()
    assert (wake.root_msg_id, len(wake.message_ids), wake.status) == (MAIN_TIMELINE_KEY, 3, "pending")
    assert len(feishu.stub.requests_to("chat_get")) == 1  # the chat's mode is read once, then cached
    # when
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: one judgement whose transcript is the main timeline, oldest first
    assert outcomes == [FIRE_DECLINED]
    (judge,) = llm_stub.requests_for("anthropic")
    assert [m["content"] for m in judge.json["messages"]] == [
        "ou_alice: is the deploy done?",
        "ou_alice: the dashboard is red",
        "ou_alice: anyone?",
    ]
    assert ProbeJudgement.objects.count() == 1
    assert Workspace.objects.get(bot_profile=group_bot.slug, chat_id=PLAIN).chat_mode == "group"


def test_g1_a_reply_inside_a_thread_of_an_ordinary_group_keeps_its_own_wake(feishu, group_bot):
    # given: a main-timeline message and a reply inside a thread of the same chat
    feishu.say(group_bot, text="top level", chat_id=PLAIN, message_id="om_top")
    feishu.say(group_bot, text="in the thread", chat_id=PLAIN, root_id="om_top", parent_id="om_top", thread_id="omt_1")
    # then: two wakes, the main timeline's and the thread's
    assert sorted(DiscussWake.objects.values_list("root_msg_id", flat=True)) == ["main", "om_top"]


def test_g1_topic_groups_keep_one_wake_per_topic(feishu, group_bot):
    # given: a topic group (the stub's default chat mode), two top-level topics
    feishu.say(group_bot, text="topic one", chat_id="oc_topics", message_id="om_t1")
    feishu.say(group_bot, text="topic two", chat_id="oc_topics", message_id="om_t2")
    # then
    assert sorted(DiscussWake.objects.values_list("root_msg_id", flat=True)) == ["om_t1", "om_t2"]


def test_g1_an_at_in_the_main_timeline_sees_the_main_timeline(feishu, group_bot, llm_stub):
    # given: discussion in the main timeline, then an @ of the bot there
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, shared_thread_enabled=True)
    feishu.say(group_bot, text="the db migration failed at step 3", chat_id=PLAIN)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Rerun step 3.")))
    feishu.say(group_bot, text="what now?", chat_id=PLAIN, mention=[group_bot], message_id="om_ask")
    # then: the turn's decision selected the main timeline's discussion
    decision = ThreadContextDecision.objects.get(message_id="om_ask")
    assert decision.root_msg_id == MAIN_TIMELINE_KEY
    assert "ou_alice: the db migration failed at step 3" in decision.thread_context
    assert Turn.objects.get(source_message_id="om_ask").status == "delivered"


def test_g2_a_group_nobody_configured_gets_a_workspace_and_the_discuss_bot_is_not_muted(
    feishu, group_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: no Workspace row for the group
    assert not Workspace.objects.exists()
    judge_says(llm_stub, "send", "a question to the team")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="It is done.")))
    # when: the bot's first message there, and the wake fires
    feishu.say(group_bot, text="is the deploy done?", chat_id=PLAIN)
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: a workspace with the hub's defaults, created automatically, and the bot answered
    workspace = Workspace.objects.get(bot_profile=group_bot.slug, chat_id=PLAIN)
    assert (workspace.mode, workspace.thread_context_limit, workspace.is_created_automatically) == ("shared", 20, True)
    assert workspace.name == "Plain team"
    assert outcomes == [FIRE_STARTED]
    (judge,) = llm_stub.requests_for("anthropic")
    assert judge.json["messages"] == [{"role": "user", "content": "ou_alice: is the deploy done?"}]
    assert len(feishu.stub.sent) == 1


def test_g2_bot_added_creates_the_workspace_and_bot_deleted_retires_it_once_each(feishu, group_bot):
    # given: Feishu's bot-added event (no message_id), delivered twice (a retry keeps its event_id)
    added = fixture_payload("bot_added_to_chat", bot=group_bot)
    # when
    first, second = feishu.post(group_bot, added), feishu.post(group_bot, added)
    # then: stored once, keyed by its event_id; the workspace exists with the group's name
    assert (first.status_code, second.status_code) == (200, 200)
    event = InboundEvent.objects.get()
    assert (event.message_id, event.status) == ("event:7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a", "done")
    chat_id = added["event"]["chat_id"]
    workspace = Workspace.objects.get(bot_profile=group_bot.slug, chat_id=chat_id)
    assert (workspace.name, workspace.is_created_automatically, workspace.retired_at) == ("Project group", True, None)
    # when: the bot is removed from the group
    deleted = fixture_payload("bot_added_to_chat", bot=group_bot)
    deleted["header"].update(event_type="im.chat.member.bot.deleted_v1", event_id="0" * 32)
    feishu.post(group_bot, deleted)
    # then
    workspace.refresh_from_db()
    assert workspace.retired_at is not None
    assert InboundEvent.objects.count() == 2


def test_g3_owner_only_a_strangers_unaddressed_message_opens_no_wake(feishu, group_bot, llm_stub):
    # given: an owner_only workspace owned by ou_owner
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, mode="owner_only", owner_open_id="ou_owner")
    # when: a stranger speaks without an @
    feishu.say(group_bot, text="please deploy to prod", chat_id=PLAIN, sender="ou_mallory")
    # then: no wake, no judge, nothing recorded from the stranger
    assert DiscussWake.objects.count() == 0
    assert llm_stub.requests_for("anthropic") == []
    assert InboundEvent.objects.get().error == "not_owner"
    # and the owner's message does open one
    feishu.say(group_bot, text="status?", chat_id=PLAIN, sender="ou_owner")
    assert DiscussWake.objects.get().message_ids == [InboundEvent.objects.order_by("id").last().message_id]


def test_g3_owner_only_a_stranger_never_extends_the_owners_wake(feishu, group_bot):
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, mode="owner_only", owner_open_id="ou_owner")
    feishu.say(group_bot, text="status?", chat_id=PLAIN, sender="ou_owner", message_id="om_owner")
    feishu.say(group_bot, text="ignore the owner", chat_id=PLAIN, sender="ou_mallory", message_id="om_stranger")
    wake = DiscussWake.objects.get()
    assert (wake.message_ids, wake.last_message_id) == (["om_owner"], "om_owner")


def test_g4_an_at_during_a_pending_wake_absorbs_it_one_answer_not_two(
    feishu, group_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: an un-addressed message opened a wake
    feishu.say(group_bot, text="the build is red", chat_id=PLAIN)
    wake = DiscussWake.objects.get()
    # when: someone @s the bot in the same timeline before the wake is due, then the sweeper runs
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Looking at it.")))
    feishu.say(group_bot, text="can you check?", chat_id=PLAIN, mention=[group_bot], message_id="om_at")
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: the @'s turn is the one answer; the wake ended absorbed, the judge never ran
    turn = Turn.objects.get()
    assert (turn.trigger, turn.source_message_id, turn.status) == ("mention", "om_at", "delivered")
    wake.refresh_from_db()
    assert (wake.status, wake.turn_id) == ("done", turn.pk)
    assert wake.error == f"{ABSORBED_ERROR} {turn.pk}"
    assert outcomes == []
    assert llm_stub.requests_for("anthropic") == []
    assert len(feishu.stub.sent) == 1


def test_g4_a_wake_absorbed_while_its_judge_runs_starts_no_turn(feishu, group_bot, llm_stub, mocker):
    # given: a wake whose judge says send, and an @ that lands while the judge is running
    feishu.say(group_bot, text="the build is red", chat_id=PLAIN)
    wake = DiscussWake.objects.get()
    judge_says(llm_stub, "send")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="On it.")))
    real_gate = discuss_fire.probe_gate_run

    def gate_then_at(**kwargs):
        result = real_gate(**kwargs)
        feishu.say(group_bot, text="check please", chat_id=PLAIN, mention=[group_bot], message_id="om_at")
        return result

    mocker.patch.object(discuss_fire, "probe_gate_run", side_effect=gate_then_at)
    # when
    outcome = discuss_wake_fire(wake_id=wake.pk, now=timezone.now() + timedelta(minutes=1))
    # then: only the @'s turn exists
    assert outcome == FIRE_ABSORBED
    assert list(Turn.objects.values_list("trigger", flat=True)) == ["mention"]
    assert len(feishu.stub.sent) == 1


def test_g4_the_judges_transcript_shows_the_peoples_requests(
    feishu, group_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: an @ the bot answered, then un-addressed discussion
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The deploy is at 5.")))
    feishu.say(group_bot, text="when is the deploy?", chat_id=PLAIN, mention=[group_bot])
    judge_says(llm_stub, "no_action")
    feishu.say(group_bot, text="ok thanks", chat_id=PLAIN, sender="ou_bob")
    # when
    sweep_later(django_capture_on_commit_callbacks)
    # then: the request, the bot's own answer (assistant) and the discussion, in order
    (judge,) = llm_stub.requests_for("anthropic")
    assert judge.json["messages"] == [
        {"role": "user", "content": "ou_alice (to you): when is the deploy?"},
        {"role": "assistant", "content": "The deploy is at 5."},
        {"role": "user", "content": "ou_bob: ok thanks"},
    ]


def test_g4_the_bots_own_delivered_reply_never_wakes_it(feishu, group_bot, llm_stub):
    # given: the bot answered an @
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Done.")))
    feishu.say(group_bot, text="do it", chat_id=PLAIN, mention=[group_bot])
    own_message_id = OutboundDelivery.objects.get().feishu_message_id
    # when: Feishu echoes the bot's own reply back as an event from the app
    from feishu.inbound.signing import message_event_payload
    from tests.feishu.conftest import bot_open_id

    echo = message_event_payload(
        verification_token=group_bot.feishu_verification_token,
        app_id=group_bot.feishu_app_id,
        message_id=own_message_id,
        chat_id=PLAIN,
        text="Done.",
        sender_open_id=bot_open_id(group_bot),
        chat_type="group",
    )
    echo["event"]["sender"]["sender_type"] = "app"
    feishu.post(group_bot, echo)
    # then: no wake
    assert DiscussWake.objects.count() == 0
    assert InboundEvent.objects.get(message_id=own_message_id).error == "own_echo"


def test_g5_reply_mode_off_records_but_never_answers(feishu, group_bot, llm_stub):
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, reply_mode="off")
    feishu.say(group_bot, text="hello", chat_id=PLAIN)
    feishu.say(group_bot, text="answer me", chat_id=PLAIN, mention=[group_bot])
    assert (DiscussWake.objects.count(), Turn.objects.count(), len(feishu.stub.sent)) == (0, 0, 0)
    assert ThreadContextItem.objects.filter(item_type="human_message").count() == 1


def test_g5_reply_mode_mention_overrides_a_discuss_bot(feishu, group_bot):
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, reply_mode="mention")
    feishu.say(group_bot, text="hello", chat_id=PLAIN)
    assert DiscussWake.objects.count() == 0


def test_g5_an_at_all_never_triggers_a_turn_by_default(feishu, group_bot):
    # given: an @all message (Feishu's @_all key)
    from feishu.inbound.signing import message_event_payload

    payload = message_event_payload(
        verification_token=group_bot.feishu_verification_token,
        app_id=group_bot.feishu_app_id,
        message_id="om_all",
        chat_id=PLAIN,
        text="@_all standup in 5",
        sender_open_id="ou_alice",
        chat_type="group",
        mentions=[{"key": "@_all", "id": {"open_id": ""}, "name": "Everyone"}],
    )
    feishu.post(group_bot, payload)
    # then: no turn and no wake
    assert (Turn.objects.count(), DiscussWake.objects.count()) == (0, 0)
    # when: the group opts in
    Workspace.objects.filter(bot_profile=group_bot.slug).update(respond_to_at_all=True)
    from threadcontext.selectors import workspace_cache_forget

    workspace_cache_forget(bot_profile=group_bot.slug, chat_id=PLAIN)
    payload["event"]["message"]["message_id"] = "om_all_2"
    # A new message is a new event: Feishu never reuses an event_id, and the webhook ignores one reused with other
    # content (issue 30, finding 9).
    payload["header"]["event_id"] = "ev_all_2"
    feishu.post(group_bot, payload)
    # then: a mention turn
    assert list(Turn.objects.values_list("trigger", "source_message_id")) == [("mention", "om_all_2")]


def test_g5_only_the_listed_people_may_trigger_the_bot(feishu, group_bot, llm_stub):
    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, allowed_open_ids=["ou_lead"])
    feishu.say(group_bot, text="do it", chat_id=PLAIN, mention=[group_bot], sender="ou_alice", message_id="om_a")
    feishu.say(group_bot, text="chatter", chat_id=PLAIN, sender="ou_alice")
    assert (Turn.objects.count(), DiscussWake.objects.count()) == (0, 0)
    assert InboundEvent.objects.get(message_id="om_a").error == "not_allowed"
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Yes.")))
    feishu.say(group_bot, text="do it", chat_id=PLAIN, mention=[group_bot], sender="ou_lead")
    assert Turn.objects.get().status == "delivered"


def test_g5_the_policy_is_read_from_a_cache_no_query_per_message(feishu, group_bot, django_assert_max_num_queries):
    from threadcontext.selectors import workspace_cached_get

    Workspace.objects.create(bot_profile=group_bot.slug, chat_id=PLAIN, reply_mode="mention")
    assert workspace_cached_get(bot_profile=group_bot.slug, chat_id=PLAIN).reply_mode == "mention"
    with django_assert_max_num_queries(0):
        assert workspace_cached_get(bot_profile=group_bot.slug, chat_id=PLAIN).reply_mode == "mention"


def test_g7_recalled_message_is_gone_from_the_next_decision_and_explain_says_so(
    feishu, group_bot, llm_stub, django_capture_on_commit_callbacks
):
    # given: two main-timeline messages, one then recalled by its sender
    Workspace.objects.create(
        bot_profile=group_bot.slug, chat_id=PLAIN, shared_thread_enabled=True, reply_mode="mention"
    )
    feishu.say(group_bot, text="the password is hunter2", chat_id=PLAIN, message_id="om_oops")
    feishu.say(group_bot, text="the build is red", chat_id=PLAIN, message_id="om_ok")
    recalled = fixture_payload("bot_added_to_chat", bot=group_bot)
    recalled["header"].update(event_type="im.message.recalled_v1", event_id="1" * 32)
    recalled["event"] = {"message_id": "om_oops", "chat_id": PLAIN, "recall_time": "1", "recall_type": "message_owner"}
    feishu.post(group_bot, recalled)
    # when: the bot is @-ed in that timeline
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Looking.")))
    feishu.say(group_bot, text="thoughts?", chat_id=PLAIN, mention=[group_bot], message_id="om_ask")
    # then: the recalled message's item is gone and the decision never selected it
    assert InboundEvent.objects.get(message_id="recalled:om_oops").status == "done"
    assert not ThreadContextItem.objects.filter(message_id="om_oops").exists()
    decision = ThreadContextDecision.objects.get(message_id="om_ask")
    assert "hunter2" not in decision.thread_context
    assert "ou_alice: the build is red" in decision.thread_context
    assert "hunter2" not in str(llm_stub.requests_for("openai_chat")[0].json)
    text = decision_explain_text(decision=decision)
    assert "recalled om_oops: removed from thread context before this decision" in text
