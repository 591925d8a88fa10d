"""Approval cards in Feishu (issue 26, H1), end to end: a signed @-mention through the webhook, the turn (eager
task) pausing on a gated MCP call (the MCP stub over HTTP), the card posted through lark-oapi to the Feishu stub,
the button press posted back as Feishu posts a `card.action.trigger` callback (signed, encrypted) and verified by
lark-oapi's card action handling; the resumed turn runs the tool once (the tool process counts its runs).
"""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import json
import secrets
import time
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase

from agents.models import McpServer, ToolApproval, ToolApprovalDecision, Turn, TurnToolCall
from agents.services.turns.approvals import approval_decide
from feishu.channel.approvals import VALUE_KEY
from tests.agents.test_tool_approvals import _fresh, counter_file, mcp_url, runs  # noqa: F401 - fixtures
from tests.agents.test_tool_turns import tool_model
from tests.feishu.concurrency import run_against_a_held_transaction
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_ops"
ALICE, OWNER, MALLORY = "ou_alice", "ou_owner", "ou_mallory"


@pytest.fixture
def ops_bot(make_feishu_bot, llm_stub, mcp_url):
    bot = make_feishu_bot(slug="ops", name="Ops", primary_model=tool_model(llm_stub))
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, owner_open_id=OWNER)
    McpServer.objects.create(
        bot=bot,
        name="ops",
        transport=McpServer.Transport.STREAMABLE_HTTP,
        url=mcp_url,
        allowed_tools=["counter"],
        approval_tools=["counter"],
    )
    return bot


def ask(
    feishu, bot, llm_stub, *, message_id: str = "om_ask", final: str = "Counted.", root: str = "", sender: str = ALICE
) -> Turn:
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(tool_calls=[("ops__counter", {"seconds": 0})])),
        StubResponse(body=openai_chat_body(text=final)),
    )
    topic = {"root_id": root, "parent_id": root, "thread_id": f"omt_{root}"} if root else {}
    response, _ = feishu.say(
        bot, text="count the deploys", chat_id=CHAT, mention=[bot], sender=sender, message_id=message_id, **topic
    )
    assert response.status_code == 200
    return Turn.objects.get(bot=bot, source_message_id=message_id)


def approval_card_sent(stub) -> tuple[str, dict[str, Any]]:
    (sent,) = [s for s in stub.sent if s.get("msg_type") == "interactive" and VALUE_KEY in s.get("content", "")]
    return sent["message_id"], json.loads(sent["content"])


