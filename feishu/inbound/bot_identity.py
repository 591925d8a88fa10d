"""The bot's own open_id (F6): how routing tells an @ of this bot from an @ of anyone else."""

import logging

from agents.models import Bot
from feishu.inbound.intake import bot_cache_forget
from feishu.outbound import reads as feishu_reads
from feishu.outbound.api_errors import FeishuApiError

logger = logging.getLogger(__name__)


def bot_open_id_ensure(*, bot: Bot) -> str:
    """The bot's own open_id (F6): read once from bot/v3/info and cached on the Bot row; "" when unknown."""
    if bot.feishu_bot_open_id or not bot.has_feishu_credentials:
        return bot.feishu_bot_open_id
    try:
        open_id = feishu_reads.bot_info_open_id(bot=bot)
    except FeishuApiError as error:
        logger.warning("feishu bot info unavailable", extra={"bot": bot.slug, "code": error.code})
        return ""
    if open_id:
        # update(): no updated_at bump, so the cached webhook handler and client stay valid; the intake worker's
        # cached row is dropped, so the next event reads the open_id instead of asking Feishu again.
        Bot.objects.filter(pk=bot.pk).update(feishu_bot_open_id=open_id)
        bot_cache_forget(bot_pk=bot.pk)
        bot.feishu_bot_open_id = open_id
    return open_id
