"""What the bridge reads from Feishu through lark-oapi: messages, a chat, the bot itself, a message's files.

- `message_items_get` / `message_get`: a message read back (a quoted message, a topic root, a forward's
  children) in the API's shape (`FetchedMessage`);
- `chat_get`: a group's name and whether it is a topic group (G1);
- `bot_info_open_id`: the bot's own open_id (F6), through the raw request path (the SDK has no typed call);
- `message_resource_get`: a message's image or file (G7), streamed by hand because the SDK reads the whole body
  into memory: a file over the caller's cap is refused unread.
Each call goes through `feishu_call` (feishu/outbound/client.py).

Imports lark-oapi at its top: registered as a lazy module in feishu/__init__.py (LARK_MODULES).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
from django.conf import settings

from agents.models import Bot
from feishu.outbound import client as feishu_client
from feishu.outbound.api_errors import FeishuApiError, ResourceTooLarge
from feishu.outbound.budget import SendBudget
from feishu.outbound.sandbox import MESSAGE_NOT_FOUND_CODE
from feishu.outbound.sdk import (
    AccessTokenType,
    BaseRequest,
    GetChatRequest,
    GetMessageRequest,
    HttpMethod,
    ListMessageRequest,
)


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
    upper_message_id: str = ""  # a merge_forward's child: the forward it belongs to


def message_items_get(
    *, bot: Bot, message_id: str, sleep: Callable[[float], None] | None = None
) -> list[FetchedMessage]:
    """Every item im.v1.message.get answers: the message itself, then, for a merge_forward, its children (each
    with `upper_message_id`, reference doc §4.5)."""
    request = GetMessageRequest.builder().message_id(message_id).build()
    response = feishu_client.feishu_call(
        bot=bot, operation="message.get", call=lambda client: client.im.v1.message.get(request), sleep=sleep
    )
    items = response.data.items or []
    if not items:
        raise FeishuApiError("message not found", code=230110)
    return [_fetched(item, message_id=message_id) for item in items]


def message_get(*, bot: Bot, message_id: str, sleep: Callable[[float], None] | None = None) -> FetchedMessage:
    return message_items_get(bot=bot, message_id=message_id, sleep=sleep)[0]


def _fetched(item: Any, *, message_id: str) -> FetchedMessage:
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
        upper_message_id=item.upper_message_id or "",
    )


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
    request = GetChatRequest.builder().chat_id(chat_id).build()
    response = feishu_client.feishu_call(
        bot=bot, operation="chat.get", call=lambda client: client.im.v1.chat.get(request), sleep=sleep
    )
    data = response.data
    return ChatInfo(
        name=(data.name if data else "") or "",
        chat_mode=(data.chat_mode if data else "") or "",
        group_message_type=(data.group_message_type if data else "") or "",
    )


def bot_info_open_id(*, bot: Bot, sleep: Callable[[float], None] | None = None) -> str:
    """`GET /open-apis/bot/v3/info` -> bot.open_id (F6); the SDK has no typed call for it."""
    return str(bot_info(bot=bot, sleep=sleep).get("open_id") or "")


def bot_info(*, bot: Bot, sleep: Callable[[float], None] | None = None) -> dict[str, Any]:
    """`GET /open-apis/bot/v3/info` -> its `bot` object (open_id, app_name, ...)."""
    request = (
        BaseRequest.builder()
        .http_method(HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({AccessTokenType.TENANT})
        .build()
    )

    def call(client: feishu_client.FeishuClient) -> Any:
        return feishu_client.RawResult(client.request(request))

    response = feishu_client.feishu_call(bot=bot, operation="bot.info", call=call, sleep=sleep)
    return dict(response.body.get("bot") or {})


# Feishu's resource download: the SDK reads the whole body into memory, so this one call streams by hand.
MESSAGE_RESOURCE_PATH = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
MESSAGE_RESOURCE_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class MessageResource:
    """A message's image or file, read at turn time (G7); never stored as bytes."""

    content: bytes
    name: str
    mime: str


