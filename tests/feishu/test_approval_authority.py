"""U5: an approval is decided only by its principal or an owner, only before its deadline, and "allow in this
conversation" reaches that principal in that conversation only. End to end as test_approval_cards.py: signed
@-mentions through the webhook, the turn pausing on the gated MCP tool (the tool process counts its runs), the card
posted to the Feishu stub, presses posted back as signed `card.action.trigger` callbacks.
"""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from agents.models import ToolApproval, ToolApprovalDecision, Turn, TurnToolCall
from agents.services.turns import turns_sweep
from agents.services.turns.approvals import TIMED_OUT_TEXT
from feishu.channel.approvals import VALUE_KEY
from tests.agents.test_tool_approvals import _fresh, counter_file, mcp_url, runs  # noqa: F401 - fixtures
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from tests.feishu.test_approval_cards import (
    ALICE,
    CHAT,
    MALLORY,
    OWNER,
    approval_card_sent,
    ask,
    buttons,
    ops_bot,  # noqa: F401 - fixture
    press,
)
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cache_forget

pytestmark = pytest.mark.django_db

BOT_OWNER = "ou_bot_owner"


def approval_cards(stub) -> list[str]:
    """The approval cards posted (a streaming answer is an interactive message too: only cards with our buttons)."""
    return [s["message_id"] for s in stub.sent if s.get("msg_type") == "interactive" and VALUE_KEY in s["content"]]


def test_u5_a_press_after_the_deadline_is_refused_as_expired_and_the_timeout_is_recorded_once(
    feishu, ops_bot, llm_stub, counter_file
):
    # given: Alice's call waits on a 10 s approval, and the deadline passed 3 s ago (pressed at 13 s)
    turn = ask(feishu, ops_bot, llm_stub, final="Nobody allowed it in time.")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)
    ToolApproval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=3))

    # when: Alice presses Allow once
    answer = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=ALICE, message_id=card_message_id
    )

    # then: refused as expired; the card shows the timeout denial; the tool never ran; the model was told
    assert answer["toast"]["type"] == "warning" and "expired" in answer["toast"]["content"]
    assert buttons(answer["card"]["data"]) == []
    assert "no decision in time" in answer["card"]["data"]["body"]["elements"][0]["content"]
    decision = ToolApprovalDecision.objects.get()
    assert (decision.outcome, decision.via, decision.decided_by) == ("timeout", "sweeper", "")
    assert runs(counter_file) == 0
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message.content) == ("delivered", "Nobody allowed it in time.")
    assert TurnToolCall.objects.get(turn=turn).result == TIMED_OUT_TEXT.format(name="ops__counter", seconds=600)

    # when: she presses again, and the sweeper runs
    again = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=ALICE, message_id=card_message_id
    )
    with TestCase.captureOnCommitCallbacks(execute=True):
        turns_sweep()

    # then: the one timeout stands; nothing ran
    assert again["toast"]["type"] == "info" and "Already decided" in again["toast"]["content"]
    assert list(ToolApprovalDecision.objects.values_list("outcome", flat=True)) == ["timeout"]
    assert runs(counter_file) == 0


def test_u5_a_stranger_and_another_chats_owner_naming_their_own_chat_are_refused(
    feishu, ops_bot, llm_stub, counter_file
):
    # given: Alice's call waits in CHAT (owner OWNER); Mallory owns another chat of the same bot
    Workspace.objects.create(bot_profile=ops_bot.slug, chat_id="oc_mallory", owner_open_id=MALLORY)
    turn = ask(feishu, ops_bot, llm_stub)
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)

    # when: Mallory presses on the card, once as herself, once with a callback naming her own chat
    plain = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=MALLORY, message_id=card_message_id
    )
    own_chat = press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_once",
        operator=MALLORY,
        message_id=card_message_id,
        chat_id="oc_mallory",
    )

    # then: both refused with the toast saying who can; nothing decided, nothing ran, the turn still waits
    for answer in (plain, own_chat):
        assert answer["toast"]["type"] == "warning" and "person who asked" in answer["toast"]["content"]
        assert "card" not in answer
    assert not ToolApprovalDecision.objects.exists()
    assert runs(counter_file) == 0
    assert Turn.objects.get(pk=turn.pk).status == "awaiting_approval"

    # and: the owner of the card's own chat still decides, whatever chat the callback names
    owner = press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_once",
        operator=OWNER,
        message_id=card_message_id,
        chat_id="oc_mallory",
    )
    assert owner["toast"] == {"type": "success", "content": "Allowed once"}
    assert runs(counter_file) == 1


