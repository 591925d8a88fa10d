"""CardKit calls through lark-oapi: create a JSON 2.0 card, change an element's text, change the card's settings.

A card created here is posted by reference (`card_reference` as the content of an `interactive` message,
feishu/outbound/sends.py) and then changed in place; this is how the streaming card (R3) writes an answer
while the model produces it. Feishu refuses an update whose `sequence` is not above the card's last one, so
the caller keeps the sequence (feishu/outbound/streaming.py stores it before each call). Each call goes through
`feishu_call` (feishu/outbound/client.py).

Imports lark-oapi at its top: registered as a lazy module in feishu/__init__.py (LARK_MODULES).
"""

import json
from collections.abc import Callable
from typing import Any

from agents.models import Bot
from feishu.outbound import client as feishu_client
from feishu.outbound.budget import SendBudget
from feishu.outbound.sdk import (
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
)


def card_reference(card_id: str) -> dict[str, Any]:
    """The `interactive` content that sends an existing CardKit card (what streaming updates then change)."""
    return {"type": "card", "data": {"card_id": card_id}}


def card_create(
    *, bot: Bot, card: dict[str, Any], sleep: Callable[[float], None] | None = None, budget: SendBudget | None = None
) -> str:
    """CardKit `card.create` of a JSON 2.0 card (streaming_mode in its config) -> card_id."""
    body = CreateCardRequestBody.builder().type("card_json").data(json.dumps(card, ensure_ascii=False)).build()
    request = CreateCardRequest.builder().request_body(body).build()
    response = feishu_client.feishu_call(
        bot=bot,
        operation="card.create",
        call=lambda client: client.cardkit.v1.card.create(request),
        sleep=sleep,
        budget=budget,
    )
    return str(response.data.card_id or "")


def card_element_content_update(
    *,
    bot: Bot,
    card_id: str,
    element_id: str,
    content: str,
    sequence: int,
    uuid: str = "",
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    """The streaming update: the element's full text; Feishu refuses a sequence not above the card's last."""
    builder = ContentCardElementRequestBody.builder().content(content).sequence(sequence)
    if uuid:
        builder = builder.uuid(uuid)
    request = (
        ContentCardElementRequest.builder()
        .card_id(card_id)
        .element_id(element_id)
        .request_body(builder.build())
        .build()
    )
    feishu_client.feishu_call(
        bot=bot,
        operation="card.element.content",
        call=lambda client: client.cardkit.v1.card_element.content(request),
        sleep=sleep,
        budget=budget,
    )


def card_settings_update(
    *,
    bot: Bot,
    card_id: str,
    settings: dict[str, Any],
    sequence: int,
    uuid: str = "",
    sleep: Callable[[float], None] | None = None,
    budget: SendBudget | None = None,
) -> None:
    """CardKit `card.settings`, e.g. `{"config": {"streaming_mode": False, "summary": {"content": ...}}}`."""
    builder = SettingsCardRequestBody.builder().settings(json.dumps(settings, ensure_ascii=False)).sequence(sequence)
    if uuid:
        builder = builder.uuid(uuid)
    request = SettingsCardRequest.builder().card_id(card_id).request_body(builder.build()).build()
    feishu_client.feishu_call(
        bot=bot,
        operation="card.settings",
        call=lambda client: client.cardkit.v1.card.settings(request),
        sleep=sleep,
        budget=budget,
    )