def message_resource_get(
    *,
    bot: Bot,
    message_id: str,
    file_key: str,
    type: str,  # noqa: A002 - Feishu's own parameter name: "image" | "file"
    max_bytes: int,
    sleep: Callable[[float], None] | None = None,
) -> MessageResource:
    """Download a message's image or file, refusing one over `max_bytes` by its Content-Length or, when the
    length is absent or wrong, as soon as more than `max_bytes` have arrived (the rest is never read)."""
    if type not in ("image", "file"):
        raise ValueError(f"resource type must be image or file, not {type!r}")
    if bot.is_sandbox:  # this download bypasses the SDK's transport, so it refuses a sandbox bot itself
        raise FeishuApiError("a sandbox bot has no message resources", code=MESSAGE_NOT_FOUND_CODE)
    path = MESSAGE_RESOURCE_PATH.format(
        message_id=requests.utils.quote(message_id, safe=""), file_key=requests.utils.quote(file_key, safe="")
    )

    def call(client: feishu_client.FeishuClient) -> Any:
        token = client.tenant_token()
        response = requests.get(
            settings.FEISHU_DOMAIN.rstrip("/") + path,
            params={"type": type},
            headers={"Authorization": f"Bearer {token}"},
            stream=True,
            timeout=feishu_client.CLIENT_TIMEOUT_SECONDS,
        )
        return _StreamedResource(response, max_bytes=max_bytes)

    result = feishu_client.feishu_call(bot=bot, operation="message.resource", call=call, sleep=sleep)
    return result.resource


class _StreamedResource:
    """A resource download in the success()/code/msg/raw shape feishu_call reads; reads at most max_bytes + 1."""

    def __init__(self, response: requests.Response, *, max_bytes: int) -> None:
        self.raw = response
        self.code: int | None = 0
        self.msg = ""
        self.resource: MessageResource | None = None
        with response:
            mime = response.headers.get("Content-Type", "")
            if response.status_code >= 300 or mime.startswith("application/json"):
                try:
                    body = json.loads(response.raw.read(MESSAGE_RESOURCE_CHUNK_BYTES) or b"{}")
                except ValueError:
                    body = {}
                self.code = body.get("code") if isinstance(body, dict) else None
                self.msg = (body.get("msg") if isinstance(body, dict) else "") or f"HTTP {response.status_code}"
                if self.code in (0, None):
                    self.code = None  # an error without a Feishu code: transport-like, retryable
                return
            declared = response.headers.get("Content-Length")
            size = int(declared) if declared and declared.isdigit() else None
            if size is not None and size > max_bytes:
                raise ResourceTooLarge(size=size, max_bytes=max_bytes)
            chunks: list[bytes] = []
            received = 0
            for chunk in response.iter_content(MESSAGE_RESOURCE_CHUNK_BYTES):
                received += len(chunk)
                if received > max_bytes:
                    raise ResourceTooLarge(size=size, max_bytes=max_bytes)
                chunks.append(chunk)
            self.resource = MessageResource(
                content=b"".join(chunks), name=_file_name(response.headers), mime=mime.split(";")[0].strip()
            )

    def success(self) -> bool:
        return self.code == 0 and self.resource is not None


def _file_name(headers: Any) -> str:
    disposition = headers.get("Content-Disposition", "")
    for part in disposition.split(";"):
        name, _, value = part.strip().partition("=")
        if name.lower() == "filename":
            return value.strip().strip('"')
    return ""


# The list's page size: Feishu allows 50 per page.
MESSAGE_LIST_PAGE_SIZE = 50


def messages_list_page(
    *, bot: Bot, chat_id: str, start_time: int, end_time: int, page_token: str = ""
) -> tuple[list[Any], str]:
    """One page of `im.v1.message.list` for a chat (seconds, oldest first): its items and the next page's token
    ("" at the end). Issue 23 (D2): the catch-up reads what the hub missed with it."""
    builder = (
        ListMessageRequest.builder()
        .container_id_type("chat")
        .container_id(chat_id)
        .start_time(str(start_time))
        .end_time(str(end_time))
        .sort_type("ByCreateTimeAsc")
        .page_size(MESSAGE_LIST_PAGE_SIZE)
    )
    if page_token:
        builder = builder.page_token(page_token)
    request = builder.build()
    # Paced by the send budget's app share (R4; chat "" takes only the app's bucket): a catch-up of many chats
    # after an outage takes its turn with the replies instead of spending the app's rate ahead of them.
    response = feishu_client.feishu_call(
        bot=bot,
        operation="message.list",
        call=lambda client: client.im.v1.message.list(request),
        budget=SendBudget(chat_id=""),
    )
    data = response.data
    items = list(getattr(data, "items", None) or [])
    more = bool(getattr(data, "has_more", False))
    return items, (str(getattr(data, "page_token", "") or "") if more else "")
