"""P1, P9, P10: the bridge's debounced discuss wake, its retries, and the hand-off to the turn.

Debounce tests drive time through the services' `now` (no sleeps). The end-to-end tests go through the real
webhook, routing, gate, turn and delivery (Feishu and LLM stubs on 127.0.0.1).
"""

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Turn
from feishu.discuss.fire import (
    FIRE_DECLINED,
    FIRE_FAILED,
    FIRE_NOT_CLAIMED,
    FIRE_NOT_DUE,
    FIRE_RETRY,
    FIRE_STARTED,
    FIRE_SUPERSEDED,
    discuss_wake_fire,
)
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.discuss.transcript import discuss_transcript_build
from feishu.discuss.wake import RUNNING_ABANDONED_AFTER_SECONDS, discuss_wake_schedule
from feishu.models import DiscussWake, OutboundDelivery
from probe.models import ProbeJudgement
from probe.prompts import ACTIVATION_MARKER, activation_contract
from probe.selectors import failing_closed_bots_list
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body, openai_error_body
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
CHAT, ROOT = "oc_discuss", "om_root"


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


def record_item(*, bot: Bot, message_id: str, text: str) -> None:
    """A human message as the collector records it (what the judge's transcript is built from)."""
    event = ThreadEvent.objects.create(
        chat_id=CHAT,
        root_msg_id=ROOT,
        message_id=message_id,
        event_type="human_message",
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        actor_type="user",
        actor_id="ou_alice",
        text=text,
    )
    ThreadContextItem.objects.create(
        event=event,
        chat_id=CHAT,
        root_msg_id=ROOT,
        bridge_id=bot.bridge_id,
        item_type="human_message",
        role="user",
        author_label="ou_alice",
        text=text,
    )


def say(bot: Bot, index: int, at: datetime) -> DiscussWake:
    record_item(bot=bot, message_id=f"om_{index}", text=f"message {index}")
    return discuss_wake_schedule(bot=bot, chat_id=CHAT, root_msg_id=ROOT, message_id=f"om_{index}", now=at)


@pytest.fixture
def judged_bot(make_judge, make_discuss_bot, llm_stub):
    """A discuss bot whose judge (openai_chat at the stub) declines unless a test scripts otherwise."""
    llm_stub.respond_with(
        "openai_chat",
        lambda request: StubResponse(
            body=openai_chat_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "chatter"})])
        ),
    )
    return make_discuss_bot(
        mode=Bot.ProbeMode.MODEL, judge=make_judge(), probe_debounce_initial_ms=1000, probe_debounce_max_ms=30000
    )


# --- Debounce (P10) -----------------------------------------------------------------------------------------


def test_ten_messages_in_two_seconds_are_one_probe_P10(judged_bot, llm_stub):
    # given: 10 messages 200 ms apart
    for index in range(10):
        wake = say(judged_bot, index, T0 + ms(200 * index))
    # then: one open wake holding all of them, due 1 s after the last
    assert DiscussWake.objects.count() == 1
    assert wake.message_ids == [f"om_{index}" for index in range(10)]
    assert wake.due_at == T0 + ms(1800 + 1000)
    # when: the sweeper runs before and after it is due
    assert discuss_wakes_sweep(now=T0 + ms(2500)) == []
    assert discuss_wakes_sweep(now=T0 + ms(2800)) == [FIRE_DECLINED]
    assert discuss_wakes_sweep(now=T0 + ms(9000)) == []
    # then: exactly one probe
    assert ProbeJudgement.objects.count() == 1
    assert len(llm_stub.requests_for("openai_chat")) == 1
    assert DiscussWake.objects.get().status == "done"


def test_a_quiet_gap_makes_two_probes_P10(judged_bot, llm_stub):
    # given a message, a quiet gap longer than the debounce, then another message
    say(judged_bot, 1, T0)
    discuss_wakes_sweep(now=T0 + ms(1500))
    say(judged_bot, 2, T0 + ms(10_000))
    discuss_wakes_sweep(now=T0 + ms(11_500))
    # then
    assert ProbeJudgement.objects.count() == 2
    assert DiscussWake.objects.filter(status="done").count() == 2
    assert len(llm_stub.requests_for("openai_chat")) == 2


