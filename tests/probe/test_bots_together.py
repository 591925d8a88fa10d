"""Bots work together (ARCHITECTURE §11.3 B3, B4) through the real path: signed webhooks for each bot's app ->
routing -> the wakes -> the sweeper's fire tasks (eager) -> judges and primaries at the LLM stub -> the Feishu stub.
"""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Turn
from feishu.discuss.fire import FIRE_CANDIDATE, FIRE_DECLINED, FIRE_STARTED
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.explain import wake_explain_data
from feishu.models import AnswerCandidate, Arbitration, DiscussWake, InboundEvent
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_team"


@pytest.fixture
def team(make_feishu_bot, make_judge, llm_stub, feishu):
    """Planner, Coder and Reviewer: discuss bots of one ordinary group (judges: Anthropic; primaries: OpenAI chat)."""
    feishu.stub.chat_set(CHAT, chat_mode="group", group_message_type="chat", name="Team")
    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    judge = make_judge(kind="anthropic")
    primary = LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True)
    bots = []
    for slug, name in (("coder", "Coder"), ("planner", "Planner"), ("reviewer", "Reviewer")):
        bots.append(
            make_feishu_bot(
                slug=slug,
                name=name,
                primary_model=primary,
                group_reply_mode=Bot.GroupReplyMode.DISCUSS,
                discuss_probe_mode=Bot.ProbeMode.MODEL,
                discuss_probe_model=judge,
                reply_format=Bot.ReplyFormat.TEXT,
                probe_debounce_initial_ms=1000,
            )
        )
    return bots


def judges_say_send(llm_stub, count: int) -> None:
    for index in range(count):
        decide = ("decide", {"should_act": "send", "reason": f"a question for the team ({index})"})
        llm_stub.enqueue("anthropic", StubResponse(body=anthropic_body(tool_calls=[decide])))


def everyone_hears(feishu, bots, **message) -> None:
    """One group message as each bot's app receives it (same message_id)."""
    for bot in bots:
        feishu.say(bot, chat_id=CHAT, **message)


def sweep_later(django_capture_on_commit_callbacks) -> list[str]:
    with django_capture_on_commit_callbacks(execute=True):
        return discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))


def test_b3_three_discuss_bots_whose_judges_all_say_send_give_one_answer(
    feishu, team, llm_stub, django_capture_on_commit_callbacks, admin_client
):
    # given: three discuss bots of one chat, each judge says send
    judges_say_send(llm_stub, 3)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Roll back to 1.4.")))
    # when: one un-addressed question reaches the three apps, and the wakes fire
    everyone_hears(feishu, team, text="the deploy failed, what now?", message_id="om_q")
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: three judgements, one pick recorded with its reason, one turn and one message posted
    assert sorted(outcomes) == [FIRE_CANDIDATE, FIRE_CANDIDATE, FIRE_STARTED]
    assert len(llm_stub.requests_for("anthropic")) == 3
    arbitration = Arbitration.objects.get()
    assert (arbitration.message_id, arbitration.winner_bot.slug, arbitration.rule) == ("om_q", "coder", "first_by_slug")
    assert "Coder of Coder, Planner, Reviewer" in arbitration.reason
    turn = Turn.objects.get()
    assert (turn.bot.slug, turn.trigger, turn.status, arbitration.winner_turn_id) == (
        "coder",
        "discuss",
        "delivered",
        turn.pk,
    )
    assert feishu.stub.sent_texts() == ["Roll back to 1.4."]
    # the others' outcomes say arbitrated and link to the winner
    losers = AnswerCandidate.objects.exclude(bot__slug="coder")
    assert {c.outcome for c in losers} == {"arbitrated"} and {c.arbitration_id for c in losers} == {arbitration.pk}
    for candidate in losers:
        wake = DiscussWake.objects.get(pk=candidate.wake_id)
        assert wake.error == f"arbitrated: Coder answers (turn {turn.pk})"
        explained = wake_explain_data(wake_id=wake.pk)
        assert explained["arbitration"]["winner"] == "Coder"
        assert explained["arbitration"]["outcome"] == "arbitrated"
    page = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk])).content.decode()
    assert "Picked: Coder (this bot: arbitrated)" in page and "first_by_slug" in page


def test_b3_the_pick_prefers_the_bot_the_message_names_then_the_quietest(
    feishu, team, llm_stub, django_capture_on_commit_callbacks
):
    coder, planner, reviewer = team
    judges_say_send(llm_stub, 3)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Here is a plan.")))
    everyone_hears(feishu, team, text="does the planner have a plan for this?", message_id="om_named")
    sweep_later(django_capture_on_commit_callbacks)
    arbitration = Arbitration.objects.get()
    assert (arbitration.winner_bot, arbitration.rule) == (planner, "named_in_message")
    assert arbitration.reason == "Planner of Coder, Planner, Reviewer: the message names Planner"
    # when: a second question names nobody: the Planner spoke, the Coder and the Reviewer did not; first by slug
    judges_say_send(llm_stub, 3)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="On it.")))
    everyone_hears(feishu, team, text="and who checks the logs?", message_id="om_next")
    sweep_later(django_capture_on_commit_callbacks)
    second = Arbitration.objects.get(message_id="om_next")
    assert second.winner_bot == coder
    assert Turn.objects.count() == 2


