"""Leaf helpers that turn a parsed Feishu message into what the rest of the hub needs, and the bridge's fixed texts.

Routing, the discuss wake and the bridge turn all build the collector's InboundMessage and redact the same
secrets; they import this module, which imports none of them (no import circle).
"""

import json

from django.utils import translation
from django.utils.translation import gettext_lazy as _

from agents.models import Bot
from agents.secrets import hub_secrets
from core.redaction import redacted, redacted_json
from core.text import TranslatableText
from feishu.inbound.parsing import ParsedMessage, slash_command
from feishu.models import OutboundDelivery
from threadcontext.services.collection import InboundMessage, Mention

# Lazy: each is rendered in the bot's own language (Bot.language) when it is sent, by `bot_text`.
HELP_TEXT = _(
    "I am an amux agent bot.\n"
    "- @mention me (or reply to one of my messages) to ask something; in a topic I keep one session per topic.\n"
    "- /new ends the current session; your next message starts a fresh one.\n"
    "- /help shows this message."
)
NEW_SESSION_TEXT = _("Session ended. Start a new topic (or @ me again in a group-wide or direct chat) for a new one.")
RETIRED_SESSION_TEXT = _("This session has ended. Please start a new topic (or send /new) to talk to me again.")
QUOTED_READ_FAILED_TEXT = _(
    "I could not read the message you replied to, so I did not send your request. Please try again."
)


def bot_text(*, bot: Bot, text: TranslatableText) -> str:
    """One of the bridge's fixed texts as the bot says it: in the bot's language, whatever the process's is."""
    with translation.override(bot.language):
        return str(text)


def message_is_own_echo(*, bot: Bot, parsed: ParsedMessage, bot_open_id: str) -> bool:
    if parsed.sender_type != "app":
        return False
    if bot_open_id and parsed.sender_open_id == bot_open_id:
        return True
    return OutboundDelivery.objects.filter(bot=bot, feishu_message_id=parsed.message_id).exists()


def inbound_message_build(*, bot: Bot, parsed: ParsedMessage, bot_open_id: str, is_reply_to_bot: bool = False):
    """b's normalised InboundMessage for the collector (this bot's @ is marked so it is stripped, C4)."""
    mentions = tuple(
        Mention(key=m.key, open_id=m.open_id, name=m.name, is_this_bot=bool(bot_open_id) and m.open_id == bot_open_id)
        for m in parsed.mentions
    )
    addressed = parsed.mentions_open_id(bot_open_id) or is_reply_to_bot
    return InboundMessage(
        chat_id=parsed.chat_id,
        message_id=parsed.message_id,
        bridge_id=bot.bridge_id,
        bot_profile=bot.slug,
        text=parsed.text,
        chat_type=parsed.chat_type,
        # The timeline key (G1: an ordinary group's main timeline), "" when the message starts its own topic.
        root_msg_id=parsed.root_msg_id if parsed.root_msg_id != parsed.message_id else "",
        thread_id=parsed.thread_id,
        parent_id=parsed.parent_id,
        sender_id=parsed.sender_open_id,
        sender_type=parsed.sender_type,
        mentions=mentions,
        message_type=parsed.message_type,
        is_this_bot_addressed=addressed,
        is_slash_command=bool(slash_command(parsed.text_without_mention_keys())),
        is_own_echo=message_is_own_echo(bot=bot, parsed=parsed, bot_open_id=bot_open_id),
    )


def bot_secrets(bot: Bot) -> tuple[str, ...]:
    """What the collector redacts from any stored text (C3): every secret the hub holds (issue 30), since a
    person may paste another bot's key or a provider key as well as this bot's Feishu secrets."""
    return hub_secrets(extra=bot.feishu_secrets)


def payload_secrets_redacted(*, bot: Bot, payload: dict) -> dict:
    """The event with every hub secret redacted from its message's content (issue 30), or the same dict when
    there is none: the stored copy of the event is a row like any other, and a pasted key must not stay in it.
    Routing stores what this returns with the event's finish; the turn and the wake parse that copy."""
    event = payload.get("event")
    if not isinstance(event, dict):
        return payload
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, str) or not content:
        return payload
    secrets = bot_secrets(bot)
    if redacted(content, secrets=secrets) == content:
        return payload
    try:  # inside the JSON, so that a redaction never eats one of its quotes
        clean = json.dumps(redacted_json(json.loads(content), secrets=secrets), ensure_ascii=False)
    except ValueError:
        clean = redacted(content, secrets=secrets)
    return {**payload, "event": {**event, "message": {**message, "content": clean}}}