def test_a_steady_stream_is_capped_by_the_maximum_delay_P10(judged_bot):
    # given a message every 500 ms for 40 s (the wake would otherwise never become due)
    fired = []
    for index in range(80):
        now = T0 + ms(500 * index)
        say(judged_bot, index, now)
        fired += discuss_wakes_sweep(now=now)
    # then: the first wake fired at its 30 s deadline and a second one opened after it
    first = DiscussWake.objects.order_by("id").first()
    assert first.deadline_at == T0 + ms(30_000)
    assert first.due_at == T0 + ms(30_000)
    assert fired == [FIRE_DECLINED]
    assert DiscussWake.objects.count() == 2


def test_per_bot_delays_fall_back_to_settings_P10(make_discuss_bot, settings):
    settings.AMUX_PROBE_DEBOUNCE_INITIAL_MS = 2500
    settings.AMUX_PROBE_DEBOUNCE_MAX_MS = 20000
    bot = make_discuss_bot(mode=Bot.ProbeMode.OFF)
    wake = discuss_wake_schedule(bot=bot, chat_id=CHAT, root_msg_id=ROOT, message_id="om_x", now=T0)
    assert (wake.due_at, wake.deadline_at) == (T0 + ms(2500), T0 + ms(20000))


def test_the_fire_task_rechecks_due_at_after_an_extension_P10(judged_bot):
    # given a wake whose task was queued for its first due time, then extended
    wake = say(judged_bot, 1, T0)
    say(judged_bot, 2, T0 + ms(800))
    # when the originally scheduled task runs
    outcome = discuss_wake_fire(wake_id=wake.pk, now=T0 + ms(1000))
    # then nothing ran yet
    assert outcome == FIRE_NOT_DUE
    assert ProbeJudgement.objects.count() == 0
    assert DiscussWake.objects.get().status == "pending"


def test_a_wake_is_fired_once_by_concurrent_workers_P10(judged_bot):
    wake = say(judged_bot, 1, T0)
    first = discuss_wake_fire(wake_id=wake.pk, now=T0 + ms(2000))
    second = discuss_wake_fire(wake_id=wake.pk, now=T0 + ms(2000))
    assert (first, second) == (FIRE_DECLINED, FIRE_NOT_CLAIMED)
    assert ProbeJudgement.objects.count() == 1


# --- Recovery (P10) -----------------------------------------------------------------------------------------


def test_a_provider_fault_is_retried_with_backoff_P10(make_judge, make_discuss_bot, llm_stub):
    # given a judge that is down once, then answers
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(), probe_debounce_initial_ms=1000)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(status=503, body=openai_error_body(message="overloaded", type_="server_error")),
        StubResponse(body=openai_chat_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "r"})])),
    )
    say(bot, 1, T0)
    # when
    first = discuss_wakes_sweep(now=T0 + ms(1000))
    # then: failed closed for now, retry due 30 s later
    wake = DiscussWake.objects.get()
    assert first == [FIRE_RETRY]
    assert (wake.status, wake.attempts, wake.due_at) == ("failed", 1, T0 + ms(31_000))
    assert "TransientError" in wake.error
    assert discuss_wakes_sweep(now=T0 + ms(20_000)) == []
    # when the backoff elapsed
    assert discuss_wakes_sweep(now=T0 + ms(31_000)) == [FIRE_DECLINED]
    wake.refresh_from_db()
    assert (wake.status, wake.attempts, wake.error) == ("done", 2, "")
    assert list(ProbeJudgement.objects.order_by("id").values_list("cause", flat=True)) == [
        "model_call_failed",
        "judged",
    ]


def test_a_persistent_fault_stays_failed_closed_and_visible_P10(make_judge, make_discuss_bot, llm_stub):
    # given a judge that is always down
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(), probe_debounce_initial_ms=1000)
    llm_stub.respond_with(
        "openai_chat", lambda request: StubResponse(status=500, body=openai_error_body(message="down", type_="x"))
    )
    say(bot, 1, T0)
    # when: every attempt runs
    outcomes = []
    for seconds in (1, 31, 151, 1000, 5000):
        outcomes += discuss_wakes_sweep(now=T0 + timedelta(seconds=seconds))
    # then: three attempts, the wake stays failed with its error, nothing was sent
    assert outcomes == [FIRE_RETRY, FIRE_RETRY, FIRE_FAILED]
    wake = DiscussWake.objects.get()
    assert (wake.status, wake.attempts, wake.turn_id) == ("failed", 3, None)
    assert Turn.objects.count() == 0
    # and the admin's failing-closed list shows the bot, its cause and count
    (failing,) = failing_closed_bots_list(now=timezone.now())
    assert (failing.bot_id, failing.cause, failing.count) == (bot.pk, "model_call_failed", 3)