def test_b3_each_lets_every_activated_bot_answer(feishu, team, llm_stub, django_capture_on_commit_callbacks):
    everyone_hears(feishu, team[:2], text="warm-up", message_id="om_warm")  # the workspaces exist
    sweep_later(django_capture_on_commit_callbacks)  # the judges' queue is empty: they fail closed, no answer
    Workspace.objects.filter(chat_id=CHAT).update(discuss_answers="each")
    judges_say_send(llm_stub, 2)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="one")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="two")))
    everyone_hears(feishu, team[:2], text="ideas?", message_id="om_each")
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    assert outcomes == [FIRE_STARTED, FIRE_STARTED]
    assert not Arbitration.objects.exists()
    assert Turn.objects.filter(source_message_id="om_each").count() == 2


def test_b4_an_at_of_the_reviewer_opens_no_wake_for_the_others(
    feishu, team, llm_stub, django_capture_on_commit_callbacks
):
    coder, planner, reviewer = team
    everyone_hears(feishu, team, text="hello team", message_id="om_hello")  # every bot has its workspace
    DiscussWake.objects.all().delete()
    # when: a message @-mentions the Reviewer, as each app receives it
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Looks fine to me.")))
    everyone_hears(feishu, team, text="please review PR 12", message_id="om_at", mention=[reviewer])
    # then: the Reviewer answers; the Coder and the Planner open no wake and no judge runs
    assert not DiscussWake.objects.exists()
    assert {e.status for e in InboundEvent.objects.filter(message_id="om_at")} == {"done"}
    turn = Turn.objects.get()
    assert (turn.bot, turn.trigger) == (reviewer, "mention")
    assert sweep_later(django_capture_on_commit_callbacks) == []
    assert llm_stub.requests_for("anthropic") == []


def test_b4_at_all_follows_respond_to_at_all_then_one_answer(
    feishu, team, llm_stub, django_capture_on_commit_callbacks
):
    coder, planner, reviewer = team
    everyone_hears(feishu, team, text="hello team", message_id="om_hello")
    DiscussWake.objects.all().delete()
    Workspace.objects.filter(chat_id=CHAT, bot_profile__in=["planner", "reviewer"]).update(respond_to_at_all=True)
    cache.clear()  # routing reads the workspace from the cache; the admin's save would drop the entry
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Planner here.")))
    everyone_hears(feishu, team, text="standup in 5", message_id="om_all", at_all=True)
    # then: the Coder ignores the @all (its workspace does not respond to it); of the two that do, one answers
    (turn,) = Turn.objects.all()
    assert turn.bot == planner
    arbitration = Arbitration.objects.get(message_id="om_all")
    assert (arbitration.winner_bot, arbitration.rule) == (planner, "at_all_first_by_slug")
    assert not DiscussWake.objects.exists()


def test_b5_a_judge_sees_the_other_bots_replies_labelled_by_bot(
    feishu, team, llm_stub, django_capture_on_commit_callbacks
):
    # given: the Coder answered a first question (picked by B3)
    judges_say_send(llm_stub, 3)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Roll back to 1.4.")))
    everyone_hears(feishu, team, text="the deploy failed, what now?", message_id="om_first")
    sweep_later(django_capture_on_commit_callbacks)
    # when: a follow-up in the same timeline wakes the judges again
    for _ in range(3):
        decide = ("decide", {"should_act": "no_action", "reason": "the Coder answered it"})
        llm_stub.enqueue("anthropic", StubResponse(body=anthropic_body(tool_calls=[decide])))
    everyone_hears(feishu, team, text="is that safe?", message_id="om_follow")
    sweep_later(django_capture_on_commit_callbacks)
    # then: the Planner's and the Reviewer's judges see the Coder's reply, labelled with its name; the Coder's sees
    # it as its own (assistant) turn
    later = llm_stub.requests_for("anthropic")[3:]
    transcripts = [[(m["role"], str(m["content"])) for m in request.json["messages"]] for request in later]
    labelled = [t for t in transcripts if ("user", "Coder (bot): Roll back to 1.4.") in t]
    own = [t for t in transcripts if any(role == "assistant" and "Roll back" in text for role, text in t)]
    assert (len(labelled), len(own)) == (2, 1)
    assert Turn.objects.count() == 1


def test_b3_a_pick_waits_for_the_last_judge_even_when_it_declines(
    feishu, team, llm_stub, django_capture_on_commit_callbacks
):
    # given: two discuss bots; the first judge says send, the second (fired last) declines
    coder, planner, _ = team
    decide_send = ("decide", {"should_act": "send", "reason": "a question"})
    decide_no = ("decide", {"should_act": "no_action", "reason": "not mine"})
    llm_stub.enqueue("anthropic", StubResponse(body=anthropic_body(tool_calls=[decide_send])))
    llm_stub.enqueue("anthropic", StubResponse(body=anthropic_body(tool_calls=[decide_no])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Here.")))
    # when
    everyone_hears(feishu, [coder, planner], text="who owns the cache?", message_id="om_decline")
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: the candidate waited for the other judge, whose decline made the pick (a pick of one)
    assert outcomes == [FIRE_CANDIDATE, FIRE_DECLINED]
    arbitration = Arbitration.objects.get()
    assert (arbitration.winner_bot, len(arbitration.candidates)) == (coder, 1)
    assert Turn.objects.get().bot == coder
