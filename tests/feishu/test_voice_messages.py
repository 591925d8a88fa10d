"""Voice messages (issue 26, H3), end to end: a signed Feishu event through the webhook, the voice downloaded from
the Feishu stub with the real client, transcribed through the real openai SDK at the LLM stub's
`/v1/audio/transcriptions` (which records the multipart upload), and the transcript reaching the primary model,
the discuss judge (the real anthropic SDK at the stub) and thread context as `[voice] <text>`. Without a
transcription model, or when the transcription fails, the message stays `[audio: N s]`, says why, and the turn
answers."""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Turn, VoiceTranscription
from feishu.discuss.fire import FIRE_STARTED
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.inbound.signing import message_event_payload
from feishu.models import DiscussWake
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.agents.test_llm_adapters import model_for
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from tests.probe.conftest import make_judge  # noqa: F401 - fixture
from tests.stubs.llm_audio import transcription_upload
from tests.stubs.llm_servers import NON_JSON_BODY, StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db

VOICE = b"OggS\x00\x02" + bytes(range(256)) * 8  # an Ogg page header, then bytes no text codec would keep intact
SAID = "please restart the staging worker"


def transcriber(llm_stub) -> object:
    provider = ProviderFactory(
        kind="openai_chat", base_url=llm_stub.url("/v1"), api_key="sk-voice-key", max_retries=0, timeout_seconds=5
    )
    return LLMModelFactory(provider=provider, name="whisper-1")


def send_voice(feishu, bot: Bot, *, message_id: str, chat_id: str = "oc_dm", chat_type: str = "p2p") -> None:
    feishu.stub.add_resource(
        message_id=message_id, file_key="file_v3_voice", content=VOICE, mime="audio/ogg", resource_type="file"
    )
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=message_id,
        chat_id=chat_id,
        chat_type=chat_type,
        text="",
        sender_open_id="ou_alice",
        message_type="audio",
        content={"file_key": "file_v3_voice", "duration": 4200},
    )
    assert feishu.post(bot, payload).status_code == 200


def user_text(request) -> str:
    content = [m for m in request.json["messages"] if m["role"] == "user"][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


@pytest.fixture
def voice_bot(make_feishu_bot, llm_stub):
    return make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), transcription_model=transcriber(llm_stub))


def test_h3_a_voice_message_is_transcribed_once_and_the_transcript_is_the_request(
    feishu, voice_bot, llm_stub, admin_client
):
    # given: the provider hears the voice, and the speaker happened to read out the bot's app secret
    llm_stub.enqueue("openai_audio", StubResponse(body={"text": f"{SAID} with {voice_bot.feishu_app_secret}"}))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Restarting it.")))
    # when: a voice DM
    send_voice(feishu, voice_bot, message_id="om_voice")
    # then: the provider received exactly the audio bytes, through the SDK's multipart upload, for whisper-1
    [upload_request] = llm_stub.requests_for("openai_audio")
    upload = transcription_upload(upload_request)
    assert upload.audio == VOICE and upload.fields["model"] == "whisper-1"
    assert upload_request.headers["authorization"] == "Bearer sk-voice-key"
    [download] = feishu.stub.requests_to("resource")
    assert download.query == {"type": ["file"]}
    # the model got the transcript as the message's text, labelled, the secret redacted
    [chat] = llm_stub.requests_for("openai_chat")
    sent = user_text(chat)
    assert f"[voice] {SAID} with" in sent and voice_bot.feishu_app_secret not in sent
    assert "[audio: 4 s (transcribed: the message text is what was said)]" in sent
    turn = Turn.objects.get(bot=voice_bot, source_message_id="om_voice")
    assert turn.status == "delivered"
    assert "(transcribed" in json.dumps(turn.model_input)  # explain shows what came of it
    # one row: the seconds counted for this bot, the audio itself stored nowhere
    row = VoiceTranscription.objects.get(bot=voice_bot, message_id="om_voice")
    assert (row.status, row.audio_seconds, row.audio_bytes, row.model_name) == (
        "transcribed",
        5,
        len(VOICE),
        "whisper-1",
    )
    assert voice_bot.feishu_app_secret not in row.text
    # the bot's page counts the seconds beside its cost; the admin lists the transcription
    page = admin_client.get(reverse("admin:agents_bot_change", args=[voice_bot.pk])).content.decode()
    assert 'data-voice="24h">5<' in page and "transcription_model" in page
    listing = admin_client.get(reverse("admin:agents_voicetranscription_changelist")).content.decode()
    assert "om_voice" in listing