def test_a_retry_superseded_by_a_newer_wake_does_not_probe_twice_P10(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(), probe_debounce_initial_ms=1000)
    llm_stub.enqueue("openai_chat", StubResponse(status=503, body=openai_error_body(message="busy", type_="x")))
    say(bot, 1, T0)
    discuss_wakes_sweep(now=T0 + ms(1000))  # fault: retry due at +31 s
    say(bot, 2, T0 + ms(5000))  # a newer wake for the same topic
    outcomes = discuss_wakes_sweep(now=T0 + ms(40_000))
    assert sorted(outcomes) == sorted([FIRE_SUPERSEDED, FIRE_DECLINED])
    assert ProbeJudgement.objects.count() == 2  # the fault, then one judgement for the newer wake


# --- End to end through the webhook (P1, P9) ----------------------------------------------------------------


@pytest.fixture
def discuss_feishu_bot(make_feishu_bot, make_judge, llm_stub):
    """A discuss-mode Feishu bot: judge = Anthropic at the stub, primary = OpenAI chat at the stub."""
    from tests.agents.factories import LLMModelFactory, ProviderFactory

    primary_provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    primary = LLMModelFactory(provider=primary_provider, name="gpt-4o", supports_tool_calls=True)
    bot = make_feishu_bot(
        name="Planner",
        primary_model=primary,
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_team")  # discussion is recorded in a workspace
    return bot


def sweep_later(django_capture_on_commit_callbacks) -> list[str]:
    with django_capture_on_commit_callbacks(execute=True):
        return discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))


def test_send_starts_one_turn_whose_last_message_is_the_contract_P9(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    """P9 through the real path: webhook → wake → gate → feishu_turn_start → turn_run → the provider's body."""
    # given: a group message that does not address the bot, and a judge that says send
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "carol asks"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The build is red because of X.")))
    response, _ = feishu.say(discuss_feishu_bot, text="why is the build red?", chat_id="oc_team")
    assert response.status_code == 200
    assert DiscussWake.objects.filter(bot=discuss_feishu_bot, status="pending").count() == 1
    # when the wake is due
    outcomes = sweep_later(django_capture_on_commit_callbacks)
    # then: one judge call, one primary call ending on the contract, one message posted to Feishu
    assert outcomes == [FIRE_STARTED]
    judge_body = llm_stub.requests_for("anthropic")[0].json
    assert judge_body["messages"] == [{"role": "user", "content": "ou_alice: why is the build red?"}]
    (primary_request,) = llm_stub.requests_for("openai_chat")
    last = primary_request.json["messages"][-1]
    assert last["role"] == "user"
    assert last["content"] == activation_contract(reason="carol asks")
    assert ACTIVATION_MARKER in last["content"] and "> carol asks" in last["content"]
    turn = Turn.objects.get(bot=discuss_feishu_bot)
    assert turn.trigger == "discuss"
    wake = DiscussWake.objects.get()
    assert (wake.status, wake.turn_id) == ("done", turn.pk)
    assert ProbeJudgement.objects.get().turn_id == turn.pk
    assert OutboundDelivery.objects.filter(turn=turn).count() == 1
    assert len(feishu.stub.sent) == 1


def test_no_action_ends_the_wake_without_a_turn_P9(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "chatter"})])),
    )
    feishu.say(discuss_feishu_bot, text="lol same", chat_id="oc_team")
    assert sweep_later(django_capture_on_commit_callbacks) == [FIRE_DECLINED]
    assert Turn.objects.count() == 0
    assert llm_stub.requests_for("openai_chat") == []  # no primary, no context package: nothing expensive ran
    assert feishu.stub.sent == []


