"""G7 / issue 12.5 item 2: a message's images and files at turn time. Downloaded from the local Feishu with the
real client, given to the model in each provider's own wire format (asserted on the bodies the real LLM SDKs
send to the local stubs), labelled when they cannot be, never stored."""

import base64
import json
import secrets

import pytest
from django.apps import apps

from agents.models import Bot, Turn
from feishu.channel.attachments import ATTACHMENTS_HEADER, ATTACHMENTS_PREAMBLE
from feishu.inbound.signing import message_event_payload
from tests.agents.test_llm_adapters import APIS, model_for
from tests.stubs.llm_servers import BODY_BUILDERS, StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"pixels-of-a-screenshot" * 40
PNG_B64 = base64.b64encode(PNG).decode()
PNG_B64URL = base64.urlsafe_b64encode(PNG).decode()
FILE_BODY = "name,score\nalice,3\nbob,5\n# FILE-BODY-MARKER\n"

EXPECTED_IMAGE_PART = {
    "openai_chat": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
    "openai_responses": {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}", "detail": "auto"},
    "anthropic": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
    # google-genai's own spelling and URL-safe base64 (which the API accepts)
    "gemini": {"inlineData": {"mime_type": "image/png", "data": PNG_B64URL}},
}


def holds(value, expected) -> bool:
    """Whether `expected` is `value` or anywhere inside it (a JSON body)."""
    if value == expected:
        return True
    if isinstance(value, dict):
        return any(holds(item, expected) for item in value.values())
    if isinstance(value, list):
        return any(holds(item, expected) for item in value)
    return False


def dm(feishu, bot: Bot, *, message_type: str, content: dict, message_id: str = "") -> str:
    message_id = message_id or "om_" + secrets.token_hex(8)
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=message_id,
        chat_id="oc_dm",
        chat_type="p2p",
        text="",
        sender_open_id="ou_alice",
        message_type=message_type,
        content=content,
    )
    feishu.post(bot, payload)
    return message_id


def post_with_image(text: str, image_key: str) -> dict:
    return {"title": "", "content": [[{"tag": "text", "text": text}, {"tag": "img", "image_key": image_key}]]}


@pytest.fixture
def chat_bot(make_feishu_bot, llm_stub):
    """A Feishu bot whose primary is an OpenAI chat model at the stub, without vision unless asked."""

    def make(*, vision: bool = False, api: str = "openai_chat") -> Bot:
        model = model_for(api, llm_stub)
        model.supports_vision = vision
        model.save(update_fields=["supports_vision"])
        return make_feishu_bot(primary_model=model)

    return make


def sent_user_text(api_body: dict) -> str:
    """The text parts of an OpenAI chat request's last user message."""
    content = [message for message in api_body["messages"] if message["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def no_column_holds(*needles: str) -> None:
    """No row of any table of the hub holds any of `needles` (the resources' bodies, in any encoding)."""
    for model in apps.get_models():
        if not model._meta.managed or model._meta.proxy:
            continue
        for row in model.objects.all().values():
            dumped = json.dumps(row, default=str, ensure_ascii=False)
            for needle in needles:
                assert needle not in dumped, f"{model.__name__} {row.get('id')} holds a resource body"


@pytest.mark.parametrize("api", APIS)
def test_g7_a_vision_model_gets_the_image_in_its_apis_wire_format_and_nothing_stores_it(
    feishu, chat_bot, llm_stub, api
):
    # given: a vision model of each API; someone DMs a picture with a question (a post with an img tag)
    bot = chat_bot(vision=True, api=api)
    message_id = "om_pic_" + api
    feishu.stub.add_resource(message_id=message_id, file_key="img_v3_k", content=PNG, name="screenshot.png")
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="A red build badge.")))
    # when
    dm(feishu, bot, message_type="post", content=post_with_image("what is this? ", "img_v3_k"), message_id=message_id)
    # then: downloaded once as an image, sent as the API's own image part, answered
    [download] = feishu.stub.requests_to("resource")
    assert (download.path.rsplit("/", 1)[1], download.query) == ("img_v3_k", {"type": ["image"]})
    [sent] = llm_stub.requests_for(api)
    assert holds(sent.json, EXPECTED_IMAGE_PART[api])
    assert "what is this? [image]" in sent.body.decode()
    turn = Turn.objects.get(bot=bot)
    assert turn.status == "delivered"
    # the record shows the image by its label; no column of any table holds its bytes
    assert f"[image: screenshot.png, {len(PNG)} bytes]" in json.dumps(turn.model_input["request"])
    no_column_holds(PNG_B64, PNG_B64URL, "pixels-of-a-screenshot")


