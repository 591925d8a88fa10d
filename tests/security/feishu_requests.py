"""Webhook requests built from raw plaintext, for hostile bodies the fixture helpers cannot express.

`FeishuHarness.post` serializes a dict with ensure_ascii=False, which cannot carry an unpaired surrogate and
cannot nest a body 1,000 deep without recursing; these helpers sign and encrypt exactly as Feishu does
(feishu.inbound.signing) but take the plaintext as text, so `"\\ud800"` stays a JSON escape on the wire.
"""

import json
import secrets
import time
from typing import Any

from django.test import TestCase

from agents.models import Bot
from feishu.inbound.signing import (
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    SignedRequest,
    event_encrypt,
    event_signature,
)


def signed_request(*, plaintext: str, encrypt_key: str, encrypt: bool = True) -> SignedRequest:
    """Feishu's push of `plaintext`: encrypted with `encrypt_key` when asked, signed with it when it is set."""
    if encrypt and encrypt_key:
        body = json.dumps({"encrypt": event_encrypt(plaintext=plaintext, encrypt_key=encrypt_key)}).encode()
    else:
        body = plaintext.encode("utf-8", "surrogatepass")
    stamp, nonce = str(int(time.time())), secrets.token_hex(8)
    headers = {HEADER_TIMESTAMP: stamp, HEADER_NONCE: nonce, "Content-Type": "application/json"}
    if encrypt_key:
        headers[HEADER_SIGNATURE] = event_signature(timestamp=stamp, nonce=nonce, encrypt_key=encrypt_key, body=body)
    return SignedRequest(body=body, headers=headers)


def post_signed(client, bot: Bot, *, plaintext: str, encrypt: bool = True, drop_headers: tuple[str, ...] = ()):
    """POST `plaintext` to `bot`'s webhook, signed (and encrypted) with its key; on-commit work runs at once."""
    request = signed_request(plaintext=plaintext, encrypt_key=bot.feishu_encrypt_key, encrypt=encrypt)
    headers = {
        key: value
        for key, value in request.django_headers().items()
        if key != "HTTP_CONTENT_TYPE" and key not in drop_headers
    }
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(
            f"/feishu/webhook/{bot.slug}/", data=request.body, content_type="application/json", **headers
        )


def ascii_json(payload: dict[str, Any]) -> str:
    """JSON with every non-ASCII character escaped: how an unpaired surrogate travels (`\\ud800`)."""
    return json.dumps(payload, ensure_ascii=True)


def nested_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth
