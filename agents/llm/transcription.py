"""Speech to text through the official `openai` SDK (`client.audio.transcriptions.create`), issue 26 H3.

Any OpenAI-compatible provider with an audio transcription endpoint (`POST {base_url}/audio/transcriptions`,
multipart) works: OpenAI's whisper-1 / gpt-4o-transcribe, a local whisper server, a gateway. The SDK client is
the one the chat adapter builds (same key, base URL, timeout and retries). A failure is a `TranscriptionFailed`
whose reason is a short sentence built from the status code or the failure's kind, never the provider's text
(a gateway may quote the key it refused).
"""

from agents.llm.openai_client import openai_client
from agents.llm.settings import ProviderSettings


class TranscriptionFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def audio_transcribe(*, settings: ProviderSettings, model: str, audio: bytes, filename: str) -> str:
    """The transcript of `audio` (stripped); raises TranscriptionFailed with a reason people can read."""
    # Imported on first use, as agents.llm.registry does with the adapters: the openai SDK costs 1-3 s of CPU to
    # import, and commands and web processes that never transcribe must not pay it (tests/test_startup.py).
    import openai

    client = openai_client(settings)
    try:
        result = client.audio.transcriptions.create(model=model, file=(filename, audio), response_format="json")
    except openai.APIStatusError as error:
        raise TranscriptionFailed(f"the transcription provider answered HTTP {error.status_code}") from None
    except openai.APITimeoutError:
        raise TranscriptionFailed("the transcription provider did not answer in time") from None
    except openai.APIConnectionError:
        raise TranscriptionFailed("the transcription provider could not be reached") from None
    except openai.OpenAIError as error:  # e.g. a body that is not JSON
        raise TranscriptionFailed(
            f"the transcription provider's answer was unusable ({type(error).__name__})"
        ) from None
    text = (getattr(result, "text", "") or "").strip()
    if not text:
        raise TranscriptionFailed("the transcription provider returned no text")
    return text
