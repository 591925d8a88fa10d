"""Issue 26 (H3): reading what the openai SDK uploaded to the LLM stub's `/v1/audio/transcriptions` (multipart).

The stub records every request's raw body (tests.stubs.llm_servers); `transcription_upload` parses one with the
standard library's MIME parser into the file's name and bytes and the form's other fields (model, ...).
"""

from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP

from tests.stubs.llm_servers import RecordedRequest


@dataclass(frozen=True)
class TranscriptionUpload:
    filename: str
    audio: bytes
    fields: dict[str, str]


def transcription_upload(request: RecordedRequest) -> TranscriptionUpload:
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + request.body)
    assert message.is_multipart(), "a transcription request is multipart/form-data"
    filename, audio, fields = "", b"", {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if name == "file":
            filename, audio = part.get_filename() or "", payload
        else:
            fields[str(name)] = payload.decode()
    return TranscriptionUpload(filename=filename, audio=audio, fields=fields)
