"""`/context export` (K1): the current selection and the pins as a Markdown file sent to the chat.

The file is built now (the selector's package, as `/context show` sees it) and sent after the routing transaction
commits: uploaded with im.v1.file.create, then a `file` message replying to the command under a uuid fixed by
the command's message, so a redelivered command posts it once. A failed upload or send is logged and answered
with a short notice; nothing is stored.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.models import Bot
from feishu.commands.context import CommandReply, conversation_of, next_request_package
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.delivery import delivery_uuid, feishu_notice_send
from threadcontext.models import Workspace
from threadcontext.services.steering import context_pins_list
from threadcontext.trimming import ContextPackage

logger = logging.getLogger(__name__)

EXPORT_FAILED = _("I could not send the export file. Please try again later.")
EXPORT_PURPOSE = "command/context_export"


def context_export_markdown(
    *, package: ContextPackage, pins: list[tuple[int, str, str, str]], bot_name: str, when: str
) -> str:
    """The export's text (pure): the pins, then every item the next request would carry, in full, oldest first,
    then what is left out and why. English headings: a file is read by whoever opens it, not the bot's chat."""
    lines = [
        f"# Context of {bot_name}",
        "",
        f"- chat: `{package.chat_id}`, timeline: `{package.root_msg_id}`",
        f"- exported: {when}",
        f"- carried: {len(package.selected)} items, {package.diagnostics.get('context_chars', 0)} of "
        f"{package.diagnostics.get('max_chars', 0)} characters (at most {package.diagnostics.get('item_limit', 0)})",
        "",
        f"## Pins ({len(pins)})",
        "",
    ]
    lines += [f"- #{item_id} ({item_type}, {source}): {text}" for item_id, item_type, source, text in pins] or ["-"]
    lines += ["", f"## Carried by the next request ({len(package.selected)})", ""]
    for item in package.selected:
        marker = " · pinned" if item.pinned else ""
        lines += [f"### #{item.id} · {item.item_type} · {item.source}{marker}", "", item.text, ""]
    if package.excluded:
        lines += [f"## Left out ({len(package.excluded)})", ""]
        lines += [f"- #{item.id} ({item.item_type}, {item.source}): {item.reason}" for item in package.excluded]
    return "\n".join(lines).rstrip() + "\n"


def _export_deliver(*, bot: Bot, parsed: ParsedMessage, file_name: str, markdown: str) -> None:
    """Upload and send (runs after commit: no transaction is held across Feishu calls)."""
    try:
        file_key = feishu_sends.file_upload(bot=bot, file_name=file_name, content=markdown.encode())
        feishu_sends.message_reply_content(
            bot=bot,
            message_id=parsed.message_id,
            msg_type="file",
            content={"file_key": file_key},
            uuid=delivery_uuid(bot=bot, source_message_id=parsed.message_id, purpose=EXPORT_PURPOSE, chunk_index=0),
            reply_in_thread=parsed.is_in_topic,
        )
    except FeishuApiError as error:
        logger.warning("context export not delivered", extra={"bot": bot.slug, "code": error.code})
        feishu_notice_send(
            bot=bot,
            chat_id=parsed.chat_id,
            reply_to_message_id=parsed.message_id,
            reply_in_thread=parsed.is_in_topic,
            text=EXPORT_FAILED,
            purpose=EXPORT_PURPOSE + "_failed",
        )
        return
    logger.info("context export sent", extra={"bot": bot.slug, "chars": len(markdown)})


def context_export_send(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None) -> CommandReply:
    """Build the export now and send it once the caller's transaction commits; the file is the reply."""
    package = next_request_package(bot=bot, parsed=parsed, workspace=workspace)
    pins = [
        (pin.item.pk, pin.item.item_type, pin.item.author_label or pin.item.bridge_id, pin.item.text)
        for pin in context_pins_list(conversation=conversation_of(bot=bot, parsed=parsed))
    ]
    now = timezone.now()
    markdown = context_export_markdown(
        package=package, pins=pins, bot_name=bot.name, when=now.isoformat(timespec="seconds")
    )
    file_name = f"context-{bot.slug}-{now:%Y%m%d-%H%M%S}.md"
    transaction.on_commit(lambda: _export_deliver(bot=bot, parsed=parsed, file_name=file_name, markdown=markdown))
    return CommandReply(text="")