@pytest.mark.parametrize("how", ["dm", "mention"])
def test_dms_and_mentions_bypass_the_gate_P1(
    how, feishu, discuss_feishu_bot, llm_stub, caplog, django_capture_on_commit_callbacks
):
    """P1: a DM or an @-addressed message never wakes the gate and the gate logs nothing for it."""
    caplog.set_level(logging.DEBUG, logger="probe.services")
    # when
    if how == "dm":
        feishu.say(discuss_feishu_bot, text="hi there", chat_type="p2p", chat_id="oc_dm")
    else:
        feishu.say(discuss_feishu_bot, text="what do you think?", mention=[discuss_feishu_bot], chat_id="oc_team")
    sweep_later(django_capture_on_commit_callbacks)
    # then
    assert DiscussWake.objects.count() == 0
    assert ProbeJudgement.objects.count() == 0
    assert llm_stub.requests_for("anthropic") == []
    assert [r for r in caplog.records if r.name == "probe.services"] == []
    turn = Turn.objects.get(bot=discuss_feishu_bot)
    assert turn.trigger == ("dm" if how == "dm" else "mention")
    assert ACTIVATION_MARKER not in str(llm_stub.requests_for("openai_chat")[0].json)


def test_ungated_bot_runs_the_turn_without_a_contract_P2(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    Bot.objects.filter(pk=discuss_feishu_bot.pk).update(discuss_probe_mode=Bot.ProbeMode.OFF)
    feishu.say(discuss_feishu_bot, text="anyone around?", chat_id="oc_team")
    assert sweep_later(django_capture_on_commit_callbacks) == [FIRE_STARTED]
    assert llm_stub.requests_for("anthropic") == []
    (primary_request,) = llm_stub.requests_for("openai_chat")
    assert ACTIVATION_MARKER not in str(primary_request.json)
    assert ProbeJudgement.objects.get().cause == "mode_off"


def test_a_group_scope_workspace_debounces_the_whole_group_P10(judged_bot, llm_stub):
    """One continuous session per group: top-level messages (each its own root) share one wake and transcript."""
    # given
    Workspace.objects.create(bot_profile=judged_bot.slug, chat_id=CHAT, session_scope="group")
    for index in range(3):
        record_item(bot=judged_bot, message_id=f"om_g{index}", text=f"top-level {index}")
        discuss_wake_schedule(
            bot=judged_bot, chat_id=CHAT, root_msg_id=f"om_g{index}", message_id=f"om_g{index}", now=T0 + ms(index)
        )
    # when
    outcomes = discuss_wakes_sweep(now=T0 + ms(5000))
    # then
    wake = DiscussWake.objects.get()
    assert (wake.root_msg_id, len(wake.message_ids), outcomes) == ("group", 3, [FIRE_DECLINED])
    sent = llm_stub.requests_for("openai_chat")[0].json["messages"]
    assert [m["content"] for m in sent[1:]] == [f"ou_alice: top-level {index}" for index in range(3)]


def test_an_empty_primary_answer_is_retried_once_with_the_contract_restated_P9(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    """P9: the primary answers nothing → one retry whose last message restates the contract; one message sent."""
    # given: the judge says send, the primary first answers with empty text, then with a message
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "help erin"})])),
    )
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(text="")),
        StubResponse(body=openai_chat_body(text="Erin, the fix is in #42.")),
    )
    feishu.say(discuss_feishu_bot, text="where was that fix again?", chat_id="oc_team")
    # when
    assert sweep_later(django_capture_on_commit_callbacks) == [FIRE_STARTED]
    # then
    first, retry = llm_stub.requests_for("openai_chat")
    contract = activation_contract(reason="help erin")
    assert first.json["messages"][-1]["content"] == contract
    assert retry.json["messages"][-1]["role"] == "user"
    assert retry.json["messages"][-1]["content"].endswith(contract)
    assert len(feishu.stub.sent) == 1
    assert OutboundDelivery.objects.get().content == "Erin, the fix is in #42."


