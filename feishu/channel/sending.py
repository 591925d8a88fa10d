"""What the Feishu channels share to send a turn's answer: the bot's reply format, and Feishu's refusal mapped to
the runner's delivery outcomes."""

from collections.abc import Callable
from typing import TypeVar

from agents.models import Bot
from agents.secrets import upstream_error_redacted
from agents.services.turns import DeliveryPermanent, DeliveryRetryable
from feishu.models import OutboundDelivery
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.cards import ReplyFormat
from feishu.outbound.delivery import deliveries_send

_Sent = TypeVar("_Sent")


def bot_reply_format(bot: Bot) -> ReplyFormat:
    """The bot's stored format as the outbound code names it (the column's choices are these two values)."""
    return "text" if bot.reply_format == "text" else "markdown_card"


def rows_send(*, rows: list[OutboundDelivery]) -> list[OutboundDelivery]:
    return delivery_finished(lambda: deliveries_send(deliveries=rows))


def delivery_finished(send: Callable[[], _Sent]) -> _Sent:
    """Run a delivery; Feishu's refusal becomes the runner's DeliveryRetryable (429, 5xx) or DeliveryPermanent."""
    try:
        return send()
    except FeishuApiError as error:
        reason = upstream_error_redacted(f"{error.code} {error.message}")  # the turn's error is stored and shown
        if error.is_retryable:
            raise DeliveryRetryable(reason) from error
        raise DeliveryPermanent(reason) from error