def test_g7_a_model_without_vision_gets_the_label_and_nothing_is_downloaded(feishu, chat_bot, llm_stub):
    # given
    bot = chat_bot(vision=False)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I cannot see images.")))
    # when
    dm(feishu, bot, message_type="image", content={"image_key": "img_v3_k"})
    # then
    assert feishu.stub.requests_to("resource") == []
    [sent] = llm_stub.requests_for("openai_chat")
    assert "image_url" not in sent.body.decode()
    assert sent_user_text(sent.json).endswith("[image]\n\n[image (not shown: this model does not read images)]")
    assert Turn.objects.get(bot=bot).status == "delivered"


def test_g7_a_text_file_is_inlined_as_an_untrusted_block_redacted_and_never_stored(feishu, chat_bot, llm_stub):
    # given: a CSV that also holds the bot's own app secret, pasted by mistake
    bot = chat_bot()
    body = FILE_BODY + f"secret={bot.feishu_app_secret}\n"
    message_id = dm_id = "om_csv"
    feishu.stub.add_resource(
        message_id=message_id,
        file_key="file_v3_csv",
        content=body.encode(),
        mime="application/octet-stream",
        resource_type="file",
        name="scores.csv",
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="bob leads.")))
    # when
    dm(
        feishu,
        bot,
        message_type="file",
        content={"file_key": "file_v3_csv", "file_name": "scores.csv"},
        message_id=dm_id,
    )
    # then: the model got the body in the untrusted block, the secret redacted
    [sent] = llm_stub.requests_for("openai_chat")
    text = sent_user_text(sent.json)
    assert f"{ATTACHMENTS_HEADER}\n{ATTACHMENTS_PREAMBLE}\n[file: scores.csv, " in text
    assert "alice,3\nbob,5" in text and "FILE-BODY-MARKER" in text
    assert bot.feishu_app_secret not in sent.body.decode()
    # the record keeps the label instead of the body; no table holds the body
    turn = Turn.objects.get(bot=bot)
    assert turn.status == "delivered"
    assert "(inlined for this call)]" in json.dumps(turn.model_input)
    no_column_holds("FILE-BODY-MARKER")