def test_h3_without_a_transcription_model_the_voice_stays_a_label(feishu, make_feishu_bot, llm_stub):
    bot = make_feishu_bot(primary_model=model_for("openai_chat", llm_stub))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I cannot listen.")))

    send_voice(feishu, bot, message_id="om_voice_plain")

    assert feishu.stub.requests_to("resource") == [] and llm_stub.requests_for("openai_audio") == []
    [chat] = llm_stub.requests_for("openai_chat")
    assert "[audio: 4 s (not transcribed: this bot has no transcription model)]" in user_text(chat)
    assert "[voice]" not in user_text(chat)
    assert Turn.objects.get(bot=bot).status == "delivered"
    assert not VoiceTranscription.objects.exists()


@pytest.mark.parametrize(
    ("failure", "reason", "uploads"),
    [
        (StubResponse(status=500, body={"error": {"message": "boom sk-voice-key"}}), "answered HTTP 500", 1),
        (StubResponse(body=NON_JSON_BODY, content_type="text/html"), "returned no text", 1),
        ("FEISHU_VOICE_MAX_BYTES", "larger than the 100 bytes limit", 0),
        ("FEISHU_VOICE_MAX_SECONDS", "longer than the 3 s limit", 0),
    ],
    ids=["provider-500", "provider-not-json", "too-big", "too-long"],
)
def test_h3_a_failed_transcription_keeps_the_label_says_why_and_the_turn_answers(
    feishu, voice_bot, llm_stub, settings, caplog, admin_client, failure, reason, uploads
):
    if isinstance(failure, str):  # a cap: 100 bytes (the voice has more), 3 s (it lasts 4.2 s)
        setattr(settings, failure, 100 if failure.endswith("BYTES") else 3)
    else:
        llm_stub.enqueue("openai_audio", failure)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Sorry, say it again?")))

    send_voice(feishu, voice_bot, message_id="om_voice_bad")

    assert len(llm_stub.requests_for("openai_audio")) == uploads
    [chat] = llm_stub.requests_for("openai_chat")
    sent = user_text(chat)
    assert "[audio: 4 s (not transcribed: " in sent and reason in sent and "[voice]" not in sent
    turn = Turn.objects.get(bot=voice_bot)
    assert turn.status == "delivered" and reason in json.dumps(turn.model_input)
    explain = admin_client.get(reverse("admin:feishu_turn_explain", args=[turn.pk])).content.decode()
    assert 'id="explain-voice"' in explain and "Not transcribed" in explain and reason in explain
    row = VoiceTranscription.objects.get(bot=voice_bot)
    assert (row.status, row.audio_seconds, row.text) == ("failed", 0, "") and reason in row.reason
    assert "sk-voice-key" not in caplog.text and "sk-voice-key" not in row.reason


def test_h3_a_discuss_judge_and_thread_context_read_the_transcript(
    feishu, make_feishu_bot, make_judge, llm_stub, django_capture_on_commit_callbacks, admin_client
):
    # given: a discuss bot whose judge is Anthropic at the stub, in a group; the judge will say send
    bot = make_feishu_bot(
        name="Ops",
        primary_model=model_for("openai_chat", llm_stub),
        transcription_model=transcriber(llm_stub),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_ops")
    llm_stub.enqueue("openai_audio", StubResponse(body={"text": SAID}))
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "asks for ops"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="On it.")))
    # when: someone speaks in the group (no @), and the wake fires
    send_voice(feishu, bot, message_id="om_group_voice", chat_id="oc_ops", chat_type="group")
    assert llm_stub.requests_for("openai_audio") == []  # nothing is transcribed at intake
    item = ThreadContextItem.objects.get(message_id="om_group_voice")
    assert item.text == "[audio: 4 s]"
    with django_capture_on_commit_callbacks(execute=True):
        assert discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1)) == [FIRE_STARTED]
    # then: transcribed once (the wake), the judge read it as text, the turn answered it as text
    assert len(llm_stub.requests_for("openai_audio")) == 1
    [judge] = llm_stub.requests_for("anthropic")
    assert f"[voice] {SAID}" in judge.body.decode() and "[audio:" not in judge.body.decode()
    [chat] = llm_stub.requests_for("openai_chat")  # its last message is the activation contract (P9)
    assert f"[voice] {SAID}" in json.dumps(chat.json["messages"])
    assert Turn.objects.get(bot=bot).status == "delivered"
    # thread context keeps the transcript, for this and every later turn
    item.refresh_from_db()
    assert item.text == f"[voice] {SAID}"
    assert set(ThreadEvent.objects.filter(message_id="om_group_voice").values_list("text", flat=True)) == {
        f"[voice] {SAID}"
    }
    # explain of the wake says it was transcribed, and how long it was
    wake = DiscussWake.objects.get(bot=bot)
    explain = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk])).content.decode()
    assert "om_group_voice · Transcribed · 5 s" in explain