def test_explain_page_shows_gate_context_and_delivery_on_one_screen_P11(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks, admin_client
):
    # given an activated wake that delivered a reply
    llm_stub.enqueue(
        "anthropic",
        StubResponse(
            body=anthropic_body(
                tool_calls=[("decide", {"should_act": "send", "reason": "frank asked"})], input_tokens=432
            )
        ),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Frank: use the staging key.")))
    feishu.say(discuss_feishu_bot, text="which key do we use?", chat_id="oc_team", sender="ou_frank")
    sweep_later(django_capture_on_commit_callbacks)
    wake = DiscussWake.objects.get()
    # when
    response = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk]))
    # then: one screen with the gate, the context decision and the delivery
    assert response.status_code == 200
    explain = response.context["explain"]
    (gate,) = explain["gate"]
    assert (gate["ran"], gate["cause"], gate["outcome"], gate["reason"], gate["input_tokens"]) == (
        True,
        "judged",
        "act",
        "frank asked",
        432,
    )
    assert explain["turn"]["trigger"] == "discuss"
    assert explain["context"] is not None and explain["context"]["decision_id"]
    assert [(d["status"], d["chunk_index"]) for d in explain["delivery"]] == [("sent", 0)]
    html = response.content.decode()
    for section in ("explain-gate", "frank asked", "Context decision", "explain-delivery"):
        assert section in html
    # and the same screen is reachable from the turn
    by_turn = admin_client.get(reverse("admin:feishu_turn_explain", args=[explain["turn"]["id"]]))
    assert by_turn.context["explain"]["wake"]["id"] == wake.pk
    assert admin_client.get(reverse("admin:feishu_discusswake_explain", args=[999])).status_code == 404


def test_explain_of_a_mention_turn_shows_no_gate_P1_P11(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks, admin_client
):
    feishu.say(discuss_feishu_bot, text="status?", mention=[discuss_feishu_bot], chat_id="oc_team")
    turn = Turn.objects.get()
    response = admin_client.get(reverse("admin:feishu_turn_explain", args=[turn.pk]))
    assert response.status_code == 200
    assert (response.context["explain"]["wake"], response.context["explain"]["gate"]) == (None, [])
    assert "The gate did not run" in response.content.decode()


def test_contract_is_its_own_message_and_captures_nothing_of_the_request_P9(
    feishu, discuss_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    """TestDiscussActivationDoesNotCaptureInlineImages, in our terms: the user's message (and anything attached to
    it) stays on its own message before the contract; the contract carries only the contract."""
    llm_stub.enqueue(
        "anthropic", StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": ""})]))
    )
    feishu.say(discuss_feishu_bot, text="see the attached diagram, thoughts?", chat_id="oc_team")
    sweep_later(django_capture_on_commit_callbacks)
    messages = llm_stub.requests_for("openai_chat")[0].json["messages"]
    assert messages[-1]["content"] == activation_contract(reason="")
    assert "evaluator's notes" not in messages[-1]["content"]  # a blank reason renders no notes
    assert "attached diagram" not in messages[-1]["content"]
    assert "attached diagram" in messages[-2]["content"]


def test_the_gate_carries_the_topics_session_once_it_exists_P8(
    feishu, discuss_feishu_bot, llm_stub, caplog, django_capture_on_commit_callbacks
):
    # given a topic whose first wake started a session
    caplog.set_level(logging.INFO, logger="probe.services")
    decide_send = anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "r"})])
    decide_no = anthropic_body(tool_calls=[("decide", {"should_act": "no_action", "reason": "r"})])
    llm_stub.enqueue("anthropic", StubResponse(body=decide_send), StubResponse(body=decide_no))
    feishu.say(discuss_feishu_bot, text="kick-off: release plan", chat_id="oc_team", message_id="om_k")
    sweep_later(django_capture_on_commit_callbacks)
    thread_id = Turn.objects.get().thread_id
    # when a later message in the same topic wakes the gate again
    feishu.say(discuss_feishu_bot, text="sounds good", chat_id="oc_team", root_id="om_k", thread_id="omt_1")
    sweep_later(django_capture_on_commit_callbacks)
    # then: the second judgement and its log record carry the session
    first_row, second_row = ProbeJudgement.objects.order_by("id")
    assert (first_row.thread_id, second_row.thread_id) == (thread_id, thread_id)  # the first is linked on activation
    records = [r for r in caplog.records if r.name == "probe.services"]
    assert [r.session_id for r in records] == ["", str(thread_id)]


