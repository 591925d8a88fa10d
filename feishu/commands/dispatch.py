"""Routing's one entry for a chat command (K1): parse, check who may run it, run it, answer once.

The answer is a bridge notice (its uuid fixed by the command's message: a redelivered event answers once), in the
bot's language; nothing here starts a turn or records context.
"""

from __future__ import annotations

import logging

from django.utils import translation

from agents.models import Bot
from feishu.channel.sessions import session_retire
from feishu.commands import texts
from feishu.commands.context import CommandReply, context_command_run
from feishu.commands.exports import context_export_send
from feishu.commands.grammar import CONTEXT_EXPORT, chat_command_parse
from feishu.commands.permissions import command_permission
from feishu.commands.schedules import schedule_command_run
from feishu.inbound.messages import NEW_SESSION_TEXT
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound.delivery import feishu_notice_send
from threadcontext.models import Workspace

logger = logging.getLogger(__name__)


def _reply_for(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None) -> CommandReply:
    command = chat_command_parse(parsed.text_without_mention_keys())
    permission = command_permission(workspace=workspace, principal=parsed.principal)
    if command.word == "/new":
        session_retire(bot=bot, parsed=parsed)
        return CommandReply(str(NEW_SESSION_TEXT))
    if command.word == "/help":
        return CommandReply(texts.help_text(permission=permission))
    if not command.is_known:
        return CommandReply(str(texts.UNKNOWN_COMMAND))
    if not permission.allowed:
        logger.info("chat command refused", extra={"bot": bot.slug, "command": command.name, "who": permission.who})
        return CommandReply(texts.refusal_text(permission=permission, command=command.word))
    if command.word == "/context" and command.action == CONTEXT_EXPORT and not parsed.is_direct:
        return context_export_send(bot=bot, parsed=parsed, workspace=workspace)
    if command.word == "/context":
        return context_command_run(bot=bot, parsed=parsed, workspace=workspace, command=command)
    return schedule_command_run(bot=bot, parsed=parsed, workspace=workspace, command=command)


def chat_command_handle(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None) -> None:
    """Answer one command addressed to the bot with one short reply (a card for `/context show`, a file for
    `/context export`)."""
    with translation.override(bot.language):
        reply = _reply_for(bot=bot, parsed=parsed, workspace=workspace)
    command = chat_command_parse(parsed.text_without_mention_keys())
    if not reply.text:  # the command sends its own answer (the export's file)
        logger.info("chat command answered", extra={"bot": bot.slug, "command": command.name})
        return
    feishu_notice_send(
        bot=bot,
        chat_id=parsed.chat_id,
        reply_to_message_id=parsed.message_id,
        reply_in_thread=parsed.is_in_topic,
        text=reply.text,
        reply_format=reply.reply_format,
        purpose="command" + command.name.replace(" ", "_"),
    )
    logger.info("chat command answered", extra={"bot": bot.slug, "command": command.name})
