"""Feishu's event envelope crypto, from the sender's side: what Feishu does before it POSTs an event.

The hub never needs this to receive events (lark-oapi decrypts and verifies); `feishu_simulate`, the tests
and the webhook benchmark use it to produce requests exactly as Feishu signs and encrypts them:
AES-256-CBC with key = SHA256(encrypt_key), PKCS7, a random IV prefixed, base64; signature =
sha256_hex(timestamp + nonce + encrypt_key + raw body).
"""

import base64
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

HEADER_TIMESTAMP = "X-Lark-Request-Timestamp"
HEADER_NONCE = "X-Lark-Request-Nonce"
HEADER_SIGNATURE = "X-Lark-Signature"


@dataclass(frozen=True)
class SignedRequest:
    body: bytes
    headers: dict[str, str]

    def django_headers(self) -> dict[str, str]:
        """The same headers as Django's test client wants them (HTTP_X_LARK_...)."""
        return {"HTTP_" + name.upper().replace("-", "_"): value for name, value in self.headers.items()}


def event_encrypt(*, plaintext: str, encrypt_key: str) -> str:
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext.encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def event_decrypt(*, encrypted: str, encrypt_key: str) -> str:
    key = hashlib.sha256(encrypt_key.encode()).digest()
    raw = base64.b64decode(encrypted)
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return (unpadder.update(padded) + unpadder.finalize()).decode()


def event_signature(*, timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def event_request_build(
    *,
    payload: dict[str, Any],
    encrypt_key: str,
    encrypt: bool = True,
    timestamp: int | None = None,
    nonce: str | None = None,
) -> SignedRequest:
    """Body and headers of one Feishu push: encrypted when an encrypt key is set, always signed with it."""
    plaintext = json.dumps(payload, ensure_ascii=False)
    if encrypt and encrypt_key:
        body = json.dumps({"encrypt": event_encrypt(plaintext=plaintext, encrypt_key=encrypt_key)}).encode()
    else:
        body = plaintext.encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)  # Unix seconds (F6)
    nonce = nonce or secrets.token_hex(8)
    headers = {HEADER_TIMESTAMP: stamp, HEADER_NONCE: nonce, "Content-Type": "application/json"}
    if encrypt_key:
        headers[HEADER_SIGNATURE] = event_signature(timestamp=stamp, nonce=nonce, encrypt_key=encrypt_key, body=body)
    return SignedRequest(body=body, headers=headers)


def message_event_payload(
    *,
    verification_token: str,
    app_id: str,
    message_id: str,
    chat_id: str,
    text: str,
    sender_open_id: str = "ou_user_1",
    sender_type: str = "user",
    chat_type: str = "group",
    root_id: str = "",
    parent_id: str = "",
    thread_id: str = "",
    mentions: list[dict[str, Any]] | None = None,
    event_id: str | None = None,
    message_type: str = "text",
    content: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An `im.message.receive_v1` schema-2.0 payload in Feishu's shape (reference doc §2.1)."""
    now_ms = str(int(time.time() * 1000))
    message: dict[str, Any] = {
        "message_id": message_id,
        "create_time": now_ms,
        "update_time": now_ms,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": message_type,
        "content": json.dumps(content if content is not None else {"text": text}, ensure_ascii=False),
    }
    if root_id:
        message["root_id"] = root_id
    if parent_id:
        message["parent_id"] = parent_id
    if thread_id:
        message["thread_id"] = thread_id
    if mentions:
        message["mentions"] = mentions
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or secrets.token_hex(16),
            "event_type": "im.message.receive_v1",
            "create_time": now_ms,
            "token": verification_token,
            "app_id": app_id,
            "tenant_key": "tenant_local",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": sender_open_id, "union_id": "on_" + sender_open_id, "user_id": ""},
                "sender_type": sender_type,
                "tenant_key": "tenant_local",
            },
            "message": message,
        },
    }


def mention_entry(*, index: int, open_id: str, name: str) -> dict[str, Any]:
    """One `mentions[]` entry of a receive event; the text carries its key `@_user_<index>`."""
    return {
        "key": f"@_user_{index}",
        "id": {"open_id": open_id, "union_id": "on_" + open_id, "user_id": ""},
        "name": name,
        "tenant_key": "tenant_local",
    }
