"""Processing and routing of stored events (ARCHITECTURE §5 step 2; C2-C4, C7, C8, C14, F5, F6)."""

import json
import re

import pytest

from agents.models import Bot, Turn
from core.redaction import REDACTED
from feishu.channel.turn_channel import QUOTED_READ_FAILED_TEXT
from feishu.inbound.messages import NEW_SESSION_TEXT, RETIRED_SESSION_TEXT
from feishu.inbound.parsing import message_parse, text_chunks
from feishu.inbound.signing import message_event_payload
from feishu.models import DiscussWake, InboundEvent, OutboundDelivery
from tests.feishu.commands_helpers import full_help
from tests.feishu.conftest import bot_open_id, fixture_payload
from threadcontext.models import SessionBinding, ThreadContextDecision, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db


def _sent_texts(stub) -> list[str]:
    return stub.sent_texts()


def test_parse_rich_text_post_in_a_topic(make_feishu_bot):
    bot = make_feishu_bot()

    parsed = message_parse(fixture_payload("message_post_in_topic", bot=bot))

    assert parsed.text == "Plan\n@_user_1 please review @_user_2\nthe spec"
    assert (parsed.root_id, parsed.parent_id, parsed.thread_id) == ("om_topic_root_1", "om_topic_root_1", "omt_topic_1")
    assert [m.open_id for m in parsed.mentions] == [bot_open_id(bot), "ou_bob"]
    assert parsed.is_in_topic and not parsed.is_explicit_reply  # C7: parent == root inside a topic


def test_c7_explicit_reply_classification():
    base = {"event": {"sender": {}, "message": {"message_id": "om_3", "chat_id": "oc", "content": "{}"}}}

    def parsed(**fields):
        payload = json.loads(json.dumps(base))
        payload["event"]["message"].update(fields)
        return message_parse(payload)

    assert parsed(parent_id="om_1").is_explicit_reply  # no thread_id
    assert parsed(parent_id="om_2", root_id="om_1", thread_id="omt").is_explicit_reply  # parent != root
    assert not parsed(parent_id="om_1", root_id="om_1", thread_id="omt").is_explicit_reply
    assert not parsed().is_explicit_reply


def test_text_chunks_never_lose_text():
    text = "line\n" * 3000

    chunks = text_chunks(text, limit=1000)

    assert all(len(chunk) <= 1000 for chunk in chunks)
    assert "\n".join(chunk.strip("\n") for chunk in chunks) == text.strip("\n")


def test_group_mention_of_this_bot_starts_a_turn_and_replies_in_the_topic(feishu, make_feishu_bot):
    # given
    bot = make_feishu_bot(name="Planner")
    payload = fixture_payload("message_post_in_topic", bot=bot)
    # when
    response = feishu.post(bot, payload)
    # then
    assert response.status_code == 200
    turn = Turn.objects.get(bot=bot)
    assert (turn.trigger, turn.status, turn.source_message_id) == ("mention", "delivered", "om_post_in_topic_1")
    # C4: this bot's @ stripped, other mentions as display names, no Feishu key in what the model saw
    assert turn.user_message.content == "Plan\nplease review @Bob\nthe spec"
    assert "@_user_" not in turn.user_message.prompt
    [reply] = feishu.stub.requests_to("reply")
    assert reply.path == "/open-apis/im/v1/messages/om_post_in_topic_1/reply"
    assert reply.body["reply_in_thread"] is True
    delivery = OutboundDelivery.objects.get(turn=turn)
    assert delivery.feishu_message_id == feishu.stub.sent[0]["message_id"]
    # the delivered output is recorded as agent_output under the topic, keyed by the delivered message id
    output = ThreadEvent.objects.get(event_type="agent_output")
    assert (output.message_id, output.root_msg_id, output.bridge_id) == (
        delivery.feishu_message_id,
        "om_topic_root_1",
        bot.feishu_app_id,
    )


