"""The outbound client calls (issue 13, R1-R3, issue 12.5, issue 9.11) through the real lark-oapi client
against the local Feishu: what each puts on the wire, what it returns, and how a refusal surfaces."""

import json

import pytest

from feishu.outbound import cardkit as feishu_cardkit
from feishu.outbound import client as feishu_client
from feishu.outbound import reads as feishu_reads
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError, ResourceTooLarge
from feishu.outbound.cards import markdown_card

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_sleep(mocker):
    return mocker.patch("feishu.outbound.client.time.sleep")


def test_r1_reaction_create_returns_its_id_and_delete_removes_it(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    # when
    reaction_id = feishu_sends.reaction_create(bot=bot, message_id="om_src", emoji_type="OnIt")
    feishu_sends.reaction_delete(bot=bot, message_id="om_src", reaction_id=reaction_id)
    # then
    [create] = feishu_stub.requests_to("reaction_create")
    assert (create.method, create.path) == ("POST", "/open-apis/im/v1/messages/om_src/reactions")
    assert create.body == {"reaction_type": {"emoji_type": "OnIt"}}
    [delete] = feishu_stub.requests_to("reaction_delete")
    assert (delete.method, delete.path) == ("DELETE", f"/open-apis/im/v1/messages/om_src/reactions/{reaction_id}")
    assert feishu_stub.reactions[reaction_id] == {
        "message_id": "om_src",
        "emoji_type": "OnIt",
        "app_id": bot.feishu_app_id,
        "deleted": True,
    }


def test_r1_deleting_an_unknown_reaction_raises_a_feishu_error(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    # when
    with pytest.raises(FeishuApiError) as raised:
        feishu_sends.reaction_delete(bot=bot, message_id="om_src", reaction_id="reaction_none")
    # then
    assert (raised.value.code, raised.value.is_retryable) == (231003, False)


def test_r3_card_create_content_and_settings_reach_cardkit_with_their_sequence(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    card = markdown_card(text="…", streaming=True)
    # when
    card_id = feishu_cardkit.card_create(bot=bot, card=card)
    feishu_cardkit.card_element_content_update(
        bot=bot, card_id=card_id, element_id="answer", content="# Hi", sequence=1, uuid="u-1"
    )
    feishu_cardkit.card_settings_update(
        bot=bot, card_id=card_id, settings={"config": {"streaming_mode": False}}, sequence=2
    )
    # then
    [create] = feishu_stub.requests_to("card_create")
    assert create.body == {"type": "card_json", "data": json.dumps(card, ensure_ascii=False)}
    [content] = feishu_stub.requests_to("card_content")
    assert (content.method, content.path) == ("PUT", f"/open-apis/cardkit/v1/cards/{card_id}/elements/answer/content")
    assert content.body == {"uuid": "u-1", "content": "# Hi", "sequence": 1}
    [settings] = feishu_stub.requests_to("card_settings")
    assert settings.body == {"settings": json.dumps({"config": {"streaming_mode": False}}), "sequence": 2}
    assert feishu_stub.card_text(card_id) == "# Hi"
    assert feishu_stub.cards[card_id]["streaming"] is False


def test_r3_a_sequence_not_above_the_last_is_refused_and_changes_nothing(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    card_id = feishu_cardkit.card_create(bot=bot, card=markdown_card(text="…", streaming=True))
    feishu_cardkit.card_element_content_update(bot=bot, card_id=card_id, element_id="answer", content="new", sequence=2)
    # when
    with pytest.raises(FeishuApiError) as raised:
        feishu_cardkit.card_element_content_update(
            bot=bot, card_id=card_id, element_id="answer", content="old", sequence=2
        )
    # then
    assert raised.value.code == 300317
    assert feishu_stub.card_text(card_id) == "new"


def test_r2_reply_with_a_card_reference_and_with_card_json(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    card_id = feishu_cardkit.card_create(bot=bot, card=markdown_card(text="streamed", streaming=True))
    # when
    by_reference = feishu_sends.message_reply_content(
        bot=bot,
        message_id="om_src",
        msg_type="interactive",
        content=feishu_cardkit.card_reference(card_id),
        uuid="u-ref",
        reply_in_thread=True,
    )
    by_json = feishu_sends.message_create_content(
        bot=bot, chat_id="oc_group", msg_type="interactive", content=markdown_card(text="**bold**"), uuid="u-json"
    )
    # then
    first, second = feishu_stub.sent
    assert (first["route"], first["msg_type"], first["reply_in_thread"], first["uuid"]) == (
        "reply",
        "interactive",
        True,
        "u-ref",
    )
    assert json.loads(first["content"]) == {"type": "card", "data": {"card_id": card_id}}
    assert feishu_stub.cards[card_id]["sent_in"] == [by_reference.message_id]
    assert (second["route"], second["receive_id"], json.loads(second["content"])) == (
        "create",
        "oc_group",
        markdown_card(text="**bold**"),
    )
    assert by_json.message_id == second["message_id"]


def test_r2_an_invalid_card_is_refused_and_nothing_is_sent(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    # when
    with pytest.raises(FeishuApiError) as raised:
        feishu_sends.message_reply_content(
            bot=bot,
            message_id="om_src",
            msg_type="interactive",
            content={"type": "card", "data": {"card_id": "7unknown"}},
            uuid="u-bad",
            reply_in_thread=False,
        )
    # then
    assert raised.value.code == 230099
    assert feishu_stub.sent == []


def test_issue_12_5_message_resource_get_returns_bytes_name_and_mime(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    feishu_stub.add_resource(
        message_id="om_img", file_key="img_v3_key", content=b"\x89PNG" + b"x" * 1000, mime="image/png", name="a.png"
    )
    # when
    resource = feishu_reads.message_resource_get(
        bot=bot, message_id="om_img", file_key="img_v3_key", type="image", max_bytes=2000
    )
    # then
    assert resource == feishu_reads.MessageResource(content=b"\x89PNG" + b"x" * 1000, name="a.png", mime="image/png")
    [request] = feishu_stub.requests_to("resource")
    assert request.path == "/open-apis/im/v1/messages/om_img/resources/img_v3_key"
    assert request.query == {"type": ["image"]}
    assert request.headers["Authorization"].startswith("Bearer t-stub-")


@pytest.mark.parametrize("declare_length", [True, False])
def test_issue_12_5_an_oversize_resource_is_refused_without_reading_it_all(
    feishu_stub, make_feishu_bot, declare_length
):
    # given: 64 MiB, far more than the socket buffers hold
    bot = make_feishu_bot()
    size = 64 * 1024 * 1024
    feishu_stub.add_resource(
        message_id="om_file",
        file_key="file_key",
        content=b"\0" * size,
        mime="application/pdf",
        resource_type="file",
        declare_length=declare_length,
    )
    # when
    with pytest.raises(ResourceTooLarge) as raised:
        feishu_reads.message_resource_get(
            bot=bot, message_id="om_file", file_key="file_key", type="file", max_bytes=1024 * 1024
        )
    # then: refused once, not retried, and the stub never got to write the whole file
    assert raised.value.size == (size if declare_length else None)
    assert raised.value.is_retryable is False
    assert len(feishu_stub.requests_to("resource")) == 1
    assert feishu_stub.resources[("om_file", "file_key")]["bytes_written"] < size


def test_issue_12_5_a_missing_resource_raises_feishu_s_code(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    feishu_stub.add_resource(message_id="om_img", file_key="key", content=b"png", resource_type="image")
    # when: asked as a file although it is an image
    with pytest.raises(FeishuApiError) as raised:
        feishu_reads.message_resource_get(bot=bot, message_id="om_img", file_key="key", type="file", max_bytes=10)
    # then
    assert raised.value.code == 234003


def test_r4_a_rate_limited_send_waits_for_x_ogw_ratelimit_reset_then_succeeds(feishu_stub, make_feishu_bot, no_sleep):
    # given: Feishu's own answer to a sixth message in a second
    bot = make_feishu_bot()
    feishu_stub.fail_next("reply", status=429, code=99991400, headers={"x-ogw-ratelimit-reset": "2"})
    # when
    sent = feishu_sends.message_reply(bot=bot, message_id="om_src", text="hi", uuid="u-rl", reply_in_thread=False)
    # then
    no_sleep.assert_called_once_with(2.0)
    assert len(feishu_stub.requests_to("reply")) == 2
    assert [message["message_id"] for message in feishu_stub.sent] == [sent.message_id]


def test_r4_the_stub_refuses_a_sixth_message_in_one_second_to_one_chat(feishu_stub, make_feishu_bot, mocker):
    # given: real waits (the retry must come after the stub's window has moved on)
    sleep = mocker.spy(feishu_client.time, "sleep")
    bot = make_feishu_bot()
    for index in range(5):
        feishu_sends.message_create(bot=bot, chat_id="oc_busy", text=str(index), uuid=f"u-{index}")
    # when: the sixth within the second is refused like Feishu does, then retried after the reset
    feishu_sends.message_create(bot=bot, chat_id="oc_busy", text="6", uuid="u-6")
    # then
    refused = [r for r in feishu_stub.requests_to("create") if r.status == 429]
    assert [r.code for r in refused] == [99991400]
    assert sleep.call_count == 1
    assert 1.0 <= sleep.call_args.args[0] <= 2.0
    assert [m["content"] for m in feishu_stub.sent][-1] == json.dumps({"text": "6"})


def test_issue_9_11_the_client_cache_keeps_one_entry_per_bot_replaced_on_new_credentials(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    first = feishu_client.lark_client_get(bot=bot)
    # when: saved many times without a credential change, then with a new secret
    for _ in range(5):
        bot.save()
        assert feishu_client.lark_client_get(bot=bot) is first
    bot.feishu_app_secret = "rotated-secret"
    bot.save()
    second = feishu_client.lark_client_get(bot=bot)
    # then
    assert second is not first
    assert list(feishu_client._clients) == [bot.pk]
    assert second.config.app_secret == "rotated-secret"