def test_g7_another_file_is_a_label_with_its_name_and_size_and_its_body_is_never_read(feishu, chat_bot, llm_stub):
    # given: a 64 MiB PDF, far more than the socket buffers hold
    bot = chat_bot()
    size = 64 * 1024 * 1024
    feishu.stub.add_resource(
        message_id="om_pdf", file_key="file_v3_pdf", content=b"%PDF" + b"\0" * (size - 4), resource_type="file"
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I see a PDF.")))
    # when
    dm(
        feishu,
        bot,
        message_type="file",
        content={"file_key": "file_v3_pdf", "file_name": "q3.pdf"},
        message_id="om_pdf",
    )
    # then
    [sent] = llm_stub.requests_for("openai_chat")
    assert "[file: q3.pdf, 64.0 MB (not read: only text files are inlined)]" in sent_user_text(sent.json)
    assert feishu.stub.resources[("om_pdf", "file_v3_pdf")]["bytes_written"] < size
    assert Turn.objects.get(bot=bot).status == "delivered"


@pytest.mark.parametrize(
    ("case", "expected_note"),
    [
        ("too_big", "[image: 1 KB (not sent: larger than the 1000 bytes limit)]"),
        ("refused_type", "[image: image 1, 30 bytes (not sent: image/gif is not an accepted image type)]"),
        ("not_an_image", "[image: image 1, 20 bytes (not sent: application/pdf is not an accepted image type)]"),
        ("download_failed", "[image (not sent: the download failed (Feishu code 234004))]"),
    ],
)
def test_g7_an_image_that_cannot_be_sent_is_a_label_saying_why_and_the_turn_still_answers(
    feishu, chat_bot, llm_stub, settings, case, expected_note
):
    # given: a vision model, and an image it cannot be given
    settings.FEISHU_ATTACHMENT_IMAGE_MAX_BYTES = 1000
    settings.FEISHU_ATTACHMENT_IMAGE_TYPES = ["image/png", "image/jpeg"]
    bot = chat_bot(vision=True)
    content = {
        "too_big": PNG[:8] + b"\0" * 1016,
        "refused_type": b"GIF89a" + b"\0" * 24,
        "not_an_image": b"%PDF-1.7" + b"\0" * 12,
        "download_failed": PNG,
    }[case]
    feishu.stub.add_resource(message_id="om_img", file_key="img_k", content=content, mime="application/pdf")
    if case == "download_failed":
        feishu.stub.fail_next("resource", status=400, code=234004, msg="resource not found")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Answered anyway.")))
    # when
    dm(feishu, bot, message_type="image", content={"image_key": "img_k"}, message_id="om_img")
    # then
    [sent] = llm_stub.requests_for("openai_chat")
    assert "image_url" not in sent.body.decode()
    assert expected_note in sent_user_text(sent.json)
    assert Turn.objects.get(bot=bot).status == "delivered"
    assert len(feishu.stub.sent) == 1


def test_g7_a_forward_is_read_online_and_inlined_with_its_messages(feishu, chat_bot, llm_stub):
    # given: a merge_forward of two messages (one of them a picture)
    bot = chat_bot()
    feishu.stub.add_forward(
        message_id="om_fwd",
        children=[
            {"message_id": "om_c1", "text": "the deploy failed at step 3", "sender_id": "ou_bob"},
            {"message_id": "om_c2", "msg_type": "image", "content": {"image_key": "img_x"}, "sender_id": "ou_carol"},
        ],
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Step 3 failed.")))
    # when
    dm(
        feishu,
        bot,
        message_type="merge_forward",
        content={"content": "Merged and Forwarded Message"},
        message_id="om_fwd",
    )
    # then
    [sent] = llm_stub.requests_for("openai_chat")
    text = sent_user_text(sent.json)
    assert "[forwarded messages: 2 messages]\nou_bob: the deploy failed at step 3\nou_carol: [image]" in text
    turn = Turn.objects.get(bot=bot)
    assert "the deploy failed" not in json.dumps(turn.model_input)
    assert turn.status == "delivered"


def test_g7_thread_context_keeps_the_label_of_an_earlier_picture_never_its_body(
    feishu, make_feishu_bot, chat_bot, llm_stub
):
    # given: a picture posted in a group without an @, then an @ in its topic asking about it
    bot = chat_bot(vision=True)
    picture = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_group_pic",
        chat_id="oc_team",
        text="",
        sender_open_id="ou_alice",
        message_type="image",
        content={"image_key": "img_g"},
    )
    feishu.stub.add_resource(message_id="om_group_pic", file_key="img_g", content=PNG)
    feishu.post(bot, picture)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="That is a badge.")))
    # when
    feishu.say(
        bot,
        text="what was that picture?",
        mention=[bot],
        chat_id="oc_team",
        sender="ou_alice",
        root_id="om_group_pic",
        thread_id="omt_pic",
    )
    # then: the picture is context as its label; its bytes were never read (it is not this turn's message)
    assert ThreadContextItem.objects.get(message_id="om_group_pic").text == "[image]"
    [sent] = llm_stub.requests_for("openai_chat")
    assert "[image]" in sent_user_text(sent.json)
    assert "image_url" not in sent.body.decode()
    assert feishu.stub.requests_to("resource") == []
