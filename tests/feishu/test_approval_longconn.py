"""H1 over the long connection (issue 26): a card button press pushed as Feishu pushes `card.action.trigger` over
the socket, handled by the real `lark_oapi.ws.Client` with lark-oapi's card action handling, decided in the
connection's database thread; the answer (toast, card) travels back in the frame's acknowledgement."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Thread, ToolApproval, ToolApprovalDecision, Turn
from tests.agents.factories import ThreadFactory
from tests.feishu.test_approval_cards import ALICE, MALLORY, card_payload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_h1_a_press_over_the_long_connection_is_decided_once_and_answered_in_the_ack(
    feishu_stub, ws_stub, long_connection_bot, connect
):
    # given: a turn of the bot for Alice, waiting on an approval whose card was posted as om_card (finished: no re-run)
    bot = long_connection_bot
    thread = ThreadFactory(bot=bot, channel=Thread.Channel.FEISHU)
    turn = Turn.objects.create(
        bot=bot,
        thread=thread,
        trigger="mention",
        source_message_id="om_x",
        status="delivered",
        principal_open_id=ALICE,  # U1: the turn acts for Alice, who may decide its approval (U5)
    )
    approval = ToolApproval.objects.create(
        turn=turn,
        step=1,
        index=0,
        server="ops",
        tool="counter",
        requested_by=ALICE,
        card_message_id="om_card",
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    connect(bot)

    # when: a stranger presses, then Alice presses Allow once
    refused = ws_stub.push(
        card_payload(bot, approval_id=approval.pk, decision="allow_once", operator=MALLORY, message_id="om_card")
    )
    ws_stub.wait_acked([refused])
    allowed = ws_stub.push(
        card_payload(bot, approval_id=approval.pk, decision="allow_once", operator=ALICE, message_id="om_card")
    )
    ws_stub.wait_acked([allowed])

    # then: the stranger got the toast saying who can, Alice the decision and the decided card; one decision
    assert ws_stub.events[refused].ack_data[0]["toast"]["type"] == "warning"
    answer = ws_stub.events[allowed].ack_data[0]
    assert answer["toast"] == {"type": "success", "content": "Allowed once"}
    assert "Allowed once" in answer["card"]["data"]["body"]["elements"][0]["content"]
    decision = ToolApprovalDecision.objects.get()
    assert (decision.outcome, decision.via, decision.decided_by) == ("allow_once", "card", ALICE)
