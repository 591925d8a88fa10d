"""F3/F5: delivery through the real lark-oapi client to the local Feishu: reply in thread, one uuid per turn and
chunk (a retried delivery never posts twice), rate limits and token expiry retried, bots without credentials
recorded only."""

import json

import pytest
from django.conf import settings

from agents.models import Turn
from feishu.models import OutboundDelivery
from feishu.outbound import client as feishu_client
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.delivery import TEXT_CHUNK_CHARS, OutgoingText, deliveries_prepare, delivery_send, delivery_uuid
from tests.agents.factories import ThreadFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_sleep(mocker):
    return mocker.patch("feishu.outbound.client.time.sleep")


def _turn(bot, source="om_src"):
    return Turn.objects.create(bot=bot, thread=ThreadFactory(bot=bot), trigger="mention", source_message_id=source)


def _rows(bot, turn, text="the answer", reply_in_thread=True):
    return deliveries_prepare(
        outgoing=OutgoingText(
            bot=bot,
            turn=turn,
            chat_id="oc_group",
            reply_to_message_id=turn.source_message_id,
            reply_in_thread=reply_in_thread,
            text=text,
            source_message_id=turn.source_message_id,
        )
    )


def test_f3_reply_in_thread_goes_through_the_reply_api_with_uuid(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    turn = _turn(bot)
    [row] = _rows(bot, turn)
    # when
    sent = delivery_send(delivery=row)
    # then: the body the real SDK put on the wire
    [reply] = feishu_stub.requests_to("reply")
    assert reply.path == "/open-apis/im/v1/messages/om_src/reply"
    assert reply.body == {
        "content": json.dumps({"text": "the answer"}),
        "msg_type": "text",
        "reply_in_thread": True,
        "uuid": row.uuid,
    }
    assert reply.headers["Authorization"].startswith("Bearer t-stub-")
    assert (sent.status, sent.feishu_message_id) == ("sent", feishu_stub.sent[0]["message_id"])
    assert len(row.uuid) <= 50


def test_f3_uuid_is_stable_across_retries_and_never_posts_twice(feishu_stub, make_feishu_bot):
    # given: a delivery that was sent, then the worker died before recording it (row still pending)
    bot = make_feishu_bot()
    turn = _turn(bot)
    [row] = _rows(bot, turn)
    delivery_send(delivery=row)
    OutboundDelivery.objects.filter(pk=row.pk).update(status="pending", feishu_message_id="")
    # when: the re-run prepares the rows again and sends
    [again] = _rows(bot, turn)
    delivery_send(delivery=again)
    # then
    requests = feishu_stub.requests_to("reply")
    assert again.pk == row.pk
    assert [r.body["uuid"] for r in requests] == [row.uuid, row.uuid]
    assert len(feishu_stub.sent) == 1
    assert again.uuid == delivery_uuid(bot=bot, source_message_id="om_src", purpose="turn", chunk_index=0)


def test_f3_rate_limit_429_waits_the_reset_header_then_succeeds(feishu_stub, make_feishu_bot, no_sleep):
    bot = make_feishu_bot()
    [row] = _rows(bot, _turn(bot))
    feishu_stub.fail_next(
        "reply",
        status=429,
        code=99991400,
        msg="request trigger frequency limit",
        headers={"x-ogw-ratelimit-reset": "3"},
    )

    sent = delivery_send(delivery=row)

    assert sent.status == "sent"
    assert len(feishu_stub.requests_to("reply")) == 2
    # the reset header is waited first; the resend then takes a send of its own (R4), and with sleep mocked
    # the budget asks at most for one refill interval at a time, never a second reset wait
    interval = 1 / (settings.FEISHU_CHAT_SENDS_PER_SECOND * settings.FEISHU_SEND_BUDGET_RATIO)
    waits = [wait.args[0] for wait in no_sleep.call_args_list]
    assert waits[0] == 3.0
    assert all(wait <= interval + 1e-9 for wait in waits[1:])
    assert len(feishu_stub.sent) == 1


def test_f3_group_rate_limit_230020_is_retried(feishu_stub, make_feishu_bot, no_sleep):
    bot = make_feishu_bot()
    [row] = _rows(bot, _turn(bot))
    feishu_stub.fail_next("reply", status=400, code=230020, msg="This operation triggers the frequency limit")

    sent = delivery_send(delivery=row)

    assert sent.status == "sent"
    assert len(feishu_stub.requests_to("reply")) == 2


def test_f3_expired_token_is_refreshed_once_then_succeeds(feishu_stub, make_feishu_bot, no_sleep):
    # given: a token was issued, then Feishu invalidated it (99991663)
    bot = make_feishu_bot()
    turn = _turn(bot)
    rows = _rows(bot, turn, text="first")
    delivery_send(delivery=rows[0])
    feishu_stub.expire_tokens()
    second_turn = _turn(bot, source="om_src_2")
    [row] = _rows(bot, second_turn, text="second")
    # when
    sent = delivery_send(delivery=row)
    # then: the SDK fetched a second token and the reply went through once
    assert sent.status == "sent"
    assert len(feishu_stub.requests_to("token")) == 2
    assert [s["content"] for s in feishu_stub.sent] == [json.dumps({"text": "first"}), json.dumps({"text": "second"})]


def test_f3_permanent_error_marks_the_row_failed(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot()
    [row] = _rows(bot, _turn(bot))
    feishu_stub.fail_next("reply", status=400, code=230002, msg="Bot is not in the chat")

    with pytest.raises(FeishuApiError) as raised:
        delivery_send(delivery=row)

    assert raised.value.code == 230002
    row.refresh_from_db()
    assert (row.status, row.error) == ("failed", "230002: Bot is not in the chat")
    assert feishu_stub.sent == []


def test_f3_long_text_is_chunked_with_one_uuid_per_chunk(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot()
    paragraph = "paragraph " * 500  # 5000 characters
    text = "\n\n".join([paragraph] * 5)

    rows = _rows(bot, _turn(bot), text=text)
    for row in rows:
        delivery_send(delivery=row)

    # split on paragraph boundaries, each chunk under the limit, nothing lost
    assert [row.content for row in rows] == [paragraph] * 5
    assert all(len(row.content) <= TEXT_CHUNK_CHARS for row in rows)
    assert [row.chunk_index for row in rows] == [0, 1, 2, 3, 4]
    assert len({row.uuid for row in rows}) == 5
    assert len(feishu_stub.sent) == 5


def test_f5_bot_without_credentials_records_and_sends_nothing(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot(feishu_app_id="", feishu_app_secret="")
    [row] = _rows(bot, _turn(bot))

    sent = delivery_send(delivery=row)

    assert sent.status == "recorded"
    assert feishu_stub.requests == []


def test_f4_client_uses_the_feishu_domain_setting(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot()

    client = feishu_client.lark_client_get(bot=bot)

    assert client.config.domain == feishu_stub.url


def test_f6_bot_open_id_is_read_once_from_bot_info_and_cached(feishu_stub, make_feishu_bot):
    from feishu.inbound.routing import bot_open_id_ensure

    bot = make_feishu_bot()
    feishu_stub.bot_open_ids[bot.feishu_app_id] = "ou_the_real_bot"

    first = bot_open_id_ensure(bot=bot)
    bot.refresh_from_db()
    second = bot_open_id_ensure(bot=bot)

    assert (first, second, bot.feishu_bot_open_id) == ("ou_the_real_bot", "ou_the_real_bot", "ou_the_real_bot")
    assert len(feishu_stub.requests_to("bot_info")) == 1
