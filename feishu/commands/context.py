"""`/context show|pin|unpin|pins|clear` (K1, K2): what the next request would carry, and the people's say in it.

Each returns the reply's text (already in the bot's language: the caller runs it inside the bot's translation)
and its format; none calls a model, starts a turn or writes a context item.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.models import Bot
from feishu.commands import texts
from feishu.commands.grammar import (
    CONTEXT_CLEAR,
    CONTEXT_PIN,
    CONTEXT_PINS,
    CONTEXT_SHOW,
    CONTEXT_UNPIN,
    ChatCommand,
)
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound.cards import ReplyFormat
from threadcontext.candidates import MAX_PINS
from threadcontext.models import Workspace
from threadcontext.selectors import ContextRequest, context_package_build
from threadcontext.services.steering import (
    PIN_ALREADY,
    PIN_DONE,
    PIN_TOO_MANY,
    Conversation,
    context_clear,
    context_pin,
    context_pins_list,
    context_unpin,
)
from threadcontext.trimming import ContextPackage


@dataclass(frozen=True)
class CommandReply:
    text: str
    reply_format: ReplyFormat = "text"


def conversation_of(*, bot: Bot, parsed: ParsedMessage) -> Conversation:
    """The bot's conversation the command speaks about: its timeline in this chat (a topic, or the main one)."""
    return Conversation(
        bridge_id=bot.bridge_id, bot_profile=bot.slug, chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id
    )


def next_request_package(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None) -> ContextPackage:
    """What the next request in this conversation would carry: the real selector, as the turn calls it (the
    command's own message is no item, so a request sent next selects the same items, its own message aside)."""
    return context_package_build(
        request=ContextRequest(
            workspace=workspace,
            bridge_id=bot.bridge_id,
            bot_profile=bot.slug,
            chat_id=parsed.chat_id,
            root_msg_id=parsed.root_msg_id,
            message_id=parsed.message_id,
            request_text="",
        )
    )


def context_command_run(
    *, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None, command: ChatCommand
) -> CommandReply:
    """One `/context` action (export is sent as a file by `exports`, not here)."""
    if parsed.is_direct:
        return CommandReply(str(texts.SHOW_DIRECT))
    conversation = conversation_of(bot=bot, parsed=parsed)
    if command.action == CONTEXT_SHOW:
        package = next_request_package(bot=bot, parsed=parsed, workspace=workspace)
        return CommandReply(texts.context_show_markdown(package=package), "markdown_card")
    if command.action == CONTEXT_PINS:
        pins = [
            (pin.item.pk, pin.item.item_type, pin.item.author_label or pin.item.bridge_id, pin.item.text)
            for pin in context_pins_list(conversation=conversation)
        ]
        return CommandReply(texts.pins_list_text(pins=pins))
    if command.action == CONTEXT_CLEAR:
        context_clear(conversation=conversation, cleared_by=parsed.sender_open_id, include_pins=command.is_all)
        return CommandReply(str(texts.CLEAR_ALL_DONE if command.is_all else texts.CLEAR_DONE))
    if command.action == CONTEXT_UNPIN and command.is_all:
        return CommandReply(str(texts.UNPIN_ALL) % {"count": context_unpin(conversation=conversation)})
    # pin / unpin: the message this one replies to (in a topic without a quote: the topic root)
    target = parsed.parent_id
    if not target:
        return CommandReply(str(texts.PIN_NEEDS_REPLY))
    if command.action == CONTEXT_UNPIN:
        removed = context_unpin(conversation=conversation, message_id=target)
        return CommandReply(str(texts.UNPIN_DONE if removed else texts.UNPIN_NONE))
    assert command.action == CONTEXT_PIN
    outcome = context_pin(conversation=conversation, message_id=target, pinned_by=parsed.sender_open_id)
    if outcome.outcome == PIN_DONE:
        return CommandReply(str(texts.PIN_DONE))
    if outcome.outcome == PIN_ALREADY:
        return CommandReply(str(texts.PIN_ALREADY))
    if outcome.outcome == PIN_TOO_MANY:
        return CommandReply(str(texts.PIN_TOO_MANY) % {"count": MAX_PINS})
    return CommandReply(str(texts.PIN_NOT_FOUND))