def test_rest_turns_never_run_the_gate_P1(discuss_feishu_bot, llm_stub, caplog):
    """P1: a REST message to a discuss-mode bot is a turn without any probe and without any gate record."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from tests.agents.factories import ThreadFactory

    caplog.set_level(logging.DEBUG, logger="probe.services")
    thread = ThreadFactory(bot=discuss_feishu_bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=discuss_feishu_bot.owner).key}")
    response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "hello"}, format="json")
    assert response.status_code == 202
    assert Turn.objects.get().trigger == "rest"
    assert llm_stub.requests_for("anthropic") == []
    assert (ProbeJudgement.objects.count(), DiscussWake.objects.count()) == (0, 0)
    assert [r for r in caplog.records if r.name == "probe.services"] == []


def test_a_wake_abandoned_by_a_dead_worker_is_fired_by_the_sweeper_P10(judged_bot, llm_stub):
    # given a wake a worker claimed (running) and then died on
    wake = say(judged_bot, 1, T0)
    DiscussWake.objects.filter(pk=wake.pk).update(status="running", attempts=1, updated_at=T0 + ms(1000))
    # when the sweeper runs before and after the abandonment delay
    early = discuss_wakes_sweep(now=T0 + ms(1000) + timedelta(seconds=60))
    late = discuss_wakes_sweep(now=T0 + ms(1000) + timedelta(seconds=RUNNING_ABANDONED_AFTER_SECONDS + 1))
    # then
    assert (early, late) == ([], [FIRE_DECLINED])
    wake.refresh_from_db()
    assert (wake.status, wake.attempts) == ("done", 2)
    assert ProbeJudgement.objects.count() == 1


def test_a_reply_to_the_bot_bypasses_the_gate_P1(
    feishu, discuss_feishu_bot, llm_stub, caplog, django_capture_on_commit_callbacks
):
    # given a message the bot posted (after an @)
    feishu.say(discuss_feishu_bot, text="summarise please", mention=[discuss_feishu_bot], chat_id="oc_team")
    bot_message_id = OutboundDelivery.objects.get().feishu_message_id
    assert bot_message_id
    caplog.set_level(logging.DEBUG, logger="probe.services")
    # when someone replies to it without an @
    feishu.say(discuss_feishu_bot, text="can you shorten it?", chat_id="oc_team", parent_id=bot_message_id)
    sweep_later(django_capture_on_commit_callbacks)
    # then: a reply turn, no wake, no probe, no gate record
    assert sorted(Turn.objects.values_list("trigger", flat=True)) == ["mention", "reply"]
    assert (DiscussWake.objects.count(), ProbeJudgement.objects.count()) == (0, 0)
    assert llm_stub.requests_for("anthropic") == []
    assert [r for r in caplog.records if r.name == "probe.services"] == []


def test_transcript_reads_this_bridges_copies_and_every_bots_outputs(judged_bot):
    """Two bots in one group: people's messages once (this bridge's copy), both bots' outputs, own as assistant."""

    # given
    def item(bridge_id: str, item_type: str, label: str, text: str) -> None:
        profile, _, session = label.partition("/")
        is_output = item_type == "agent_output"
        event = ThreadEvent.objects.create(
            chat_id=CHAT, root_msg_id=ROOT, message_id=f"om_{text}", event_type=item_type, bridge_id=bridge_id,
            bot_profile=profile if is_output else "x", session_name=session, actor_id="" if is_output else label,
            text=text,
        )  # fmt: skip
        ThreadContextItem.objects.create(
            event=event, chat_id=CHAT, root_msg_id=ROOT, bridge_id=bridge_id, item_type=item_type,
            author_label=label, text=text,
        )  # fmt: skip

    item(judged_bot.bridge_id, "human_message", "ou_alice", "hello")
    item("cli_other", "human_message", "ou_alice", "hello-copy")
    item("cli_other", "agent_output", "coder/coder-main", "done")
    item(judged_bot.bridge_id, "agent_output", "planner", "noted")
    # when
    transcript = discuss_transcript_build(bot=judged_bot, chat_id=CHAT, root_msg_id=ROOT)
    # then
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "ou_alice: hello"),
        ("user", "coder/coder-main: done"),
        ("assistant", "noted"),
    ]
