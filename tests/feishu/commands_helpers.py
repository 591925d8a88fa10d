"""Shared by the chat-command tests (issue 25): the texts a bot answers, as that bot says them."""

from django.utils import translation

from agents.models import Bot
from feishu.commands.permissions import CommandPermission
from feishu.commands.texts import help_text


def full_help(bot: Bot) -> str:
    """/help for someone who may run every command (a shared workspace, or a DM)."""
    with translation.override(bot.language):
        return help_text(permission=CommandPermission(allowed=True, who="anyone"))
