"""Card button presses (`card.action.trigger`, H1) as both intakes receive them, after lark-oapi verified them.

lark-oapi's own card action handling is registered on the bot's handler (`webhook.event_handler_build`): the
webhook captures the press and its view answers it; the long connection answers it on the SDK's loop with what
`answer(event)` (the database thread) returns. The answer is feishu.channel.approvals's: a toast and the card.
"""

import contextvars
import json
from collections.abc import Callable
from typing import Any

from agents.models import Bot
from core.text import storable_json
from feishu.outbound.sdk import JSON, P2CardActionTrigger, P2CardActionTriggerResponse

FOREIGN_ANSWER = {"toast": {"type": "error", "content": "Not this bot's card."}}

captured_card: contextvars.ContextVar[P2CardActionTrigger | None] = contextvars.ContextVar(
    "feishu_captured_card", default=None
)


def card_capture(data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
    """The webhook's card processor: keep the press for the view, which answers after its database work."""
    captured_card.set(data)
    return P2CardActionTriggerResponse()


def card_event_dict(data: P2CardActionTrigger) -> dict[str, Any]:
    """A press as the bridge reads it: the header without its token, the event (operator, action, context)."""
    header = data.header
    body = json.loads(JSON.marshal(data.event)) if data.event is not None else {}
    return storable_json(
        {
            "schema": "2.0",
            "header": {
                "event_id": header.event_id or "",
                "event_type": header.event_type or "",
                "app_id": header.app_id or "",
            },
            "event": body if isinstance(body, dict) else {},
        }
    )


def card_press_answer(
    *,
    bot: Bot,
    data: P2CardActionTrigger,
    app_matches: Callable[..., bool],
    answer: Callable[[dict[str, Any]], dict[str, Any]],
) -> P2CardActionTriggerResponse:
    """The long connection's card processor: another app's press is refused, ours answered by `answer`."""
    event = card_event_dict(data)
    if not app_matches(bot=bot, event=event):
        return P2CardActionTriggerResponse(FOREIGN_ANSWER)
    return P2CardActionTriggerResponse(answer(event))
