"""R2, R3 and issue 15 item 5 through the real path: a signed webhook, the one turn runner, the real OpenAI SDK
streaming from the LLM stub, the real lark-oapi client against the local Feishu's CardKit.

The answer is written into one card while the model streams (strictly increasing sequences, at most 10 updates
per second), the card ends with exactly the stored reply, thread context records it once; tool steps show on the
card as collapsed lines and nowhere else; a refused card falls back to one plain reply; a 5xx retries the
delivery on the same card; `text` bots keep plain replies, split outside code fences.
"""

import json
from collections.abc import Iterator

import pytest

from agents.mcp.client import mcp_connections_close_all
from agents.models import McpServer, Message, Provider, Turn
from feishu.models import OutboundDelivery
from feishu.outbound.cards import CARD_CHUNK_CHARS, TEXT_CHUNK_CHARS
from feishu.outbound.delivery import OutgoingText, deliveries_prepare, deliveries_send
from feishu.outbound.replies import tool_step_line
from tests.agents.factories import LLMModelFactory, ProviderFactory, ThreadFactory
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from tests.stubs.mcp_server import stdio_command
from threadcontext.models import ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

CARD_ROUTES = ("card_content", "card_settings")
ANSWER = "## Plan\n\n" + " ".join(f"**step{n}**" if n % 5 == 0 else f"word{n}" for n in range(60))


@pytest.fixture(autouse=True)
def _close_tool_connections(settings) -> Iterator[None]:
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 60.0  # a loaded machine starts the stdio server slowly
    yield
    mcp_connections_close_all()


def openai_model(llm_stub, **fields):
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=10
    )
    return LLMModelFactory(provider=provider, name="gpt-4o", **fields)


def card_calls(stub, card_id: str):
    return [r for r in stub.requests if r.route in CARD_ROUTES and r.path.split("/")[5] == card_id]


def stored_reply() -> str:
    return Message.objects.get(kind=Message.Kind.AGENT_REPLY).content


def test_r3_the_answer_streams_into_one_card_that_ends_with_exactly_the_stored_reply(feishu, make_feishu_bot, llm_stub):
    # given: a model that streams a markdown answer word by word, a bot in a topic of a workspace group
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=ANSWER), chunk_delay_seconds=0.02))
    # when
    feishu.say(bot, text="plan it", mention=[bot], message_id="om_q", root_id="om_root", thread_id="omt_1")
    # then: the model really streamed, and one card in one reply, in the topic, carried it
    assert llm_stub.requests_for("openai_chat")[0].json["stream"] is True
    turn = Turn.objects.get()
    assert turn.status == "delivered"
    [card_id] = feishu.stub.cards
    [reply] = feishu.stub.sent
    assert (reply["msg_type"], reply["reply_in_thread"], json.loads(reply["content"])) == (
        "interactive",
        True,
        {"type": "card", "data": {"card_id": card_id}},
    )
    # updates while it streamed, strictly increasing sequences, within Feishu's 10 per second
    calls = card_calls(feishu.stub, card_id)
    sequences = [call.body["sequence"] for call in calls]
    assert sequences == sorted(set(sequences))
    assert len([c for c in calls if c.route == "card_content"]) >= 2
    assert feishu.stub.max_per_second(calls) <= 10
    assert {(c.status, c.code) for c in calls} == {(200, 0)}
    # the card's final content is the stored reply, streaming closed with a summary
    assert feishu.stub.card_text(card_id) == stored_reply() == ANSWER
    assert feishu.stub.cards[card_id]["streaming"] is False
    assert feishu.stub.cards[card_id]["card"]["config"]["summary"]["content"].startswith("Plan")
    # thread context records the whole answer once (C2), under the card's message id
    [output] = ThreadContextItem.objects.filter(item_type="agent_output")
    assert (output.text, output.event.message_id) == (ANSWER, reply["message_id"])
    # the card's message is one of the bot's outputs: a reply to it routes to the bot
    [row] = OutboundDelivery.objects.filter(turn=turn)
    assert (row.status, row.msg_type, row.feishu_message_id, row.content) == (
        "sent",
        "interactive",
        reply["message_id"],
        ANSWER,
    )


