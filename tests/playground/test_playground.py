"""The playground (issue 14 item 8, A5): an operator types as people into a simulated group; the messages go
signed and encrypted into the real intake, the (eager) worker runs routing, the probe and the turns, and the
state endpoint shows each bot's reply, gate decision and context decision beside each message."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.llm.local_rules import ECHO_LABEL
from agents.models import Bot, Turn
from console.dashboard.selectors import dashboard_rows
from console.models import PlaygroundGroup, PlaygroundMember, PlaygroundMessage
from console.playground.services import playground_members_sync
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.models import InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement
from tests.agents.factories import LLMModelFactory
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def hub_bots(make_feishu_bot):
    """Two hub bots on local_rules; the planner has a real Feishu app (its stand-in must still never call it)."""
    judge = LLMModelFactory(name="local-judge", supports_tool_calls=True)
    planner = make_feishu_bot(
        slug="planner",
        name="Planner",
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=judge,
        system_prompt='You are "Planner".',
    )
    coder = make_feishu_bot(slug="coder", name="Coder", feishu_app_secret="")
    return planner, coder


@pytest.fixture
def group(hub_bots):
    planner, coder = hub_bots
    group = PlaygroundGroup.objects.create(name="Offsite", kind=PlaygroundGroup.Kind.GROUP)
    PlaygroundMember.objects.create(group=group, bot=planner, reply_mode=PlaygroundMember.ReplyMode.DISCUSS)
    PlaygroundMember.objects.create(group=group, bot=coder, reply_mode=PlaygroundMember.ReplyMode.MENTION)
    playground_members_sync(group=group)
    return group


def post(client, group, django_capture_on_commit_callbacks, **body):
    with django_capture_on_commit_callbacks(execute=True):
        return client.post(
            reverse("admin:playground_post", args=[group.pk]), data=json.dumps(body), content_type="application/json"
        )


def state(client, group) -> dict:
    response = client.get(reverse("admin:playground_state", args=[group.pk]))
    assert response.status_code == 200
    return response.json()


def test_an_at_mention_is_answered_through_the_real_pipeline_and_shown_with_its_context_decision(
    admin_client, group, hub_bots, feishu_stub, django_capture_on_commit_callbacks
):
    # given
    planner, coder = hub_bots

    # when
    response = post(
        admin_client,
        group,
        django_capture_on_commit_callbacks,
        sender="Alice",
        text="draft a plan",
        mentions=[coder.pk],
    )

    # then: every stand-in received the signed event; the coder's turn answered and was recorded, not sent
    assert response.status_code == 201
    message_id = response.json()["message_id"]
    stand_ins = {member.bot_id: member.sandbox_bot for member in group.members.select_related("sandbox_bot")}
    assert set(InboundEvent.objects.filter(message_id=message_id).values_list("bot_id", flat=True)) == {
        stand_ins[planner.pk].pk,
        stand_ins[coder.pk].pk,
    }
    turn = Turn.objects.get(bot=stand_ins[coder.pk], source_message_id=message_id)
    assert turn.status == Turn.Status.DELIVERED
    assert turn.reply_message.content == f"{ECHO_LABEL} I received 0 context messages; you said: draft a plan"
    assert list(OutboundDelivery.objects.filter(turn=turn).values_list("status", flat=True)) == ["recorded"]
    shown = state(admin_client, group)["messages"][0]
    assert (shown["sender"], shown["text"], shown["mentions"]) == ("Alice", "draft a plan", ["Coder"])
    coder_result = next(result for result in shown["results"] if result["bot_id"] == coder.pk)
    assert coder_result["gate"] is None
    assert coder_result["turn"]["reply"] == turn.reply_message.content
    assert coder_result["turn"]["context_url"] == reverse(
        "admin:threadcontext_threadcontextdecision_explain", args=[turn.context_decision_id]
    )
    # and nothing reached Feishu, though the planner has a real Feishu app; the hub bots have no turn of their own
    assert feishu_stub.requests == []
    assert Turn.objects.filter(bot__in=[planner, coder]).count() == 0


def test_an_unaddressed_message_in_a_discuss_group_shows_the_probe_judgement_speak_or_silent(
    admin_client, group, hub_bots, feishu_stub, django_capture_on_commit_callbacks
):
    # given
    planner, coder = hub_bots
    chatter = post(admin_client, group, django_capture_on_commit_callbacks, sender="Bob", text="lunch at noon")
    assert state(admin_client, group)["messages"][0]["results"][0]["gate"]["decision"] == "pending"

    # when: the debounce ends (the beat sweeper's clock moved on)
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    question = post(
        admin_client, group, django_capture_on_commit_callbacks, sender="Chen", text="what should we build first?"
    )
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))

    # then: the planner (discuss) was judged on each; silent on the chatter, speaks on the question
    shown = {message["message_id"]: message for message in state(admin_client, group)["messages"]}
    first = next(r for r in shown[chatter.json()["message_id"]]["results"] if r["bot_id"] == planner.pk)
    second = next(r for r in shown[question.json()["message_id"]]["results"] if r["bot_id"] == planner.pk)
    assert (first["gate"]["decision"], first["gate"]["cause"], first["gate"]["outcome"]) == (
        "silent",
        "judged",
        "no_action",
    )
    assert first["gate"]["reason"].startswith("rule-based: not addressed")
    assert first["turn"] is None
    assert (second["gate"]["decision"], second["gate"]["outcome"]) == ("speak", "act")
    assert second["turn"]["status"] == Turn.Status.DELIVERED
    # the demo's echo is the person's words: no activation contract, no scaffolding
    assert second["turn"]["reply"].endswith("you said: what should we build first?")
    assert "HARD REQUIREMENT" not in second["turn"]["reply"] and "[" not in second["turn"]["reply"][30:]
    # the mention-mode coder was not probed and did not answer
    coder_second = next(r for r in shown[question.json()["message_id"]]["results"] if r["bot_id"] == coder.pk)
    assert (coder_second["gate"], coder_second["turn"]) == (None, None)
    assert ProbeJudgement.objects.filter(bot__in=[planner, coder]).count() == 0
    assert feishu_stub.requests == []


def test_playground_stand_ins_stay_off_the_dashboard(group, hub_bots):
    # given: the group's stand-ins exist
    assert Bot.objects.filter(is_sandbox=True).count() == 2

    # when
    rows = dashboard_rows(now=timezone.now())

    # then
    assert sorted(row.bot.slug for row in rows) == ["coder", "planner"]


def test_a_stand_in_follows_its_hub_bot_and_each_group_keeps_its_own_reply_mode(group, hub_bots):
    # given
    planner, _ = hub_bots
    planner.system_prompt = 'You are "Planner", terse.'
    planner.save()

    # when
    playground_members_sync(group=group)

    # then
    stand_in = Bot.objects.get(sandbox_of__slug="planner")
    assert (stand_in.system_prompt, stand_in.is_sandbox, stand_in.has_feishu_credentials) == (
        'You are "Planner", terse.',
        True,
        False,
    )
    workspace = Workspace.objects.get(bot_profile=stand_in.slug, chat_id=group.chat_id)
    assert (workspace.reply_mode, workspace.chat_mode) == ("discuss", "group")


@pytest.mark.parametrize(
    "body, status",
    [
        (b"not json", 400),
        (b"[1]", 400),
        (json.dumps({"sender": "Alice", "text": "   "}).encode(), 400),
        (json.dumps({"sender": "", "text": "hi"}).encode(), 400),
        (json.dumps({"sender": "Alice", "text": "hi", "mentions": [999999]}).encode(), 400),
        (json.dumps({"sender": "Alice", "text": "hi", "mentions": "all"}).encode(), 400),
        (json.dumps({"sender": "Alice", "text": "hi", "root_message_id": "om_nope"}).encode(), 400),
        (json.dumps({"sender": ["Alice"], "text": "hi"}).encode(), 400),
        (json.dumps({"sender": "Alice", "text": "x" * 40000}).encode(), 413),
    ],
)
def test_bad_input_gets_a_clear_4xx_and_writes_nothing(admin_client, group, body, status):
    # when
    response = admin_client.post(
        reverse("admin:playground_post", args=[group.pk]), data=body, content_type="application/json"
    )

    # then
    assert response.status_code == status
    assert response.json()["message"]
    assert PlaygroundMessage.objects.count() == 0
    assert InboundEvent.objects.count() == 0


def test_only_staff_reach_the_playground(client, group, django_user_model):
    # given: a signed-in user who is not staff
    user = django_user_model.objects.create_user("visitor", password="visitor-password-1")
    client.force_login(user)

    # when
    responses = [
        client.get(reverse("admin:playground_room", args=[group.pk])),
        client.get(reverse("admin:playground_state", args=[group.pk])),
        client.post(reverse("admin:playground_post", args=[group.pk]), data="{}", content_type="application/json"),
    ]

    # then: sent to the login page, nothing posted
    assert [response.status_code for response in responses] == [302, 302, 302]
    assert PlaygroundMessage.objects.count() == 0


def test_the_admin_creates_a_group_with_its_bots_and_opens_its_page(admin_client, hub_bots):
    # given
    planner, _ = hub_bots
    url = reverse("admin:playground_playgroundgroup_add")

    # when
    response = admin_client.post(
        url,
        {
            "name": "Design review",
            "kind": "topic",
            "members-TOTAL_FORMS": "1",
            "members-INITIAL_FORMS": "0",
            "members-0-bot": str(planner.pk),
            "members-0-reply_mode": "mention",
        },
    )

    # then
    group = PlaygroundGroup.objects.get(name="Design review")
    assert response.status_code == 302 and response["Location"] == reverse("admin:playground_room", args=[group.pk])
    page = admin_client.get(response["Location"])
    assert page.status_code == 200 and b"playground-compose" in page.content
    stand_in = Bot.objects.get(sandbox_of__slug="planner")
    workspace = Workspace.objects.get(bot_profile=stand_in.slug, chat_id=group.chat_id)
    assert workspace.is_topic_chat
    assert group.chat_id.startswith("oc_playground_")


def test_in_a_topic_group_an_at_mention_inside_a_topic_gets_the_topic_root_as_context(
    admin_client, hub_bots, django_capture_on_commit_callbacks
):
    # given: a topic group, and a topic Alice opened without addressing anyone
    _, coder = hub_bots
    group = PlaygroundGroup.objects.create(name="Topics", kind=PlaygroundGroup.Kind.TOPIC)
    PlaygroundMember.objects.create(group=group, bot=coder, reply_mode=PlaygroundMember.ReplyMode.MENTION)
    root = post(
        admin_client, group, django_capture_on_commit_callbacks, sender="Alice", text="Snake game for the offsite"
    )
    root_id = root.json()["message_id"]

    # when: Bob @-mentions the coder inside that topic
    reply = post(
        admin_client,
        group,
        django_capture_on_commit_callbacks,
        sender="Bob",
        text="draft a plan",
        mentions=[coder.pk],
        root_message_id=root_id,
    )

    # then: the turn answered in the topic, its prompt held the topic root; the echo is only Bob's request
    assert reply.status_code == 201
    turn = Turn.objects.get(bot__sandbox_of__slug="coder", source_message_id=reply.json()["message_id"])
    assert "Snake game for the offsite" in turn.user_message.prompt
    assert turn.reply_message.content.endswith("you said: draft a plan")
    delivery = OutboundDelivery.objects.get(turn=turn)
    assert (delivery.status, delivery.reply_in_thread, delivery.reply_to_message_id) == (
        "recorded",
        True,
        reply.json()["message_id"],
    )
    shown = state(admin_client, group)["messages"]
    assert [message["root_message_id"] for message in shown] == ["", root_id]


def test_a_burst_judged_once_shows_the_verdict_on_its_newest_message_only(
    admin_client, group, hub_bots, feishu_stub, django_capture_on_commit_callbacks
):
    """Issue 27: the newest message's reason beside every message of the burst read as a wrong verdict of each."""
    planner, _coder = hub_bots
    first = post(admin_client, group, django_capture_on_commit_callbacks, sender="Bob", text="lunch at noon")
    last = post(admin_client, group, django_capture_on_commit_callbacks, sender="Bob", text="or at one?")
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))

    shown = {message["message_id"]: message for message in state(admin_client, group)["messages"]}
    earlier = next(r for r in shown[first.json()["message_id"]]["results"] if r["bot_id"] == planner.pk)
    newest = next(r for r in shown[last.json()["message_id"]]["results"] if r["bot_id"] == planner.pk)
    assert (earlier["gate"]["decision"], earlier["gate"]["reason"]) == ("burst", "")
    assert newest["gate"]["decision"] in ("speak", "silent") and newest["gate"]["reason"]
    assert earlier["gate"]["url"] == newest["gate"]["url"]  # one judgement, linked from both


def test_b1_the_playground_shows_a_hand_off_beside_the_message(
    admin_client, group, hub_bots, feishu_stub, django_capture_on_commit_callbacks
):
    # given: both stand-ins heard the group (a bot is a member of a chat once it heard something there)
    planner, coder = hub_bots
    post(admin_client, group, django_capture_on_commit_callbacks, sender="Alice", text="hello")
    # when: the Coder is asked something its (echoing) answer passes on to @Planner
    post(
        admin_client,
        group,
        django_capture_on_commit_callbacks,
        sender="Alice",
        text="tell @Planner",
        mentions=[coder.pk],
    )
    # then: the Coder's answer is shown with its hand-off to the Planner
    shown = state(admin_client, group)
    (coder_turn,) = [
        r["turn"] for m in shown["messages"] for r in m["results"] if r["turn"] and r["bot_id"] == coder.pk
    ]
    (handed,) = shown["handoffs"][str(coder_turn["id"])]
    assert handed.startswith("Planner (turn ")
    handoff = Turn.objects.get(trigger="handoff")
    assert (handoff.asked_by_id, handoff.chain_length) == (coder_turn["id"], 1)
