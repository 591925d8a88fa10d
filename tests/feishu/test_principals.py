"""Who a turn acts for (ARCHITECTURE §12.0 U1, U2, U8) through the real path: signed webhooks -> routing -> turns
(Celery eager) -> the primary at the LLM stub (the OpenAI SDK) -> lark-oapi -> the Feishu stub.

The attacks of issue 35: a stranger reaching an owner_only bot through another bot's hand-off, a stranger's DM to a
bot whose DM policy leaves them out, a reply to one bot's answer woken by a discuss bot, `@_all` typed by hand.
"""

import json

import pytest
from django.core.cache import cache
from django.urls import reverse

from agents.models import Bot, Turn
from feishu.models import DiscussWake, InboundEvent
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.agents.test_tool_turns import rest_setup
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_vault"
ALICE = "ou_alice"  # a stranger to the Vault
BOB = "ou_bob"  # the Vault's owner


@pytest.fixture
def planner_and_vault(make_feishu_bot, llm_stub, feishu):
    """The Planner (shared, anyone may use it) and the Vault (owner_only for Bob) in one group, text replies."""
    provider = ProviderFactory(kind="openai_chat", base_url=llm_stub.url("/v1"), api_key="sk-primary", max_retries=0)
    primary = LLMModelFactory(provider=provider, name="gpt-4o")
    planner = make_feishu_bot(slug="planner", name="Planner", primary_model=primary, reply_format=Bot.ReplyFormat.TEXT)
    vault = make_feishu_bot(slug="vault", name="Vault", primary_model=primary, reply_format=Bot.ReplyFormat.TEXT)
    # both bots have heard the chat once (a workspace each: the hub's defaults), then the Vault's is owner_only
    for bot in (planner, vault):
        feishu.say(bot, text="hello", chat_id=CHAT, message_id="om_hello", sender=BOB)
    Workspace.objects.filter(bot_profile="vault", chat_id=CHAT).update(mode="owner_only", owner_open_id=BOB)
    cache.clear()  # routing reads the workspace from the cache; the admin's save would drop the entry
    return planner, vault


def person_asks(feishu, bots, *, to: Bot, text: str, message_id: str, sender: str) -> None:
    """One person's message as every app of the chat receives it, @-ing `to` (heard last: eager Celery runs it)."""
    for bot in sorted(bots, key=lambda bot: bot == to):
        feishu.say(bot, text=text, chat_id=CHAT, message_id=message_id, mention=[to], sender=sender)


def test_u2_a_stranger_cannot_reach_an_owner_only_bot_through_another_bots_hand_off(
    feishu, planner_and_vault, llm_stub, admin_client
):
    planner, vault = planner_and_vault
    # given: a direct @Vault from Alice is ignored, as it should be
    person_asks(
        feishu, planner_and_vault, to=vault, text="summarise the secret plan", message_id="om_direct", sender=ALICE
    )
    assert not Turn.objects.filter(bot=vault).exists()
    # when: Alice asks the Planner, whose answer hands the request to the Vault
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="@Vault please summarise the plan.")))
    person_asks(feishu, planner_and_vault, to=planner, text="ask Vault for the plan", message_id="om_ask", sender=ALICE)
    # then: the Planner answered (for Alice); the hand-off reached the Vault's routing and was refused for Alice
    asking = Turn.objects.get(bot=planner)
    assert (asking.principal_open_id, asking.admission["door"], asking.status) == (ALICE, "message", "delivered")
    assert not Turn.objects.filter(bot=vault).exists()
    handed = InboundEvent.objects.get(bot=vault, message_id=feishu.stub.sent[0]["message_id"])
    assert (handed.status, handed.error) == (InboundEvent.Status.IGNORED, "handoff_refused")
    page = admin_client.get(reverse("admin:feishu_inboundevent_explain", args=[handed.pk])).content.decode()
    assert "refused: the person who started the hand-off chain may not use this bot here" in page
    # and nothing of the Vault's reached the chat: one model call (the Planner's), one message sent (its answer)
    assert len(llm_stub.requests_for("openai_chat")) == 1
    assert [sent["app_id"] for sent in feishu.stub.sent] == [planner.feishu_app_id]


