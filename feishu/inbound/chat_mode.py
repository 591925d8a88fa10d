"""G1: a group's chat mode (topic group or not), read once per workspace and noted on each stored message."""

import logging

from agents.models import Bot
from feishu.inbound.parsing import HUB_ANNOTATIONS_KEY
from feishu.outbound import reads as feishu_reads
from feishu.outbound.api_errors import FeishuApiError
from threadcontext.selectors import workspace_cached_get
from threadcontext.services import workspace_chat_mode_is_due, workspace_chat_mode_store, workspace_ensure

logger = logging.getLogger(__name__)


def chat_mode_annotate(*, bot: Bot, payload: dict) -> dict:
    """G1: ensure the group's workspace and its chat mode (im.v1.chat.get, read once), and note on the stored
    payload whether every message there is a topic, so routing, the wake and the turn key one timeline alike.

    Makes HTTP calls: run it outside any transaction. Returns the payload (annotated when the mode is known).
    """
    event = payload.get("event")
    message = event.get("message") if isinstance(event, dict) else None
    if not isinstance(message, dict) or message.get("chat_type") != "group" or not message.get("chat_id"):
        return payload
    chat_id = str(message["chat_id"])
    workspace = workspace_cached_get(bot_profile=bot.slug, chat_id=chat_id)
    if workspace is None:
        workspace, _ = workspace_ensure(bot_profile=bot.slug, chat_id=chat_id)
    if bot.has_feishu_credentials and workspace_chat_mode_is_due(workspace=workspace):
        try:
            info = feishu_reads.chat_get(bot=bot, chat_id=chat_id)
        except FeishuApiError as error:
            logger.warning(
                "feishu chat mode unreadable", extra={"bot": bot.slug, "chat_id": chat_id, "code": error.code}
            )
            workspace_chat_mode_store(workspace=workspace, chat_mode="", group_message_type="")
        else:
            workspace = workspace_chat_mode_store(
                workspace=workspace,
                chat_mode=info.chat_mode,
                group_message_type=info.group_message_type,
                name=info.name,
            )
    if not workspace.is_chat_mode_known:
        return payload
    earlier = payload.get(HUB_ANNOTATIONS_KEY)  # a catch-up's marks (feishu.inbound.catchup) stay
    return {
        **payload,
        HUB_ANNOTATIONS_KEY: {
            **(earlier if isinstance(earlier, dict) else {}),
            "chat_is_topic": workspace.is_topic_chat,
        },
    }
