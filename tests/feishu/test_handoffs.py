"""Hand-offs (B1) and the loop brake (B2) through the real path: signed webhooks -> routing -> turns (eager) ->
primaries at the LLM stub (the OpenAI SDK) -> lark-oapi -> the Feishu stub."""

import json

import pytest
from django.urls import reverse

from agents.models import Bot, Turn
from feishu.channel.brake import turn_chain
from feishu.channel.handoff import handoff_targets, handoff_text_render
from feishu.explain import wake_explain_data
from feishu.inbound.signing import mention_entry, message_event_payload
from feishu.models import InboundEvent
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.feishu.conftest import bot_open_id
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_pair"


@pytest.fixture
def pair(make_feishu_bot, llm_stub, feishu):
    """The Planner and the Coder (中文名 "程序员" for the Coder's alias test), @-mode text bots of one topic group."""
    provider = ProviderFactory(kind="openai_chat", base_url=llm_stub.url("/v1"), api_key="sk-primary", max_retries=0)
    primary = LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True)
    planner = make_feishu_bot(slug="planner", name="Planner", primary_model=primary, reply_format=Bot.ReplyFormat.TEXT)
    coder = make_feishu_bot(slug="coder", name="Coder", primary_model=primary, reply_format=Bot.ReplyFormat.TEXT)
    return planner, coder


def answers(llm_stub, *texts: str) -> None:
    for text in texts:
        llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=text)))


def person_asks(feishu, pair, *, to: Bot, text: str, message_id: str, root_id: str = "") -> None:
    """A person's message as both apps receive it (same message_id), @-ing `to` (whose app hears it last: eager
    Celery runs its turn at once, and a bot is a member of the chat once it heard something there)."""
    for bot in sorted(pair, key=lambda bot: bot == to):
        feishu.say(bot, text=text, chat_id=CHAT, message_id=message_id, mention=[to], root_id=root_id)


def test_b1_a_planner_answer_that_mentions_the_coder_gets_the_coders_answer_in_the_same_topic(
    feishu, pair, llm_stub, admin_client
):
    planner, coder = pair
    answers(llm_stub, "Plan: 1) a form 2) an API.\n@Coder please implement this.", "Implemented: login.py")
    # when: a person asks the Planner in a new topic
    person_asks(feishu, pair, to=planner, text="plan the login page", message_id="om_ask")
    # then: the Planner's reply carries a real mention of the Coder (a text message's at-tag with its open_id)
    planner_sent, coder_sent = feishu.stub.sent
    assert planner_sent["app_id"] == planner.feishu_app_id
    content = json.loads(planner_sent["content"])["text"]
    assert f'<at user_id="{bot_open_id(coder)}">Coder</at> please implement this.' in content
    # and the Coder answered that reply, in the same topic, asked by the Planner
    asking = Turn.objects.get(bot=planner)
    handed = Turn.objects.get(bot=coder)
    assert (handed.trigger, handed.status, handed.asked_by_id, handed.chain_length) == (
        "handoff",
        "delivered",
        asking.pk,
        1,
    )
    assert handed.source_message_id == planner_sent["message_id"]
    assert (coder_sent["app_id"], coder_sent["route"], coder_sent["parent_id"]) == (
        coder.feishu_app_id,
        "reply",
        planner_sent["message_id"],
    )
    assert coder_sent["reply_in_thread"] is True
    # its request is the Planner's answer; the person's request is in its thread context
    coder_request = llm_stub.requests_for("openai_chat")[1].json["messages"][-1]["content"]
    assert "Plan: 1) a form 2) an API." in coder_request and "please implement this." in coder_request
    assert "plan the login page" in coder_request
    # explain: "asked by Planner in turn N", and the chain
    assert turn_chain(turn=handed)[-1]["asked_by"] == f"asked by Planner in turn {asking.pk}"
    assert wake_explain_data(turn_id=handed.pk)["chain"][0]["turn_id"] == asking.pk
    page = admin_client.get(reverse("admin:feishu_turn_explain", args=[handed.pk])).content.decode()
    assert f"asked by Planner in turn {asking.pk}" in page and 'id="explain-chain"' in page
    assert wake_explain_data(turn_id=asking.pk)["handed_to"][0]["turn_id"] == handed.pk  # on both turns
    # when: Feishu also pushes the Planner's message to the Coder's app (same message_id)
    pushed = message_event_payload(
        verification_token=coder.feishu_verification_token, app_id=coder.feishu_app_id,
        message_id=planner_sent["message_id"], chat_id=CHAT, text="Plan ... @_user_1 please implement this.",
        sender_open_id=bot_open_id(planner), sender_type="app", root_id="om_ask",
        mentions=[mention_entry(index=1, open_id=bot_open_id(coder), name="Coder")],
    )  # fmt: skip
    assert feishu.post(coder, pushed).status_code == 200
    # then: answered once
    assert Turn.objects.filter(bot=coder).count() == 1
    assert len(feishu.stub.sent) == 2