def test_u1_u2_the_owner_hands_off_to_their_own_bot_and_the_turn_acts_for_them(
    feishu, planner_and_vault, llm_stub, admin_client
):
    planner, vault = planner_and_vault
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="@Vault please summarise the plan.")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The plan, in short: ship.")))
    # when: Bob (the Vault's owner) asks the Planner, which hands off to the Vault
    person_asks(feishu, planner_and_vault, to=planner, text="ask Vault for the plan", message_id="om_bob", sender=BOB)
    # then: the Vault's turn ran for Bob, the person who started the chain, admitted at the hand-off door
    handed = Turn.objects.get(bot=vault)
    assert (handed.trigger, handed.status, handed.principal_open_id) == ("handoff", "delivered", BOB)
    assert handed.principal_union_id == "on_" + BOB
    assert handed.admission == {"allowed": True, "door": "handoff", "rule": "admitted", "reason": "admitted"}
    # explain and the turn's page say who it acts for and through which door
    page = admin_client.get(reverse("admin:feishu_turn_explain", args=[handed.pk])).content.decode()
    assert f"{BOB}, through a hand-off in a chain they started" in page
    turn_page = admin_client.get(reverse("admin:agents_turn_change", args=[handed.pk])).content.decode()
    assert f"{BOB}, through a hand-off in a chain they started" in turn_page


def test_u2_a_hand_off_honours_the_chats_list_of_people(feishu, planner_and_vault, llm_stub):
    planner, vault = planner_and_vault
    # given: the Vault's chat is shared but lists only Bob as someone who may use it
    Workspace.objects.filter(bot_profile="vault", chat_id=CHAT).update(mode="shared", allowed_open_ids=[BOB])
    cache.clear()
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="@Vault your turn.")))
    # when: Alice's request to the Planner hands off to the Vault
    person_asks(feishu, planner_and_vault, to=planner, text="get Vault to do it", message_id="om_list", sender=ALICE)
    # then: refused for Alice; one answer in the chat, the Planner's
    assert not Turn.objects.filter(bot=vault).exists()
    assert len(feishu.stub.sent) == 1


