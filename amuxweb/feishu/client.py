"""Outbound Feishu calls through lark-oapi: one client per bot, errors as values turned into our exceptions.

The SDK neither retries nor refreshes an expired token (reference doc §4.1); `feishu_call` does both:
rate limits (99991400 / HTTP 429 with `x-ogw-ratelimit-reset`, 230020) wait and retry, 99991663 / 99991661
drop the cached tenant token and retry once (F3). The domain is `settings.FEISHU_DOMAIN` (F4).
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lark_oapi as lark
from django.conf import settings
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetMessageRequest,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.model import BaseRequest
from lark_oapi.core.token.manager import TokenManager

from agents.models import Bot

logger = logging.getLogger(__name__)

RATE_LIMIT_CODES = frozenset({99991400, 230020, 11232, 11233, 1000004, 1000005})
TOKEN_EXPIRED_CODES = frozenset({99991663, 99991661})
MAX_CALL_ATTEMPTS = 4
# A rate-limit wait is capped so one worker is never parked for a whole minute; the task retries later.
MAX_RATE_LIMIT_WAIT_SECONDS = 10.0
DEFAULT_RATE_LIMIT_WAIT_SECONDS = 1.0
CLIENT_TIMEOUT_SECONDS = 10.0

_clients: dict[tuple[int, Any, str], lark.Client] = {}
_clients_lock = threading.Lock()


class FeishuApiError(Exception):
    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status

    @property
    def is_rate_limited(self) -> bool:
        return self.code in RATE_LIMIT_CODES or self.http_status == 429

    @property
    def is_retryable(self) -> bool:
        """A later try may succeed: rate limits, transport failures (no code), Feishu's own 5xx."""
        return self.is_rate_limited or self.code is None or (self.http_status or 0) >= 500


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    thread_id: str = ""


@dataclass(frozen=True)
class FetchedMessage:
    """One message read back with im.v1.message.get (API shape: msg_type, body.content, string mention ids)."""

    message_id: str
    msg_type: str
    content: dict[str, Any]
    sender_id: str = ""
    sender_type: str = ""
    root_id: str = ""
    parent_id: str = ""
    thread_id: str = ""
    mentions: list[dict[str, Any]] = field(default_factory=list)


def lark_client_get(*, bot: Bot) -> lark.Client:
    key = (bot.pk, bot.updated_at, settings.FEISHU_DOMAIN)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = (
                lark.Client.builder()
                .app_id(bot.feishu_app_id)
                .app_secret(bot.feishu_app_secret)
                .domain(settings.FEISHU_DOMAIN)
                .timeout(CLIENT_TIMEOUT_SECONDS)
                .log_level(lark.LogLevel.CRITICAL)  # feishu_call logs every failure itself, structured
                .build()
            )
            _clients[key] = client
    return client


def tenant_token_forget(*, bot: Bot) -> None:
    """Drop the SDK's process-wide cached tenant token so the next call fetches a fresh one."""
    cache = TokenManager.cache
    key = f"self_tenant_token:{bot.feishu_app_id}"
    store = getattr(cache, "cache", None)
    if isinstance(store, dict):
        store.pop(key, None)
    else:  # another ICache: expire the entry
        cache.set(key, "", 0)


def _response_error(response: Any) -> FeishuApiError:
    raw = getattr(response, "raw", None)
    return FeishuApiError(
        str(getattr(response, "msg", "") or "feishu call failed"),
        code=getattr(response, "code", None),
        http_status=getattr(raw, "status_code", None),
    )


def _rate_limit_wait(response: Any) -> float:
    raw = getattr(response, "raw", None)
    headers = getattr(raw, "headers", None) or {}
    value = None
    for name, header_value in headers.items():
        if name.lower() == "x-ogw-ratelimit-reset":
            value = header_value
    try:
        wait = float(value) if value is not None else DEFAULT_RATE_LIMIT_WAIT_SECONDS
    except ValueError:
        wait = DEFAULT_RATE_LIMIT_WAIT_SECONDS
    return max(0.0, min(wait, MAX_RATE_LIMIT_WAIT_SECONDS))


def feishu_call(
    *, bot: Bot, operation: str, call: Callable[[lark.Client], Any], sleep: Callable[[float], None] | None = None
) -> Any:
    """Run one SDK call with the bridge's retry policy; returns the successful response or raises."""
    sleep = sleep or time.sleep  # resolved per call so tests can patch time.sleep
    token_refreshed = False
    last_error: FeishuApiError | None = None
    for attempt in range(1, MAX_CALL_ATTEMPTS + 1):
        try:
            response = call(lark_client_get(bot=bot))
        except (OSError, ValueError) as error:  # connection refused, non-JSON body (HTML 502)
            last_error = FeishuApiError(f"{type(error).__name__}: {error}"[:300])
            logger.warning(
                "feishu call transport error", extra={"bot": bot.slug, "operation": operation, "attempt": attempt}
            )
            sleep(DEFAULT_RATE_LIMIT_WAIT_SECONDS)
            continue
        if response.success():
            return response
        last_error = _response_error(response)
        if last_error.is_rate_limited:
            wait = _rate_limit_wait(response)
            logger.warning(
                "feishu rate limited",
                extra={"bot": bot.slug, "operation": operation, "code": last_error.code, "wait_seconds": wait},
            )
            sleep(wait)
            continue
        if last_error.code in TOKEN_EXPIRED_CODES and not token_refreshed:
            logger.info("feishu token expired, refreshing", extra={"bot": bot.slug, "operation": operation})
            tenant_token_forget(bot=bot)
            token_refreshed = True
            continue
        break
    assert last_error is not None
    logger.warning(
        "feishu call failed",
        extra={"bot": bot.slug, "operation": operation, "code": last_error.code, "http_status": last_error.http_status},
    )
    raise last_error