def test_p1_dm_is_a_chat_turn_without_thread_context(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_p2p", bot=bot)

    feishu.post(bot, payload)

    turn = Turn.objects.get(bot=bot)
    assert (turn.trigger, turn.status, turn.context_decision_id) == ("dm", "delivered", None)
    assert ThreadEvent.objects.count() == 0  # C3: DMs never enter workspace thread context
    assert DiscussWake.objects.count() == 0
    [reply] = feishu.stub.requests_to("reply")
    assert reply.body["reply_in_thread"] is False


def test_help_command_answers_with_help_and_starts_no_turn(feishu, make_feishu_bot):
    bot = make_feishu_bot()

    feishu.say(bot, text="/help", mention=[bot])

    assert _sent_texts(feishu.stub) == [full_help(bot)]
    assert Turn.objects.count() == 0
    assert ThreadEvent.objects.count() == 0  # C5: a slash command carries and records no context


def test_c14_new_retires_the_topic_session_and_the_topic_then_answers_start_a_new_topic(feishu, make_feishu_bot):
    # given: a topic session
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.say(bot, text="first question", mention=[bot], message_id="om_root")
    first_turn = Turn.objects.get()
    # when: /new in the topic, then another @ in the same topic
    feishu.say(bot, text="/new", mention=[bot], root_id="om_root", thread_id="omt_1", parent_id="om_root")
    feishu.say(bot, text="second question", mention=[bot], root_id="om_root", thread_id="omt_1", parent_id="om_root")
    # then
    assert SessionBinding.objects.get().retired_at is not None
    assert Turn.objects.count() == 1
    first_turn.thread.refresh_from_db()
    assert first_turn.thread.retired_at is not None
    assert _sent_texts(feishu.stub)[1:] == [NEW_SESSION_TEXT, RETIRED_SESSION_TEXT]


def test_c14_group_scope_routes_every_topic_and_replies_to_outputs_into_one_session(feishu, make_feishu_bot):
    # given: a group-scope workspace
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", session_scope="group")
    # when: triggers from two topics and a reply (no @) to the bot's output
    feishu.say(bot, text="topic one", mention=[bot], message_id="om_t1")
    feishu.say(bot, text="topic two", mention=[bot], message_id="om_t2")
    bot_output = feishu.stub.sent[0]["message_id"]
    feishu.say(bot, text="about your answer", parent_id=bot_output, message_id="om_reply")
    # then
    turns = list(Turn.objects.order_by("id"))
    assert [t.trigger for t in turns] == ["mention", "mention", "reply"]
    assert len({t.thread_id for t in turns}) == 1
    assert SessionBinding.objects.get().scope_key == "group"


def test_c14_reply_to_an_output_of_a_retired_group_session_submits_nothing(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", session_scope="group")
    feishu.say(bot, text="question", mention=[bot])
    old_output = feishu.stub.sent[0]["message_id"]
    feishu.say(bot, text="/new", mention=[bot])

    feishu.say(bot, text="about that old answer", parent_id=old_output)

    assert Turn.objects.count() == 1
    assert _sent_texts(feishu.stub)[-1] == RETIRED_SESSION_TEXT


def test_f6_own_echo_is_ignored_and_never_recorded(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_echo",
        chat_id="oc_group",
        text="my own words",
        sender_open_id=bot_open_id(bot),
        sender_type="app",
    )

    feishu.post(bot, payload)

    event = InboundEvent.objects.get()
    assert (event.status, event.error) == ("ignored", "own_echo")
    assert ThreadEvent.objects.count() == 0
    assert Turn.objects.count() == 0


def test_other_apps_messages_never_trigger_a_turn_but_a_root_keeps_its_actor_type(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_other_app_root",
        chat_id="oc_group",
        text="@_user_1 deploy finished",
        sender_open_id="ou_another_bot",
        sender_type="app",
        mentions=[{"key": "@_user_1", "id": {"open_id": bot_open_id(bot)}, "name": bot.name}],
    )

    feishu.post(bot, payload)

    assert Turn.objects.count() == 0
    root = ThreadEvent.objects.get(event_type="topic_root")
    assert (root.actor_type, root.text) == ("app", "deploy finished")


def test_unaddressed_group_message_in_mention_mode_is_recorded_only(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")

    feishu.say(bot, text="just chatting", root_id="om_root", thread_id="omt", parent_id="om_root")

    assert [e.event_type for e in ThreadEvent.objects.all()] == ["human_message"]
    assert Turn.objects.count() == 0
    assert feishu.stub.sent == []


def test_unaddressed_group_message_in_discuss_mode_schedules_a_discuss_wake(feishu, make_feishu_bot):
    bot = make_feishu_bot(group_reply_mode=Bot.GroupReplyMode.DISCUSS)

    feishu.say(bot, text="what do you all think?", message_id="om_q", root_id="om_r", thread_id="omt", parent_id="om_r")

    wake = DiscussWake.objects.get()
    assert (wake.bot_id, wake.chat_id, wake.root_msg_id, wake.message_ids) == (bot.pk, "oc_group", "om_r", ["om_q"])
    assert wake.status == DiscussWake.Status.PENDING
    # the event's finish rode in the wake's statement (issue 11): done, with no error
    event = InboundEvent.objects.get()
    assert (event.status, event.error, event.processed_at is not None) == ("done", "", True)


def test_empty_or_recalled_message_is_ignored(feishu, make_feishu_bot):
    bot = make_feishu_bot()

    feishu.say(bot, text="   ")

    event = InboundEvent.objects.get()
    assert (event.status, event.error) == ("ignored", "empty")


def test_c7_explicit_reply_injects_the_quoted_text_read_online(feishu, make_feishu_bot):
    # given: a message in the chat that the user replies to while @-ing the bot
    bot = make_feishu_bot()
    feishu.stub.add_message(message_id="om_quoted", text="The deploy failed at step 3", chat_id="oc_group")
    # when
    feishu.say(bot, text="why?", mention=[bot], parent_id="om_quoted", root_id="om_quoted", message_id="om_why")
    # then
    turn = Turn.objects.get()
    assert turn.user_message.prompt.startswith("[Amux Feishu Quoted Reply]")
    assert "The deploy failed at step 3" in turn.user_message.prompt
    assert [r.path for r in feishu.stub.requests_to("get")] == ["/open-apis/im/v1/messages/om_quoted"]


def test_c3_a_pasted_secret_never_reaches_the_prompt_the_stored_message_or_the_decision(feishu, make_feishu_bot):
    # given: a quoted message and an @ request that both contain the bot's app secret
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    secret = bot.feishu_app_secret
    feishu.stub.add_message(message_id="om_leak", text=f"the secret is {secret}", chat_id="oc_group")
    # when
    feishu.say(
        bot, text=f"is {secret} right?", mention=[bot], parent_id="om_leak", root_id="om_leak", message_id="om_ask"
    )
    # then: redacted everywhere the request and the quote went
    turn = Turn.objects.get()
    decision = ThreadContextDecision.objects.get()
    for stored in (turn.user_message.content, turn.user_message.prompt, decision.request_text, decision.prompt_preview):
        assert secret not in stored
        assert REDACTED in stored
    assert secret not in json.dumps(turn.model_input)


def test_c7_failed_quoted_read_answers_briefly_and_submits_nothing(feishu, make_feishu_bot):
    bot = make_feishu_bot()  # the stub knows no om_gone: the read fails (230110)

    feishu.say(bot, text="why?", mention=[bot], parent_id="om_gone", message_id="om_why")

    turn = Turn.objects.get()
    assert (turn.status, turn.user_message) == ("skipped", None)
    assert _sent_texts(feishu.stub) == [QUOTED_READ_FAILED_TEXT]


def test_c8_topic_root_fetched_online_injected_once_and_marked_after_delivery(feishu, make_feishu_bot):
    # given: a topic whose root this bot never received (posted by another app)
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.stub.add_message(
        message_id="om_root",
        text="Fix the login callback",
        sender_id="cli_other",
        sender_type="app",
        chat_id="oc_group",
    )
    in_topic = {"root_id": "om_root", "thread_id": "omt_root", "parent_id": "om_root"}
    # when: two @s in the topic
    feishu.say(bot, text="find the root cause first", mention=[bot], message_id="om_a", **in_topic)
    feishu.say(bot, text="now fix it", mention=[bot], message_id="om_b", **in_topic)
    # then: the root was fetched once, recorded with its real actor type, injected only into the first turn
    first, second = Turn.objects.order_by("id")
    assert first.user_message.prompt.startswith("[Amux Feishu Topic]")
    assert "Fix the login callback" in first.user_message.prompt
    # the second turn's prompt is the bare request (an empty `prompt` means "same as content")
    assert (second.user_message.content, second.user_message.prompt) == ("now fix it", "")
    assert ThreadEvent.objects.get(event_type="topic_root").actor_type == "app"
    assert len(feishu.stub.requests_to("get")) == 1
    assert SessionBinding.objects.get().topic_root_prompt_delivered is True


def test_c8_setting_off_the_root_is_never_fetched_or_injected_and_an_empty_at_submits_nothing(
    feishu, make_feishu_bot, llm_stub
):
    # given: a workspace with topic_root_enabled off, and a topic root this bot never received
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", topic_root_enabled=False)
    feishu.stub.add_message(message_id="om_root", text="Fix the login callback", chat_id="oc_group")
    in_topic = {"root_id": "om_root", "thread_id": "omt_root", "parent_id": "om_root"}
    # when: an @ with a request, then an empty @, in the topic
    feishu.say(bot, text="find the root cause", mention=[bot], message_id="om_a", **in_topic)
    feishu.say(bot, text="", mention=[bot], message_id="om_b", **in_topic)
    # then: the root was not read online; the first prompt is the bare request; the empty @ reached no model
    asked, empty = Turn.objects.order_by("id")
    assert (asked.user_message.content, asked.user_message.prompt) == ("find the root cause", "")
    assert feishu.stub.requests_to("get") == []
    assert (empty.status, empty.error, empty.user_message) == ("skipped", "Empty request.", None)
    assert _sent_texts(feishu.stub) == [
        "[local_rules · rule-based echo] I received 0 context messages; you said: find the root cause"
    ]
    assert SessionBinding.objects.get().topic_root_prompt_delivered is False


def test_c8_topic_root_not_marked_delivered_when_the_delivery_fails(feishu, make_feishu_bot, mocker):
    bot = make_feishu_bot()
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.stub.add_message(message_id="om_root", text="The task", chat_id="oc_group")
    feishu.stub.fail_next("reply", status=400, code=230002, msg="Bot is not in the chat", times=20)
    mocker.patch("feishu.outbound.client.time.sleep")

    feishu.say(bot, text="go", mention=[bot], root_id="om_root", thread_id="omt", parent_id="om_root")

    assert SessionBinding.objects.get().topic_root_prompt_delivered is False
    assert feishu.stub.sent == []
    turn = Turn.objects.get()
    assert (turn.status, turn.error) == ("delivery_failed", "Delivery refused: 230002 Bot is not in the chat")


def test_f5_bot_without_feishu_credentials_records_its_reply(feishu, make_feishu_bot):
    bot = make_feishu_bot(feishu_app_secret="", feishu_bot_open_id="ou_local_bot")
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_local",
        chat_id="oc_dm",
        chat_type="p2p",
        text="hello",
    )

    feishu.post(bot, payload)

    assert OutboundDelivery.objects.get().status == "recorded"
    assert feishu.stub.requests == []


def test_f6_unknown_bot_open_id_keeps_the_event_for_a_retry_instead_of_dropping_the_mention(
    feishu, make_feishu_bot, mocker
):
    # given: bot/v3/info fails, so the bot cannot tell whether it was @-ed
    bot = make_feishu_bot()
    feishu.stub.fail_next("bot_info", status=500, code=500, msg="internal error", times=50)
    mocker.patch("feishu.outbound.client.time.sleep")
    # when
    feishu.say(bot, text="hello", mention=[bot])
    # then: not processed, back to pending for the sweeper; no turn, nothing sent
    event = InboundEvent.objects.get()
    assert (event.status, event.attempts) == ("pending", 1)
    assert "open_id is unknown" in event.error
    assert Turn.objects.count() == 0


def test_c7_card_without_inline_text_is_filled_from_the_local_agent_output_item(feishu, make_feishu_bot):
    from threadcontext.services import thread_event_record_agent_output

    # given: another bot's card output, recorded locally as agent_output, with no inline text on Feishu
    bot = make_feishu_bot()
    feishu.stub.add_message(message_id="om_card", msg_type="interactive", content={"elements": []}, chat_id="oc_group")
    thread_event_record_agent_output(
        bridge_id="cli_other_bot",
        bot_profile="other",
        chat_id="oc_group",
        root_msg_id="om_card",
        message_id="om_card",
        text="Plan: 1. parse 2. render",
    )
    # when
    feishu.say(bot, text="do step 1", mention=[bot], parent_id="om_card", message_id="om_q")
    # then
    prompt = Turn.objects.get().user_message.prompt
    assert prompt.startswith("[Amux Feishu Quoted Reply]")
    assert "Plan: 1. parse 2. render" in prompt


def test_c7_quoted_text_is_capped(feishu, make_feishu_bot, settings):
    bot = make_feishu_bot()
    feishu.stub.add_message(message_id="om_long", text="x" * 20000, chat_id="oc_group")

    feishu.say(bot, text="summarise", mention=[bot], parent_id="om_long", message_id="om_s")

    prompt = Turn.objects.get().user_message.prompt
    quoted_run = max(len(run) for run in re.findall("x+", prompt))
    # capped at the limit, the truncation marker included in the budget
    assert settings.AMUX_QUOTED_REPLY_MAX_RUNES - 100 < quoted_run < settings.AMUX_QUOTED_REPLY_MAX_RUNES


def test_t2_transient_provider_error_retries_the_bridge_turn_and_replies_once(feishu, make_feishu_bot, llm_stub):
    from agents.models import Provider
    from tests.agents.factories import LLMModelFactory, ProviderFactory
    from tests.stubs.llm_servers import StubResponse, openai_chat_body, openai_error_body

    # given: a real OpenAI-compatible provider (the local LLM stub) that fails once with a 503, then answers
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=10
    )
    bot = make_feishu_bot(primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(status=503, body=openai_error_body(message="overloaded", type_="server_error")),
        StubResponse(body=openai_chat_body(text="Here is the plan.")),
    )
    # when
    feishu.say(bot, text="plan it", mention=[bot], message_id="om_retry")
    # then: the task retried, the turn was delivered once, one message on Feishu
    turn = Turn.objects.get()
    assert (turn.status, turn.attempts) == ("delivered", 2)
    assert len(llm_stub.requests_for("openai_chat")) == 2
    assert _sent_texts(feishu.stub) == ["Here is the plan."]
