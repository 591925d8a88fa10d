"""O6: an edited message (`im.message.updated_v1`, a customized event in lark-oapi) through both intakes.

The context item carries the new text and explain says when it was edited and how long the earlier text was;
an edit that newly mentions the bot starts its turn once; an edit of an answered request starts none; an edit
of a recalled or unknown message is ignored with a debug log.
"""

import copy
import json
import logging
import secrets
import time

import pytest

from agents.models import Bot, Turn
from feishu.inbound.signing import mention_entry, message_event_payload
from feishu.models import InboundEvent
from tests.feishu.conftest import bot_open_id
from threadcontext.explain import decision_explain_data, decision_explain_text
from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent

EDITED = "im.message.updated_v1"


def edit_of(payload: dict, *, text: str, mention: Bot | None = None, update_ms: int | None = None) -> dict:
    """Feishu's edit event of a message: the receive payload's message with new content and update time."""
    edited = copy.deepcopy(payload)
    edited["header"]["event_type"] = EDITED
    edited["header"]["event_id"] = secrets.token_hex(16)
    message = edited["event"]["message"]
    message["update_time"] = str(update_ms if update_ms is not None else int(time.time() * 1000) + 1000)
    if mention is not None:
        message["mentions"] = [mention_entry(index=1, open_id=bot_open_id(mention), name=mention.name)]
        text = "@_user_1 " + text
    message["content"] = json.dumps({"text": text}, ensure_ascii=False)
    return edited


def _turns(bot: Bot) -> int:
    return Turn.objects.filter(bot=bot).count()


@pytest.mark.django_db
def test_o6_an_edit_replaces_the_context_text_and_explain_says_when_and_how_long_it_was(feishu, make_feishu_bot):
    # given a group message recorded as context (a topic's root), then a request in its topic
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _, said = feishu.say(bot, text="the deploy is on Friday", message_id="om_plan")
    # when its sender edits it
    response = feishu.post(bot, edit_of(said, text="the deploy is on Monday"))
    # then the item has the new text, its event knows when and how long the old one was, no turn started
    assert response.status_code == 200
    item = ThreadContextItem.objects.get(message_id="om_plan")
    assert item.text == "the deploy is on Monday"
    event = ThreadEvent.objects.get(message_id="om_plan")
    assert event.metadata["previous_text_chars"] == len("the deploy is on Friday")
    assert "Friday" not in json.dumps(event.metadata) and "Friday" not in json.dumps(item.metadata)
    assert _turns(bot) == 0
    # when someone asks the bot in the same timeline
    feishu.say(bot, text="when is the deploy?", mention=[bot], message_id="om_ask", root_id="om_plan")
    decision = ThreadContextDecision.objects.get(message_id="om_ask")
    # then explain shows the edit without the earlier text
    edited = decision_explain_data(decision=decision)["edited"]
    assert [(e["message_id"], e["previous_text_chars"]) for e in edited] == [("om_plan", 23)]
    assert "om_plan: edited at " in decision_explain_text(decision=decision)
    assert [item["preview"] for item in decision.excluded] == ["the deploy is on Monday"]  # shared thread is off


@pytest.mark.django_db
def test_o6_an_edit_that_newly_mentions_the_bot_starts_one_turn_and_a_second_edit_none(feishu, make_feishu_bot):
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _, said = feishu.say(bot, text="can someone check the logs", message_id="om_logs")
    assert _turns(bot) == 0

    first = edit_of(said, text="can you check the logs", mention=bot, update_ms=2_000_000_000_000)
    feishu.post(bot, first)
    feishu.post(bot, first)  # Feishu's retry of the same edit: stored once
    feishu.post(bot, edit_of(said, text="can you check the logs please", mention=bot, update_ms=2_000_000_001_000))

    turn = Turn.objects.get(bot=bot)
    assert (turn.source_message_id, turn.trigger) == ("om_logs", Turn.Trigger.MENTION)
    assert len(feishu.stub.sent) == 1
    assert InboundEvent.objects.filter(bot=bot, event_type=EDITED).count() == 2


@pytest.mark.django_db
def test_o6_an_edit_of_an_answered_request_starts_no_turn(feishu, make_feishu_bot):
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _, said = feishu.say(bot, text="summarise this", mention=[bot], message_id="om_done")
    assert _turns(bot) == 1

    feishu.post(bot, edit_of(said, text="summarise this briefly", mention=bot))

    assert _turns(bot) == 1 and len(feishu.stub.sent) == 1
    assert InboundEvent.objects.get(event_type=EDITED).error == ""  # done, not ignored: the context took it


@pytest.mark.django_db
def test_o6_an_edit_of_a_recalled_or_unknown_message_is_ignored_with_a_debug_log(feishu, make_feishu_bot, caplog):
    bot = make_feishu_bot(reply_format="text", receipt_emoji="")
    _, said = feishu.say(bot, text="oops", message_id="om_gone")
    recall = copy.deepcopy(said)
    recall["header"].update(event_type="im.message.recalled_v1", event_id=secrets.token_hex(16))
    recall["event"] = {"message_id": "om_gone", "chat_id": said["event"]["message"]["chat_id"], "recall_type": "x"}
    feishu.post(bot, recall)
    unknown = edit_of(said, text="never seen @ you", mention=bot)
    unknown["event"]["message"]["message_id"] = "om_never_seen"

    with caplog.at_level(logging.DEBUG, logger="feishu.inbound.edits"):
        feishu.post(bot, edit_of(said, text="oops, with @", mention=bot))
        feishu.post(bot, unknown)

    assert _turns(bot) == 0
    assert sorted(InboundEvent.objects.filter(event_type=EDITED).values_list("status", "error")) == [
        ("ignored", "edit_of_unknown"),
        ("ignored", "edit_of_unknown"),
    ]
    assert [r.message for r in caplog.records].count(
        "feishu edit ignored: the message is recalled or was never recorded"
    ) == 2
    assert not ThreadContextItem.objects.filter(message_id="om_gone").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_o6_edits_over_the_long_connection_start_one_turn(feishu_stub, ws_stub, long_connection_bot, connect):
    # given a long-connection bot and a message it recorded
    stub, bot = ws_stub, long_connection_bot
    connection = connect(bot)
    said = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_ws_edit",
        chat_id="oc_group",
        text="anyone around",
        sender_open_id="ou_alice",
    )
    frames = [stub.push(said)]
    stub.wait_acked(frames)
    # when it is edited twice to mention the bot
    frames.append(stub.push(edit_of(said, text="are you around", mention=bot, update_ms=2_000_000_000_000)))
    frames.append(stub.push(edit_of(said, text="are you around?", mention=bot, update_ms=2_000_000_002_000)))
    stub.wait_acked(frames)
    connection.flush()
    # then one turn, one reply; the context has the last text
    assert Turn.objects.filter(bot=bot, source_message_id="om_ws_edit").count() == 1
    assert len(feishu_stub.sent) == 1
    assert ThreadContextItem.objects.get(message_id="om_ws_edit").text.endswith("are you around?")