def test_r3_a_refused_card_falls_back_to_one_plain_reply_with_the_whole_answer(feishu, make_feishu_bot, llm_stub):
    # given: Feishu refuses to create the card
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=ANSWER)))
    feishu.stub.fail_next("card_create", status=400, code=300100, msg="card refused")
    # when
    feishu.say(bot, text="plan it", mention=[bot], message_id="om_q")
    # then: no card, one text reply with everything, delivered
    assert Turn.objects.get().status == "delivered"
    assert len(feishu.stub.requests_to("card_create")) == 1
    [reply] = feishu.stub.sent
    assert (reply["msg_type"], json.loads(reply["content"])) == ("text", {"text": ANSWER})
    assert [r.feishu_message_id for r in OutboundDelivery.objects.all()] == [reply["message_id"]]


def test_r3_a_5xx_at_the_end_retries_the_delivery_on_the_same_card(feishu, make_feishu_bot, llm_stub, mocker):
    # given: Feishu fails the final update with a 500 (then recovers)
    mocker.patch("feishu.outbound.client.time.sleep")
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="short answer")))
    feishu.stub.fail_next("card_settings", status=500, code=1, msg="internal error")
    # when
    feishu.say(bot, text="hi", mention=[bot], message_id="om_q")
    # then: a second delivery attempt closed the same card; one card, one reply, no plain fallback
    turn = Turn.objects.get()
    assert (turn.status, turn.delivery_attempts) == ("delivered", 2)
    [card_id] = feishu.stub.cards
    assert len(feishu.stub.sent) == 1
    assert feishu.stub.card_text(card_id) == "short answer"
    assert feishu.stub.cards[card_id]["streaming"] is False
    sequences = [call.body["sequence"] for call in card_calls(feishu.stub, card_id)]
    assert sequences == sorted(set(sequences))


def test_m5_tool_steps_show_on_the_card_and_never_in_the_reply_or_thread_context(feishu, make_feishu_bot, llm_stub):
    # given: a bot with the stub MCP server; the model calls its echo tool, then answers (slowly enough to show)
    bot = make_feishu_bot(primary_model=openai_model(llm_stub, supports_tool_calls=True))
    command, args = stdio_command()
    McpServer.objects.create(
        bot=bot, name="stub", transport=McpServer.Transport.STDIO, command=command, args=args, allowed_tools=["echo"]
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(text=None, tool_calls=[("stub__echo", {"text": "ping"})])),
        StubResponse(body=openai_chat_body(text=ANSWER), chunk_delay_seconds=0.03),
    )
    # when
    feishu.say(bot, text="use the tool", mention=[bot], message_id="om_q")
    # then: the card showed the step while the answer was written
    line = tool_step_line("stub · echo")
    [card_id] = feishu.stub.cards
    shown = [call.body["content"] for call in card_calls(feishu.stub, card_id) if call.route == "card_content"]
    assert any(content.startswith(line + "\n\n") for content in shown)
    # and it ends with the answer alone: not in the stored reply, the card, the context item or the history
    assert stored_reply() == ANSWER
    assert feishu.stub.card_text(card_id) == ANSWER
    assert [item.text for item in ThreadContextItem.objects.filter(item_type="agent_output")] == [ANSWER]
    assert not Message.objects.filter(content__contains="stub · echo").exists()


def test_r2_a_text_bot_still_answers_in_plain_text_without_cards(feishu, make_feishu_bot):
    bot = make_feishu_bot(reply_format="text")

    feishu.say(bot, text="hello", mention=[bot], message_id="om_q")

    [reply] = feishu.stub.sent
    assert (reply["msg_type"], json.loads(reply["content"])) == (
        "text",
        {"text": "[local_rules · rule-based echo] I received 0 context messages; you said: hello"},
    )
    assert feishu.stub.cards == {}
    assert Turn.objects.get().status == "delivered"


