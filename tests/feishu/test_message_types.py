"""G7 / issue 12.5 item 1: every Feishu message type becomes text + attachment references; thread context and
the probe judge get the labels, never a body. Through the webhook and the long connection (the real lark-oapi
clients against the local stubs)."""

import secrets
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Bot
from feishu.discuss.fire import FIRE_STARTED
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.inbound.parsing import Attachment, card_text, message_content_parse, message_parse
from feishu.inbound.signing import message_event_payload
from feishu.models import InboundEvent
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.probe.conftest import make_judge, stub_base_url  # noqa: F401  (fixtures)
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import ThreadContextItem, Workspace

# (message_type, content, the text the message becomes, its attachment references)
MESSAGE_TYPES = [
    ("text", {"text": "plain words"}, "plain words", ()),
    ("image", {"image_key": "img_v3_shot"}, "[image]", (Attachment(kind="image", key="img_v3_shot"),)),
    (
        "file",
        {"file_key": "file_v3_report", "file_name": "report.pdf"},
        "[file: report.pdf]",
        (Attachment(kind="file", key="file_v3_report", name="report.pdf"),),
    ),
    (
        "post",
        {
            "zh_cn": {
                "title": "Bug",
                "content": [
                    [{"tag": "text", "text": "it looks like this "}, {"tag": "img", "image_key": "img_v3_in_post"}],
                    [{"tag": "text", "text": "and this"}, {"tag": "img", "image_key": "img_v3_second"}],
                ],
            }
        },
        "Bug\nit looks like this [image]\nand this[image]",
        (Attachment(kind="image", key="img_v3_in_post"), Attachment(kind="image", key="img_v3_second")),
    ),
    (
        "audio",
        {"file_key": "file_v3_voice", "duration": 12000},
        "[audio: 12 s]",
        (Attachment(kind="audio", key="file_v3_voice", duration_ms=12000),),
    ),
    (
        "media",
        {"file_key": "file_v3_clip", "image_key": "img_cover", "file_name": "demo.mp4", "duration": 3000},
        "[video: demo.mp4, 3 s]",
        (Attachment(kind="video", key="file_v3_clip", name="demo.mp4", duration_ms=3000),),
    ),
    ("sticker", {"file_key": "file_v3_sticker"}, "[sticker]", (Attachment(kind="sticker", key="file_v3_sticker"),)),
    (
        "merge_forward",
        {"content": "Merged and Forwarded Message"},
        "[forwarded messages]",
        (Attachment(kind="forward", key=""),),
    ),
    (
        "interactive",
        {"title": "Deploy finished", "elements": [[{"tag": "text", "text": "all checks green"}]]},
        "Deploy finished\nall checks green",
        (),
    ),
    ("share_chat", {"chat_id": "oc_other"}, "[share_chat message]", ()),
]
# Collected as their label (interactive cards are not collected, C3; other types are a placeholder turns read).
LABELLED_TYPES = [case for case in MESSAGE_TYPES if case[0] not in ("text", "interactive", "share_chat")]


def payload_of(bot: Bot, *, message_type: str, content: dict, chat_type: str = "group", chat_id: str = "oc_team"):
    return message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_" + secrets.token_hex(8),
        chat_id=chat_id,
        chat_type=chat_type,
        text="",
        sender_open_id="ou_alice",
        message_type=message_type,
        content=content,
    )


@pytest.mark.parametrize(("message_type", "content", "text", "attachments"), MESSAGE_TYPES)
def test_g7_each_message_type_becomes_text_and_attachment_references(message_type, content, text, attachments):
    parsed = message_content_parse(message_type=message_type, content=content)
    assert (parsed.text, parsed.attachments) == (text, attachments)


def test_g7_a_cardkit_2_card_is_read_by_the_sdks_walk():
    card = {
        "schema": "2.0",
        "header": {"title": {"tag": "plain_text", "content": "Release"}},
        "body": {"elements": [{"tag": "markdown", "content": "**v2.1** is out"}, {"tag": "hr"}]},
    }
    assert card_text(card) == "Release\n**v2.1** is out"