def test_b1_a_mention_in_a_code_block_or_of_itself_hands_off_to_nobody(feishu, pair, llm_stub):
    planner, coder = pair
    answers(llm_stub, "Run this:\n```\ngit commit -m '@Coder fix'\n```\nand `@Coder` is a name. I am @Planner.")
    person_asks(feishu, pair, to=planner, text="how do I commit?", message_id="om_code")
    assert Turn.objects.count() == 1
    assert "<at" not in json.loads(feishu.stub.sent[0]["content"])["text"]


def test_b1_targets_are_matched_on_display_names_also_chinese_and_japanese(pair):
    planner, coder = pair
    reviewer = Bot(pk=99, slug="reviewer", name="レビュー係", feishu_bot_open_id="ou_rev")
    tester = Bot(pk=98, slug="tester", name="测试员", feishu_bot_open_id="ou_test")
    peers = [planner, coder, reviewer, tester]
    text = "@测试员请跑测试，然后@レビュー係 review. @Coders is not the Coder; @Planner is me."
    assert handoff_targets(text=text, bot=planner, peers=peers) == [reviewer, tester]
    card = handoff_text_render(text="@测试员请跑测试", targets=[tester], reply_format="markdown_card")
    assert card == "<at id=ou_test></at>请跑测试"


def test_b2_two_bots_mentioning_each_other_stop_at_the_limit_with_one_line_and_a_person_lets_them_go_on(
    feishu, pair, llm_stub
):
    planner, coder = pair
    person_asks(feishu, pair, to=planner, text="warm up", message_id="om_warm", root_id="om_topic")
    Workspace.objects.filter(chat_id=CHAT).update(bot_chain_limit=2)
    Turn.objects.all().delete()
    feishu.stub.sent.clear()
    answers(llm_stub, "@Coder your turn", "@Planner back to you", "@Coder again")
    # when: a person asks the Planner; the bots hand the topic back and forth
    person_asks(feishu, pair, to=planner, text="ping-pong please", message_id="om_go", root_id="om_topic")
    # then: Planner (a person asked) -> Coder (1) -> Planner (2) -> the Coder's would-be turn is skipped (3 > 2)
    turns = list(Turn.objects.order_by("id"))
    assert [(t.bot.slug, t.trigger, t.chain_length, t.status) for t in turns] == [
        ("planner", "mention", 0, "delivered"),
        ("coder", "handoff", 1, "delivered"),
        ("planner", "handoff", 2, "delivered"),
        ("coder", "handoff", 3, "skipped"),
    ]
    assert "loop brake" in turns[-1].error
    line = "The bots paused after 2 replies to each other; @ one of them to continue."
    assert feishu.stub.sent_texts().count(line) == 1
    assert [step["bot"] for step in turn_chain(turn=turns[-1])] == ["Planner", "Coder", "Planner", "Coder"]
    assert len(llm_stub.requests_for("openai_chat")) == 3 + 1  # the warm-up's answer plus three
    # when: a person speaks in the topic and @s the Coder
    answers(llm_stub, "@Planner resuming")
    answers(llm_stub, "done")
    person_asks(feishu, pair, to=coder, text="go on", message_id="om_more", root_id="om_topic")
    # then: the count started again
    resumed = list(Turn.objects.order_by("id"))[4:]
    assert [(t.bot.slug, t.chain_length, t.status) for t in resumed] == [
        ("coder", 0, "delivered"),
        ("planner", 1, "delivered"),
    ]
    assert InboundEvent.objects.filter(event_id__startswith="handoff-").count() == 4


def test_b2_a_limit_of_zero_turns_hand_offs_off(feishu, pair, llm_stub):
    planner, coder = pair
    person_asks(feishu, pair, to=planner, text="warm up", message_id="om_warm0")
    Workspace.objects.filter(chat_id=CHAT).update(bot_chain_limit=0)
    answers(llm_stub, "@Coder please", "@Coder please")
    person_asks(feishu, pair, to=planner, text="plan it", message_id="om_zero")
    assert list(Turn.objects.values_list("bot__slug", flat=True)) == ["planner", "planner"]
    assert "<at" not in feishu.stub.sent_texts()[-1]


def test_b1_a_streamed_card_answer_is_followed_by_one_line_with_the_real_mention(feishu, pair, llm_stub):
    planner, coder = pair
    Bot.objects.filter(pk=planner.pk).update(reply_format=Bot.ReplyFormat.MARKDOWN_CARD)
    answers(llm_stub, "**Plan** ready. @Coder please implement it.", "Implemented.")
    person_asks(feishu, pair, to=planner, text="plan it", message_id="om_card")
    # then: the card (updated in place: an @ there notifies nobody) and a text line carrying the real mention
    planner_texts = [
        json.loads(sent["content"]) for sent in feishu.stub.sent if sent["app_id"] == planner.feishu_app_id
    ]
    assert {"text": f'<at user_id="{bot_open_id(coder)}">Coder</at>'} in planner_texts
    handed = Turn.objects.get(bot=coder)
    assert (handed.trigger, handed.status, handed.asked_by.bot) == ("handoff", "delivered", planner)
