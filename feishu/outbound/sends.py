"""What the bridge posts in a chat through lark-oapi: replies and new messages of any msg_type, and reactions.

A message goes out as text `{"text"}`, post `{"zh_cn": ...}` or interactive (a card JSON, or a CardKit card
by reference: feishu/outbound/cardkit.py), always with the caller's `uuid`, so Feishu itself drops a second send
of the same message (F3). A reaction is the receipt of R1. Each call goes through `feishu_call`
(feishu/outbound/client.py): its retries, its token refresh and, with `budget`, the send budget (R4).

Imports lark-oapi at its top: registered as a lazy module in feishu/__init__.py (LARK_MODULES).
"""

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.models import Bot
from feishu.outbound import client as feishu_client
from feishu.outbound.budget import SendBudget
from feishu.outbound.sdk import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    thread_id: str = ""


def message_reply_content(
    *,
    bot: Bot,
    message_id: str,
    msg_type: str,
    content: dict[str, Any],
    uuid: str,
    reply_in_thread: bool,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    """Reply with any msg_type: text `{"text"}`, post `{"zh_cn": ...}`, interactive (card JSON or reference)."""
    body = (
        ReplyMessageRequestBody.builder()
        .content(json.dumps(content, ensure_ascii=False))
        .msg_type(msg_type)
        .reply_in_thread(reply_in_thread)
        .uuid(uuid)
        .build()
    )
    request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
    response = feishu_client.feishu_call(
        bot=bot,
        operation="message.reply",
        call=lambda client: client.im.v1.message.reply(request),
        sleep=sleep,
        budget=budget,
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def receive_id_type_of(receive_id: str) -> str:
    """Feishu's ids say what they name by their prefix: `ou_` a person (open_id), `oc_` a chat. A message to a
    person is created with receive_id_type open_id; anything else is a chat, as before."""
    return "open_id" if receive_id.startswith("ou_") else "chat_id"


def message_create_content(
    *,
    bot: Bot,
    chat_id: str,
    msg_type: str,
    content: dict[str, Any],
    uuid: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    """A new message of any msg_type in a chat (an automation's post: it answers no message), or to a person
    directly: `chat_id` may be an open_id (a stopped schedule's line to its creator, U4)."""
    body = (
        CreateMessageRequestBody.builder()
        .receive_id(chat_id)
        .msg_type(msg_type)
        .content(json.dumps(content, ensure_ascii=False))
        .uuid(uuid)
        .build()
    )
    request = CreateMessageRequest.builder().receive_id_type(receive_id_type_of(chat_id)).request_body(body).build()
    response = feishu_client.feishu_call(
        bot=bot,
        operation="message.create",
        call=lambda client: client.im.v1.message.create(request),
        sleep=sleep,
        budget=budget,
    )
    return SentMessage(message_id=response.data.message_id or "", thread_id=response.data.thread_id or "")


def file_upload(*, bot: Bot, file_name: str, content: bytes) -> str:
    """Upload a file (im.v1.file.create, `stream` type) and return its file_key, for a `file` message (issue 25:
    /context export). Not a send: no budget; an upload repeated by a retry only leaves an unused file behind."""

    def upload(client: Any) -> Any:
        # A fresh request per attempt: the SDK turns the body into a multipart stream that one attempt consumes.
        body = (
            CreateFileRequestBody.builder().file_type("stream").file_name(file_name).file(io.BytesIO(content)).build()
        )
        return client.im.v1.file.create(CreateFileRequest.builder().request_body(body).build())

    response = feishu_client.feishu_call(bot=bot, operation="file.create", call=upload)
    return str(response.data.file_key or "")


def message_card_patch(
    *, bot: Bot, message_id: str, card: dict[str, Any], sleep: Callable[[float], None] | None = None
) -> None:
    """Replace a sent card message's content (`im.v1.message.patch`): the approval card shows its decision."""
    body = PatchMessageRequestBody.builder().content(json.dumps(card, ensure_ascii=False)).build()
    request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
    feishu_client.feishu_call(
        bot=bot, operation="message.patch", call=lambda client: client.im.v1.message.patch(request), sleep=sleep
    )


def message_reply(
    *,
    bot: Bot,
    message_id: str,
    text: str,
    uuid: str,
    reply_in_thread: bool,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    return message_reply_content(
        bot=bot,
        message_id=message_id,
        msg_type="text",
        content={"text": text},
        uuid=uuid,
        reply_in_thread=reply_in_thread,
        sleep=sleep,
        budget=budget,
    )


def message_create(
    *,
    bot: Bot,
    chat_id: str,
    text: str,
    uuid: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> SentMessage:
    return message_create_content(
        bot=bot, chat_id=chat_id, msg_type="text", content={"text": text}, uuid=uuid, sleep=sleep, budget=budget
    )


def reaction_create(
    *,
    bot: Bot,
    message_id: str,
    emoji_type: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> str:
    """Add a reaction (R1 receipt) -> reaction_id, which `reaction_delete` needs."""
    body = (
        CreateMessageReactionRequestBody.builder().reaction_type(Emoji.builder().emoji_type(emoji_type).build()).build()
    )
    request = CreateMessageReactionRequest.builder().message_id(message_id).request_body(body).build()
    response = feishu_client.feishu_call(
        bot=bot,
        operation="reaction.create",
        call=lambda client: client.im.v1.message_reaction.create(request),
        sleep=sleep,
        budget=budget,
    )
    return str(response.data.reaction_id or "")


def reaction_delete(
    *,
    bot: Bot,
    message_id: str,
    reaction_id: str,
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    request = DeleteMessageReactionRequest.builder().message_id(message_id).reaction_id(reaction_id).build()
    feishu_client.feishu_call(
        bot=bot,
        operation="reaction.delete",
        call=lambda client: client.im.v1.message_reaction.delete(request),
        sleep=sleep,
        budget=budget,
    )
