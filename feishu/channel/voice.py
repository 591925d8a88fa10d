"""Voice messages (issue 26, H3): transcribed for a bot that has a transcription model, once per bot and message.

A voice message arrives as the parser's label `[audio: 12 s]` and a file_key. When the bot is about to act on it,
`voice_transcription_get` downloads it (`im.v1.message_resource.get`, type=file, at most FEISHU_VOICE_MAX_BYTES;
one longer than FEISHU_VOICE_MAX_SECONDS is not downloaded) and sends it to the bot's transcription model through
the openai SDK (agents.llm.transcription). Whatever comes of it is one VoiceTranscription row (bot, message): the
transcript (secrets redacted), or the reason it stays a label. On success this bridge's thread context says
`[voice] <transcript>` instead of the label (threadcontext.services.voice).

When: the turn's prepare (the message the bot answers: DM, reply, @ of a post with audio) and the discuss wake's
fire (every voice message of the wake, before the judge reads the transcript). A voice message the bot never acts
on stays a label in its history, so a busy group costs nothing until a bot is asked or wakes.
"""

import dataclasses
import logging
import math
from pathlib import PurePosixPath

from django.conf import settings
from django.db import IntegrityError

from agents.llm.registry import provider_settings
from agents.llm.transcription import TranscriptionFailed, audio_transcribe
from agents.models import Bot, VoiceTranscription
from agents.secrets import hub_secrets, upstream_error_redacted
from feishu.inbound.parsing import ATTACHMENT_AUDIO, Attachment, ParsedMessage, message_parse, size_text
from feishu.models import InboundEvent
from feishu.outbound import reads as feishu_reads
from feishu.outbound.api_errors import FeishuApiError, ResourceTooLarge
from threadcontext.services import secrets_redact, thread_context_voice_store, voice_text

logger = logging.getLogger(__name__)

# Why a voice message reached the model only as its label (in the prompt and the turn's record, so explain says it).
NOTE_TRANSCRIBED = "transcribed: the message text is what was said"
NOTE_NO_MODEL = "not transcribed: this bot has no transcription model"
NOTE_NO_CREDENTIALS = "not transcribed: the bot has no Feishu credentials to download it"
NOTE_TOO_LONG = "not transcribed: longer than the {limit} s limit"
NOTE_TOO_LARGE = "not transcribed: larger than the {limit} limit"
NOTE_DOWNLOAD_FAILED = "not transcribed: the download failed ({reason})"
NOTE_MODEL_UNUSABLE = "not transcribed: the transcription model is disabled or not on an OpenAI-compatible provider"
TRANSCRIBING_KINDS = ("openai_chat", "openai_responses")  # the providers the openai SDK speaks to
DEFAULT_FILENAME = "voice.ogg"  # Feishu's voice messages are Opus in an Ogg container


def voice_attachment(parsed: ParsedMessage) -> Attachment | None:
    return next((a for a in parsed.attachments if a.kind == ATTACHMENT_AUDIO and a.key), None)


def _seconds(attachment: Attachment) -> int:
    return math.ceil((attachment.duration_ms or 0) / 1000)


def voice_transcription_get(*, bot: Bot, parsed: ParsedMessage) -> VoiceTranscription | None:
    """The message's transcription by this bot, made now when there is none yet; None when the message holds no
    voice, the bot has no transcription model or no Feishu credentials (nothing to record: nothing was tried).

    Makes HTTP calls (Feishu, the provider): never inside a transaction.
    """
    audio = voice_attachment(parsed)
    model = bot.transcription_model
    if audio is None or model is None or not bot.has_feishu_credentials:
        return None
    stored = VoiceTranscription.objects.filter(bot=bot, message_id=parsed.message_id).first()
    if stored is not None:
        return stored
    fields = _transcribe(bot=bot, parsed=parsed, audio=audio)
    fields["model_name"] = model.name
    try:
        row, created = VoiceTranscription.objects.get_or_create(bot=bot, message_id=parsed.message_id, defaults=fields)
    except IntegrityError:  # another process stored it between our read and write: its row is the one
        row, created = VoiceTranscription.objects.get(bot=bot, message_id=parsed.message_id), False
    if created and row.status == VoiceTranscription.Status.TRANSCRIBED:
        thread_context_voice_store(
            bridge_id=bot.bridge_id, chat_id=parsed.chat_id, message_id=parsed.message_id, transcript=row.text
        )
    logger.info(
        "voice message transcribed" if row.status == VoiceTranscription.Status.TRANSCRIBED else "voice not transcribed",
        extra={"bot": bot.slug, "message_id": parsed.message_id, "seconds": row.audio_seconds, "reason": row.reason},
    )
    return row