def test_g7_malformed_contents_never_raise_and_keep_no_reference():
    for message_type in ("image", "file", "post", "sticker", "interactive"):
        parsed = message_content_parse(message_type=message_type, content={"image_key": 7, "content": "x"})
        assert parsed.attachments == ()


@pytest.mark.django_db
@pytest.mark.parametrize(("message_type", "content", "text", "attachments"), LABELLED_TYPES)
def test_g7_webhook_each_type_is_stored_parsed_and_kept_in_thread_context_as_its_label(
    feishu, make_feishu_bot, message_type, content, text, attachments
):
    # given: a mention-mode bot in a group; someone posts a non-text message without @-ing it
    bot = make_feishu_bot()
    payload = payload_of(bot, message_type=message_type, content=content)
    # when
    response = feishu.post(bot, payload)
    # then: stored once, parsed with its references, recorded as the label only, nothing downloaded
    assert response.status_code == 200
    event = InboundEvent.objects.get(bot=bot)
    parsed = message_parse(event.payload)
    assert (parsed.text, parsed.attachments) == (text, attachments)
    [item] = ThreadContextItem.objects.filter(chat_id="oc_team")
    assert item.text == text
    assert feishu.stub.requests_to("resource") == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_g7_long_connection_parses_every_type_with_the_same_parser(feishu_stub, make_feishu_bot, ws_stub, connect):
    # given: a long-connection bot, connected to the stub's websocket
    stub = ws_stub
    bot = make_feishu_bot(feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    stub.app_secrets[bot.feishu_app_id] = bot.feishu_app_secret
    connection = connect(bot)
    pushed = {}
    # when: one message of each type is pushed over the connection
    for message_type, content, text, attachments in LABELLED_TYPES:
        payload = payload_of(bot, message_type=message_type, content=content)
        pushed[payload["event"]["message"]["message_id"]] = (text, attachments)
        stub.wait_acked([stub.push(payload)])
    connection.flush()
    # then: the same references and the same label in thread context as over the webhook
    for message_id, (text, attachments) in pushed.items():
        parsed = message_parse(InboundEvent.objects.get(bot=bot, message_id=message_id).payload)
        assert (parsed.text, parsed.attachments) == (text, attachments)
        assert ThreadContextItem.objects.get(message_id=message_id).text == text
    assert feishu_stub.requests_to("resource") == []


@pytest.mark.django_db
def test_g7_the_probe_judge_gets_the_label_and_no_image(
    feishu,
    make_feishu_bot,
    make_judge,  # noqa: F811
    llm_stub,
    django_capture_on_commit_callbacks,
):
    """seed: the judge gets no vision input; images reach it as text. The primary here reads images (vision),
    the judge still only sees the label."""
    # given: a discuss bot whose primary is a vision model; a picture posted in its group with a question
    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    bot = make_feishu_bot(
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_vision=True),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_team")
    png = b"\x89PNG\r\n\x1a\n" + b"pixels" * 20
    payload = payload_of(
        bot,
        message_type="post",
        content={"title": "", "content": [[{"tag": "text", "text": "why red? "}, {"tag": "img", "image_key": "k1"}]]},
    )
    feishu.stub.add_resource(message_id=payload["event"]["message"]["message_id"], file_key="k1", content=png)
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "a question"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The build is red because...")))
    feishu.post(bot, payload)
    # when: the wake fires
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    # then: the judge's request holds the label, no image block, no bytes; the primary got the picture
    assert outcomes == [FIRE_STARTED]
    [judged] = llm_stub.requests_for("anthropic")
    assert "why red? [image]" in judged.body.decode()
    assert '"type": "image"' not in judged.body.decode() and '"type":"image"' not in judged.body.decode()
    [primary] = llm_stub.requests_for("openai_chat")
    parts = primary.json["messages"][-2]["content"]  # the contract is the last message
    assert [part["type"] for part in parts] == ["text", "image_url"]