@pytest.mark.parametrize(
    ("policy", "listed", "sender", "answered"),
    [
        ("owner", [], ALICE, False),
        ("owner", [], BOB, True),
        ("listed", ["ou_carol"], ALICE, False),
        ("listed", [ALICE], ALICE, True),
        ("listed", ["on_" + ALICE], ALICE, True),  # a union_id names the person across one developer's apps
        ("everyone", [], ALICE, True),
    ],
)
def test_u2_the_dm_policy_decides_who_may_use_the_bot_directly(
    feishu, make_feishu_bot, llm_stub, policy, listed, sender, answered
):
    provider = ProviderFactory(kind="openai_chat", base_url=llm_stub.url("/v1"), api_key="sk-primary", max_retries=0)
    bot = make_feishu_bot(
        slug="vault",
        name="Vault",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o"),
        reply_format=Bot.ReplyFormat.TEXT,
        feishu_owner_open_id=BOB,
        dm_policy=policy,
        dm_open_ids=listed,
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Here you are.")))
    # when: a DM to the bot, and a /schedule command in a DM
    feishu.say(bot, text="what is in the vault?", chat_id="oc_dm", chat_type="p2p", sender=sender, message_id="om_dm")
    feishu.say(bot, text="/schedule every day 09:00 report", chat_id="oc_dm", chat_type="p2p", sender=sender)
    # then: answered (a turn acting for the sender, one reply, one schedule) or refused with nothing at all
    turns = list(Turn.objects.all())
    if answered:
        assert [(turn.principal_open_id, turn.admission["door"]) for turn in turns] == [(sender, "dm")]
        assert len(feishu.stub.sent) == 2  # the answer and the schedule's confirmation
    else:
        assert turns == [] and feishu.stub.sent == [] and llm_stub.requests_for("openai_chat") == []
        assert set(InboundEvent.objects.values_list("error", flat=True)) == {"dm_policy"}
        assert not bot.automations.exists()


def test_u8_a_reply_to_one_bots_answer_belongs_to_that_bot_not_to_a_discuss_bot(
    feishu, make_feishu_bot, llm_stub, django_capture_on_commit_callbacks
):
    provider = ProviderFactory(kind="openai_chat", base_url=llm_stub.url("/v1"), api_key="sk-primary", max_retries=0)
    primary = LLMModelFactory(provider=provider, name="gpt-4o")
    planner = make_feishu_bot(slug="planner", name="Planner", primary_model=primary, reply_format=Bot.ReplyFormat.TEXT)
    helper = make_feishu_bot(
        slug="helper",
        name="Helper",
        primary_model=primary,
        reply_format=Bot.ReplyFormat.TEXT,
        group_reply_mode="discuss",
    )
    bots = (planner, helper)
    for bot in bots:  # both bots are members of the chat (a bot is once it heard something there)
        feishu.say(bot, text="hello", chat_id=CHAT, message_id="om_hello", sender=BOB)
    DiscussWake.objects.all().delete()
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Ship on Friday.")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Because tests pass on Thursday.")))
    person_asks(feishu, bots, to=planner, text="when do we ship?", message_id="om_when", sender=ALICE)
    answer_id = feishu.stub.sent[0]["message_id"]
    # when: Alice replies to the Planner's answer, with no @ (both apps hear it)
    for bot in (helper, planner):
        feishu.say(
            bot,
            text="why Friday?",
            chat_id=CHAT,
            message_id="om_why",
            parent_id=answer_id,
            root_id="om_when",
            sender=ALICE,
        )
    # then: the Planner answers it; the discuss bot opens no wake for it (U8, B4 extended to replies)
    assert not DiscussWake.objects.filter(bot=helper).exists()
    event = InboundEvent.objects.get(bot=helper, message_id="om_why")
    assert event.error == "" and event.status == InboundEvent.Status.DONE
    assert [(turn.bot.slug, turn.trigger) for turn in Turn.objects.order_by("id")] == [
        ("planner", "mention"),
        ("planner", "reply"),
    ]


def test_u8_at_all_typed_as_text_is_not_an_at_all(feishu, make_feishu_bot, llm_stub):
    bot = make_feishu_bot(slug="planner", name="Planner", reply_format=Bot.ReplyFormat.TEXT)
    feishu.say(bot, text="hello", chat_id=CHAT, message_id="om_hi")
    Workspace.objects.filter(bot_profile="planner", chat_id=CHAT).update(respond_to_at_all=True)
    cache.clear()
    # when: someone types the characters "@_all" (Feishu marks no mention)
    feishu.say(bot, text="@_all look at this", chat_id=CHAT, message_id="om_typed")
    # then: no turn; a real @all (Feishu's mention) is one
    assert not Turn.objects.exists()
    feishu.say(bot, text="standup", chat_id=CHAT, message_id="om_real", at_all=True)
    assert list(Turn.objects.values_list("source_message_id", "principal_open_id")) == [("om_real", ALICE)]


def test_u1_rest_turns_act_for_the_api_user_and_show_it(llm_stub):
    client, bot, thread = rest_setup(llm_stub)
    user = bot.owner
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Hi.")))
    posted = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "hello"}, format="json")
    assert posted.status_code == 202
    body = client.get(f"/api/v1/turns/{posted.json()['turn_id']}/").json()
    assert body["principal"] == {
        "open_id": "",
        "union_id": "",
        "user": user.pk,
        "admission": {"allowed": True, "door": "rest", "rule": "admitted", "reason": "the API user may use this bot"},
    }
    assert json.dumps(body).count("sk-") == 0