def card_payload(
    bot, *, approval_id, decision: str, operator: str, message_id: str, event_id: str = "", chat_id: str = CHAT
) -> dict:
    """A `card.action.trigger` callback as Feishu posts it (schema 2.0); `chat_id`: the chat Feishu says it came from."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or "ev_" + secrets.token_hex(8),
            "token": bot.feishu_verification_token,
            "create_time": str(int(time.time() * 1000)),
            "event_type": "card.action.trigger",
            "tenant_key": "tenant",
            "app_id": bot.feishu_app_id,
        },
        "event": {
            "operator": {"tenant_key": "tenant", "open_id": operator, "user_id": "u1", "union_id": "on_1"},
            "token": "c-" + secrets.token_hex(8),
            "action": {"tag": "button", "value": {VALUE_KEY: approval_id, "decision": decision}},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def press(feishu, bot, **kwargs) -> dict:
    response = feishu.post(bot, card_payload(bot, **kwargs))
    assert response.status_code == 200, response.content
    return response.json()


def buttons(card: dict) -> list[tuple[str, str]]:
    return [
        (element["text"]["content"], element["behaviors"][0]["value"]["decision"])
        for element in card["body"]["elements"]
        if element["tag"] == "button"
    ]


def test_h1_the_card_is_posted_a_stranger_is_refused_the_requester_allows_once_and_the_tool_runs_once(
    feishu, ops_bot, llm_stub, counter_file
):
    # when: Alice asks; the model calls the gated tool
    turn = ask(feishu, ops_bot, llm_stub)

    # then: the turn waits, the tool did not run, one card is posted in reply with the three buttons
    assert turn.status == "awaiting_approval"
    assert runs(counter_file) == 0
    card_message_id, card = approval_card_sent(feishu.stub)
    assert buttons(card) == [
        ("Allow once", "allow_once"),
        ("Allow in this conversation", "allow_conversation"),
        ("Deny", "deny"),
    ]
    text = card["body"]["elements"][0]["content"]
    assert "counter" in text and f"<at id={ALICE}></at>" in text
    approval = ToolApproval.objects.get(turn=turn)
    assert approval.card_message_id == card_message_id

    # when: someone else presses Allow once
    answer = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=MALLORY, message_id=card_message_id
    )

    # then: a toast says who can; nothing decided, nothing ran
    assert answer["toast"]["type"] == "warning" and "person who asked" in answer["toast"]["content"]
    assert "card" not in answer
    assert not ToolApprovalDecision.objects.exists() and runs(counter_file) == 0

    # when: Alice presses Allow once
    event_id = "ev_alice_press"
    answer = press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_once",
        operator=ALICE,
        message_id=card_message_id,
        event_id=event_id,
    )

    # then: the answer's card shows the decision and who, without buttons; the turn resumed and delivered; one run
    assert answer["toast"] == {"type": "success", "content": "Allowed once"}
    decided = answer["card"]["data"]
    assert (
        buttons(decided) == [] and f"Allowed once** · <at id={ALICE}></at>" in decided["body"]["elements"][0]["content"]
    )
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message.content) == ("delivered", "Counted.")
    assert runs(counter_file) == 1
    assert list(TurnToolCall.objects.filter(turn=turn).values_list("tool", "status", "result")) == [
        ("counter", "ok", "count=1")
    ]

    # when: Feishu replays the same press, and the owner presses Deny afterwards
    replay = press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_once",
        operator=ALICE,
        message_id=card_message_id,
        event_id=event_id,
    )
    late = press(feishu, ops_bot, approval_id=approval.pk, decision="deny", operator=OWNER, message_id=card_message_id)

    # then: both get the decided card; nothing changes, nothing runs again
    assert replay["toast"]["type"] == late["toast"]["type"] == "info"
    assert "Already decided" in late["toast"]["content"]
    assert ToolApprovalDecision.objects.get().decided_by == ALICE
    assert runs(counter_file) == 1
    # and the thread context holds the request and the answer, nothing of the card or the tool
    stored = json.dumps(list(ThreadContextItem.objects.values_list("text", flat=True)))
    assert "count=1" not in stored and "Approval needed" not in stored


def test_h1_the_owner_denies_the_model_is_told_and_a_foreign_press_is_refused(
    feishu, ops_bot, llm_stub, counter_file, make_feishu_bot
):
    turn = ask(feishu, ops_bot, llm_stub, final="I did not count: it was denied.")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)

    # a press naming another message, and one for an approval of another bot, are refused
    other_message = press(
        feishu, ops_bot, approval_id=approval.pk, decision="allow_once", operator=ALICE, message_id="om_other"
    )
    other_bot = make_feishu_bot(slug="other")
    foreign = press(
        feishu, other_bot, approval_id=approval.pk, decision="allow_once", operator=ALICE, message_id=card_message_id
    )
    assert other_message["toast"]["type"] == foreign["toast"]["type"] == "error"
    assert not ToolApprovalDecision.objects.exists()

    # the chat's owner denies
    answer = press(
        feishu, ops_bot, approval_id=approval.pk, decision="deny", operator=OWNER, message_id=card_message_id
    )

    assert answer["toast"]["content"] == "Denied"
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message.content) == ("delivered", "I did not count: it was denied.")
    assert runs(counter_file) == 0
    assert TurnToolCall.objects.get(turn=turn).status == "denied"


def test_h1_allow_in_this_conversation_skips_the_second_card(feishu, ops_bot, llm_stub, counter_file):
    turn = ask(feishu, ops_bot, llm_stub, message_id="om_first")
    card_message_id, _card = approval_card_sent(feishu.stub)
    approval = ToolApproval.objects.get(turn=turn)
    press(
        feishu,
        ops_bot,
        approval_id=approval.pk,
        decision="allow_conversation",
        operator=ALICE,
        message_id=card_message_id,
    )

    # when: Alice asks again in the same conversation (the topic of her first request)
    second = ask(feishu, ops_bot, llm_stub, message_id="om_second", final="Counted again.", root="om_first")

    assert (second.status, second.reply_message.content) == ("delivered", "Counted again.")
    assert runs(counter_file) == 2
    approval_card_sent(feishu.stub)  # still exactly one approval card in the chat
    assert not ToolApproval.objects.filter(turn=second).exists()


def test_h1_a_rest_or_timeout_decision_updates_the_card(feishu, ops_bot, llm_stub, counter_file):
    turn = ask(feishu, ops_bot, llm_stub)
    card_message_id, _card = approval_card_sent(feishu.stub)
    with TestCase.captureOnCommitCallbacks(execute=True):
        approval_decide(approval=ToolApproval.objects.get(turn=turn), outcome="timeout", via="sweeper")
    patched = json.loads(feishu.stub.messages[card_message_id]["body"]["content"])
    assert buttons(patched) == [] and "no decision in time" in patched["body"]["elements"][0]["content"]
    turn.refresh_from_db()
    assert turn.status == "delivered" and runs(counter_file) == 0


@pytest.mark.django_db(transaction=True)
def test_h1_two_presses_at_once_give_one_decision_on_postgresql(feishu, ops_bot, llm_stub, counter_file):
    if connection.vendor != "postgresql":
        pytest.skip("two connections racing on one unique key: PostgreSQL")
    turn = ask(feishu, ops_bot, llm_stub)
    approval = ToolApproval.objects.get(turn=turn)

    first, second = run_against_a_held_transaction(
        hold=lambda: approval_decide(
            approval=ToolApproval.objects.get(pk=approval.pk), outcome="allow_once", via="card", decided_by=ALICE
        ),
        contend=lambda: approval_decide(
            approval=ToolApproval.objects.get(pk=approval.pk), outcome="deny", via="card", decided_by=OWNER
        ),
    )

    assert first.won and not second.won
    assert second.decision.outcome == "allow_once" and second.decision.decided_by == ALICE
    assert ToolApprovalDecision.objects.count() == 1


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(character):04x}" for character in text)


@pytest.mark.parametrize(
    "arguments_for",
    [
        lambda secret: {"seconds": 0, "a": secret[:9], "b": secret[9:]},
        lambda secret: {"seconds": 0, "parts": {"second": secret[9:], "first": secret[:9]}},
        lambda secret: {
            "seconds": 0,
            "payload": json.dumps({"config": {"key": "KEY"}}).replace("KEY", _escaped(secret)),
        },
    ],
    ids=["split-across-values", "split-in-a-nested-structure-reversed", "escaped-inside-a-serialized-value"],
)
def test_u5_a_secret_split_across_argument_values_never_reaches_the_approval_card(
    feishu, ops_bot, llm_stub, counter_file, arguments_for
):
    # given the model calls the gated tool with the bot's app secret spread over its arguments
    secret = ops_bot.feishu_app_secret
    llm_stub.enqueue(
        "openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("ops__counter", arguments_for(secret))]))
    )

    # when Alice's request reaches the approval
    response, _ = feishu.say(ops_bot, text="count", chat_id=CHAT, mention=[ops_bot], sender=ALICE, message_id="om_x")

    # then the card, the stored approval and the API show the arguments withheld, no piece of the secret
    assert response.status_code == 200
    _card_message_id, card = approval_card_sent(feishu.stub)
    text = card["body"]["elements"][0]["content"]
    approval = ToolApproval.objects.get()
    assert approval.arguments == {"[redacted]": "the arguments carry a secret across their values; not shown"}
    assert "the arguments carry a secret across their values; not shown" in text
    for piece in (secret[:9], secret[9:], _escaped(secret)[:30]):
        assert piece not in text and piece not in json.dumps(approval.arguments)
    assert runs(counter_file) == 0