@pytest.mark.parametrize(("reply_format", "limit"), [("text", TEXT_CHUNK_CHARS), ("markdown_card", CARD_CHUNK_CHARS)])
def test_r2_a_code_fence_longer_than_a_chunk_is_split_outside_the_fence(
    feishu, make_feishu_bot, llm_stub, reply_format, limit
):
    # given: an answer whose code block alone is longer than one message; nothing streamed (a text bot), or the
    # static-card path of a card bot (the same rows)
    bot = make_feishu_bot(reply_format=reply_format)
    code = "\n".join(f"line_{n} = {n}  # some code" for n in range(limit // 20))
    text = f"Here it is:\n\n```python\n{code}\n```\n\nThat is all."
    turn = Turn.objects.create(bot=bot, thread=ThreadFactory(bot=bot), trigger="mention", source_message_id="om_src")
    # when
    rows = deliveries_prepare(
        outgoing=OutgoingText(
            bot=bot,
            turn=turn,
            chat_id="oc_group",
            reply_to_message_id="om_src",
            reply_in_thread=False,
            text=text,
            source_message_id="om_src",
            reply_format=reply_format,
        )
    )
    deliveries_send(deliveries=rows)
    # then: several messages, each within the limit, every fence closed in the message that opened it
    texts = feishu.stub.sent_texts()
    assert len(texts) >= 2
    assert all(len(chunk) <= limit for chunk in texts)
    for chunk in texts:
        fences = [line for line in chunk.split("\n") if line.startswith("```")]
        assert len(fences) % 2 == 0, chunk[:80]
    body_lines = [line for chunk in texts for line in chunk.split("\n") if line.startswith("line_")]
    assert body_lines == code.split("\n")
    expected_type = "text" if reply_format == "text" else "interactive"
    assert {sent["msg_type"] for sent in feishu.stub.sent} == {expected_type}


def test_r3_a_5xx_on_the_cards_reply_while_streaming_is_tried_again_with_the_same_uuid(
    feishu, make_feishu_bot, llm_stub
):
    # given: Feishu fails the first reply carrying the card (a 500), the model streams for a while
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=ANSWER), chunk_delay_seconds=0.03))
    feishu.stub.fail_next("reply", status=500, code=1, msg="internal error")
    # when
    feishu.say(bot, text="plan it", mention=[bot], message_id="om_q")
    # then: the same card was posted by a later try under the same uuid; no plain fallback, delivered once
    assert Turn.objects.get().status == "delivered"
    [card_id] = feishu.stub.cards
    uuids = [request.body["uuid"] for request in feishu.stub.requests_to("reply")]
    assert len(uuids) == 2 and len(set(uuids)) == 1
    [reply] = feishu.stub.sent
    assert reply["msg_type"] == "interactive"
    assert feishu.stub.card_text(card_id) == ANSWER


def test_r3_an_update_refused_after_the_card_falls_back_through_the_delivery_rows_after_the_cards(
    feishu, make_feishu_bot, llm_stub
):
    # given: the card and its reply go out, then Feishu refuses a content update for good
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=ANSWER), chunk_delay_seconds=0.02))
    feishu.stub.fail_next("card_content", status=400, code=230099, msg="card content failed")
    # when
    feishu.say(bot, text="plan it", mention=[bot], message_id="om_q")
    # then: the card (with what it showed) and one plain reply with the whole answer, each once, in that order
    turn = Turn.objects.get()
    assert turn.status == "delivered"
    card, plain = feishu.stub.sent
    assert card["msg_type"] == "interactive"
    assert (plain["msg_type"], json.loads(plain["content"])) == ("text", {"text": ANSWER})
    rows = list(OutboundDelivery.objects.filter(turn=turn).order_by("chunk_index"))
    assert [(r.chunk_index, r.msg_type, r.status, r.feishu_message_id) for r in rows] == [
        (0, "interactive", "sent", card["message_id"]),
        (1, "text", "sent", plain["message_id"]),
    ]
    assert rows[1].content == ANSWER == stored_reply()


def test_r3_a_plain_fallback_the_delivery_retries_sends_each_chunk_once(feishu, make_feishu_bot, llm_stub, mocker):
    # given: a refused card, an answer of two plain messages, and a 500 on the first plain reply
    mocker.patch("feishu.outbound.client.time.sleep")
    bot = make_feishu_bot(primary_model=openai_model(llm_stub))
    long_answer = "\n\n".join(f"Paragraph {n}: " + "word " * 200 for n in range(2 * TEXT_CHUNK_CHARS // 1000 + 2))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=long_answer)))
    feishu.stub.fail_next("card_create", status=400, code=300100, msg="card refused")
    feishu.stub.fail_next("reply", status=500, code=1, msg="internal error")
    # when
    feishu.say(bot, text="write a lot", mention=[bot], message_id="om_q")
    # then: the retried delivery sent the failed chunk again under its uuid and the rest once: whole answer, once
    turn = Turn.objects.get()
    assert (turn.status, turn.delivery_attempts) == ("delivered", 2)
    uuids = [request.body["uuid"] for request in feishu.stub.requests_to("reply")]
    assert uuids[0] == uuids[1] and len(set(uuids)) == len(feishu.stub.sent) >= 2
    assert "\n\n".join(feishu.stub.sent_texts()) == long_answer == stored_reply()
    rows = OutboundDelivery.objects.filter(turn=turn).order_by("chunk_index")
    assert [(r.status, r.feishu_message_id) for r in rows] == [("sent", m["message_id"]) for m in feishu.stub.sent]