def message_reply(
    *,
    bot: Bot,
    message_id: str,
    text: str,
    uuid: str,
    reply_in_thread: bool,
    sleep: Callable[[float], None] | None = None,
) -> SentMessage:
    body = (
        ReplyMessageRequestBody.builder()
        .content(json.dumps({"text": text}, ensure_ascii=False))
        .msg_type("text")
        .reply_in_thread(reply_in_thread)
        .uuid(uuid)
        .build()
    )
    request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
    response = feishu_call(
        bot=bot, operation="message.reply", call=lambda c: c.im.v1.message.reply(request), sleep=sleep
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def message_create(
    *, bot: Bot, chat_id: str, text: str, uuid: str, sleep: Callable[[float], None] | None = None
) -> SentMessage:
    body = (
        CreateMessageRequestBody.builder()
        .receive_id(chat_id)
        .msg_type("text")
        .content(json.dumps({"text": text}, ensure_ascii=False))
        .uuid(uuid)
        .build()
    )
    request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
    response = feishu_call(
        bot=bot, operation="message.create", call=lambda c: c.im.v1.message.create(request), sleep=sleep
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def message_get(*, bot: Bot, message_id: str, sleep: Callable[[float], None] | None = None) -> FetchedMessage:
    request = GetMessageRequest.builder().message_id(message_id).build()
    response = feishu_call(bot=bot, operation="message.get", call=lambda c: c.im.v1.message.get(request), sleep=sleep)
    items = response.data.items or []
    if not items:
        raise FeishuApiError("message not found", code=230110)
    item = items[0]
    try:
        content = json.loads(item.body.content) if item.body and item.body.content else {}
    except ValueError:
        content = {}
    sender = item.sender
    return FetchedMessage(
        message_id=item.message_id or message_id,
        msg_type=item.msg_type or "",
        content=content if isinstance(content, dict) else {},
        sender_id=(sender.id if sender else "") or "",
        sender_type=(sender.sender_type if sender else "") or "",
        root_id=item.root_id or "",
        parent_id=item.parent_id or "",
        thread_id=item.thread_id or "",
        mentions=[{"key": m.key, "id": m.id, "name": m.name} for m in (item.mentions or [])],
    )


def bot_info_open_id(*, bot: Bot, sleep: Callable[[float], None] | None = None) -> str:
    """`GET /open-apis/bot/v3/info` -> bot.open_id (F6); the SDK has no typed call for it."""
    request = (
        BaseRequest.builder()
        .http_method(HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({AccessTokenType.TENANT})
        .build()
    )

    def call(client: lark.Client) -> Any:
        return _RawResult(client.request(request))

    response = feishu_call(bot=bot, operation="bot.info", call=call, sleep=sleep)
    return str((response.body.get("bot") or {}).get("open_id") or "")


class _RawResult:
    """Adapts a raw BaseResponse (bytes content) to the success()/code/msg shape feishu_call reads."""

    def __init__(self, response: Any) -> None:
        self.raw = response.raw
        try:
            self.body = json.loads(response.raw.content or b"{}")
        except ValueError:
            self.body = {}
        self.code = self.body.get("code", getattr(response, "code", None))
        self.msg = self.body.get("msg", getattr(response, "msg", ""))

    def success(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class ChatInfo:
    """What `im.v1.chat.get` says about a group: its name and whether every message there is a topic (G1)."""

    name: str
    chat_mode: str  # "group" | "topic" | "p2p"
    group_message_type: str  # "chat" | "thread" ("" when Feishu does not say)

    @property
    def is_topic_chat(self) -> bool:
        """A topic group (chat_mode "topic") or a group in topic form (group_message_type "thread")."""
        return self.chat_mode == "topic" or self.group_message_type == "thread"


def chat_get(*, bot: Bot, chat_id: str, sleep: Callable[[float], None] | None = None) -> ChatInfo:
    """`GET /open-apis/im/v1/chats/{chat_id}`: the group's name and mode (G1); read once per workspace."""
    from lark_oapi.api.im.v1 import GetChatRequest

    request = GetChatRequest.builder().chat_id(chat_id).build()
    response = feishu_call(bot=bot, operation="chat.get", call=lambda c: c.im.v1.chat.get(request), sleep=sleep)
    data = response.data
    return ChatInfo(
        name=(data.name if data else "") or "",
        chat_mode=(data.chat_mode if data else "") or "",
        group_message_type=(data.group_message_type if data else "") or "",
    )