def test_u5_in_a_dm_the_bots_owner_may_decide_and_nobody_else_but_the_asker(feishu, ops_bot, llm_stub, counter_file):
    # given: the bot's owner is known in Feishu; Alice asks in a DM
    ops_bot.feishu_owner_open_id = BOT_OWNER
    ops_bot.save()
    llm_stub.enqueue("openai_chat", *_call_then("Counted in the DM."))
    feishu.say(ops_bot, text="count", chat_id="oc_dm_alice", chat_type="p2p", sender=ALICE, message_id="om_dm")
    turn = Turn.objects.get(bot=ops_bot, source_message_id="om_dm")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)

    # when: a stranger presses, then the bot's owner
    stranger = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=MALLORY, message_id=card_message_id
    )
    owner = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=BOT_OWNER, message_id=card_message_id
    )

    # then
    assert stranger["toast"]["type"] == "warning"
    assert owner["toast"] == {"type": "success", "content": "Allowed once"}
    assert ToolApprovalDecision.objects.get().decided_by == BOT_OWNER
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message.content, runs(counter_file)) == ("delivered", "Counted in the DM.", 1)


def test_u5_allowing_is_refused_when_the_asker_may_no_longer_use_the_bot_here(feishu, ops_bot, llm_stub, counter_file):
    # given: Alice's call waits; then the chat lists only Bob as allowed to use the bot
    turn = ask(feishu, ops_bot, llm_stub, final="Not counted.")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)
    workspace = Workspace.objects.get(bot_profile=ops_bot.slug, chat_id=CHAT)
    workspace.allowed_open_ids = ["ou_bob"]
    workspace.save()
    workspace_cache_forget(bot_profile=ops_bot.slug, chat_id=CHAT)  # as the admin's save does

    # when: the chat's owner presses Allow once for her
    refused = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=OWNER, message_id=card_message_id
    )

    # then: refused (U2 at the press door, for the person the turn acts for); nothing decided or run
    assert refused["toast"]["type"] == "warning" and "may no longer use" in refused["toast"]["content"]
    assert not ToolApprovalDecision.objects.exists() and runs(counter_file) == 0

    # and: a denial is still taken
    denied = press(
        feishu, ops_bot, approval_id=approval.pk, decision="deny", operator=OWNER, message_id=card_message_id
    )
    assert denied["toast"] == {"type": "success", "content": "Denied"}
    assert runs(counter_file) == 0


def test_u5_allow_in_this_conversation_reaches_neither_another_person_nor_another_topic_with_group_scope(
    feishu, ops_bot, llm_stub, counter_file
):
    # given: one session for the whole group (every topic feeds it); Alice allows the tool in her topic om_a
    Workspace.objects.filter(bot_profile=ops_bot.slug, chat_id=CHAT).update(session_scope="group")
    first = ask(feishu, ops_bot, llm_stub, message_id="om_a", final="one")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=first)
    press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_conversation",
        operator=ALICE,
        message_id=card_message_id,
    )
    assert runs(counter_file) == 1

    # when: Mallory asks in Alice's topic
    stranger = ask(feishu, ops_bot, llm_stub, message_id="om_a2", root="om_a", sender=MALLORY, final="denied")

    # then: she gets her own card; the tool did not run for her
    assert stranger.thread_id == first.thread_id
    assert stranger.status == "awaiting_approval" and runs(counter_file) == 1
    assert len(approval_cards(feishu.stub)) == 2
    _deny(feishu, ops_bot, turn=stranger, operator=MALLORY)

    # when: Alice asks in another topic of the same group session
    elsewhere = ask(feishu, ops_bot, llm_stub, message_id="om_b", final="denied")

    # then: another topic is another conversation: a card again
    assert elsewhere.thread_id == first.thread_id
    assert elsewhere.status == "awaiting_approval" and runs(counter_file) == 1
    assert len(approval_cards(feishu.stub)) == 3
    _deny(feishu, ops_bot, turn=elsewhere, operator=ALICE)

    # when: Alice asks again in her own topic
    again = ask(feishu, ops_bot, llm_stub, message_id="om_a3", root="om_a", final="two")

    # then: her grant holds there: no card, the tool ran
    assert (again.status, again.reply_message.content) == ("delivered", "two")
    assert runs(counter_file) == 2 and len(approval_cards(feishu.stub)) == 3


def _deny(feishu, bot, *, turn: Turn, operator: str) -> None:
    approval = ToolApproval.objects.get(turn=turn)
    answer = press(
        feishu, bot, approval_id=approval.pk, decision="deny", operator=operator, message_id=approval.card_message_id
    )
    assert answer["toast"] == {"type": "success", "content": "Denied"}
    turn.refresh_from_db()
    assert turn.status == "delivered"


def _call_then(final: str) -> tuple[StubResponse, StubResponse]:
    return (
        StubResponse(body=openai_chat_body(tool_calls=[("ops__counter", {"seconds": 0})])),
        StubResponse(body=openai_chat_body(text=final)),
    )