def _failed(reason: str) -> dict:
    # The reasons are ours, built from codes; still the one redaction step for a stored upstream error text.
    return {"status": VoiceTranscription.Status.FAILED, "reason": upstream_error_redacted(reason, max_chars=300)}


def _transcribe(*, bot: Bot, parsed: ParsedMessage, audio: Attachment) -> dict:
    """The VoiceTranscription fields of one attempt: download within the caps, then the provider."""
    model = bot.transcription_model
    assert model is not None  # checked by the caller
    provider = model.provider
    if not (model.is_enabled and provider.is_enabled and provider.kind in TRANSCRIBING_KINDS):
        return _failed(NOTE_MODEL_UNUSABLE)
    if _seconds(audio) > settings.FEISHU_VOICE_MAX_SECONDS:
        return _failed(NOTE_TOO_LONG.format(limit=settings.FEISHU_VOICE_MAX_SECONDS))
    limit = settings.FEISHU_VOICE_MAX_BYTES
    try:
        resource = feishu_reads.message_resource_get(
            bot=bot, message_id=parsed.message_id, file_key=audio.key, type="file", max_bytes=limit
        )
    except ResourceTooLarge:
        return _failed(NOTE_TOO_LARGE.format(limit=size_text(limit)))
    except FeishuApiError as error:
        return _failed(NOTE_DOWNLOAD_FAILED.format(reason=f"Feishu code {error.code}" if error.code else "no answer"))
    name = resource.name if PurePosixPath(resource.name).suffix else DEFAULT_FILENAME
    try:
        transcript = audio_transcribe(
            settings=provider_settings(provider=provider), model=model.name, audio=resource.content, filename=name
        )
    except TranscriptionFailed as failure:
        return _failed(f"not transcribed: {failure.reason}") | {"audio_bytes": len(resource.content)}
    return {
        "status": VoiceTranscription.Status.TRANSCRIBED,
        "text": secrets_redact(transcript, hub_secrets(extra=bot.feishu_secrets)),
        "audio_seconds": _seconds(audio),
        "audio_bytes": len(resource.content),
    }


def voice_parsed(*, bot: Bot, parsed: ParsedMessage) -> ParsedMessage:
    """The message as the turn reads it: a transcribed voice message's text is `[voice] <transcript>`."""
    row = voice_transcription_get(bot=bot, parsed=parsed)
    if row is None or row.status != VoiceTranscription.Status.TRANSCRIBED:
        return parsed
    return dataclasses.replace(parsed, text=voice_text(row.text))


def voice_note(*, bot: Bot, parsed: ParsedMessage, attachment: Attachment) -> str:
    """The label of the message's voice with what came of it (the turn's attachments notes; explain shows it)."""
    if bot.transcription_model_id is None:
        return attachment.label(NOTE_NO_MODEL)
    row = voice_transcription_get(bot=bot, parsed=parsed)
    if row is None:
        return attachment.label(NOTE_NO_CREDENTIALS)
    return attachment.label(NOTE_TRANSCRIBED if row.status == VoiceTranscription.Status.TRANSCRIBED else row.reason)


def voice_wake_transcribe(*, bot: Bot, message_ids: list[str]) -> int:
    """Before the discuss judge reads the transcript: transcribe the wake's voice messages; how many were."""
    if bot.transcription_model_id is None or not message_ids:
        return 0
    done = 0
    for payload in InboundEvent.objects.filter(bot=bot, message_id__in=message_ids).values_list("payload", flat=True):
        parsed = message_parse(payload)
        if parsed is not None and voice_attachment(parsed) is not None:
            row = voice_transcription_get(bot=bot, parsed=parsed)
            done += int(row is not None and row.status == VoiceTranscription.Status.TRANSCRIBED)
    return done
