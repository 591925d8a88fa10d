"""Processing of one stored inbound event: parse, classify, record thread context, route (ARCHITECTURE §5 step 2)."""

import logging
from dataclasses import dataclass

from django.db import transaction

from agents.models import Bot, Turn
from amuxweb.feishu import client as feishu_client
from amuxweb.feishu.messages import (
    HELP_TEXT,
    NEW_SESSION_TEXT,
    bot_secrets,
    inbound_message_build,
    message_is_own_echo,
)
from amuxweb.feishu.models import InboundEvent
from amuxweb.feishu.parsing import ParsedMessage, message_parse, slash_command
from amuxweb.feishu.services.delivery import feishu_notice_send, message_is_bot_output
from amuxweb.feishu.services.intake import inbound_event_claim, inbound_event_finish, inbound_event_release_for_retry

logger = logging.getLogger(__name__)

# Outcomes (stored on the InboundEvent and returned for tests and logs).
ROUTE_TURN = "turn"
ROUTE_DISCUSS_WAKE = "discuss_wake"
ROUTE_RECORDED = "recorded_only"
ROUTE_COMMAND = "command"
ROUTE_RETIRED = "retired_session"
IGNORED_UNREADABLE = "unreadable"
IGNORED_OWN_ECHO = "own_echo"
IGNORED_EMPTY = "empty"
IGNORED_NOT_OWNER = "not_owner"
IGNORED_OTHER_APP = "other_app"


@dataclass(frozen=True)
class RouteResult:
    outcome: str
    turn: Turn | None = None

    @property
    def is_ignored(self) -> bool:
        return self.outcome in (
            IGNORED_UNREADABLE,
            IGNORED_OWN_ECHO,
            IGNORED_EMPTY,
            IGNORED_NOT_OWNER,
            IGNORED_OTHER_APP,
        )


def bot_open_id_ensure(*, bot: Bot) -> str:
    """The bot's own open_id (F6): read once from bot/v3/info and cached on the Bot row; "" when unknown."""
    if bot.feishu_bot_open_id or not bot.has_feishu_credentials:
        return bot.feishu_bot_open_id
    try:
        open_id = feishu_client.bot_info_open_id(bot=bot)
    except feishu_client.FeishuApiError as error:
        logger.warning("feishu bot info unavailable", extra={"bot": bot.slug, "code": error.code})
        return ""
    if open_id:
        # update(): no updated_at bump, so the cached webhook handler and client stay valid.
        Bot.objects.filter(pk=bot.pk).update(feishu_bot_open_id=open_id)
        bot.feishu_bot_open_id = open_id
    return open_id


def _command_handle(*, bot: Bot, parsed: ParsedMessage, command: str) -> RouteResult:
    from amuxweb.feishu.services.sessions import session_retire

    if command == "/new":
        session_retire(bot=bot, parsed=parsed)
        text = NEW_SESSION_TEXT
    else:
        text = HELP_TEXT
    feishu_notice_send(
        bot=bot,
        chat_id=parsed.chat_id,
        reply_to_message_id=parsed.message_id,
        reply_in_thread=parsed.is_in_topic,
        text=text,
        purpose=f"command{command}",
    )
    return RouteResult(ROUTE_COMMAND)


def inbound_message_route(*, bot: Bot, payload: dict, bot_open_id: str | None = None) -> RouteResult:
    """Classify one message and do what it asks: DM turn, group turn, discuss wake, command, or record only.

    `bot_open_id`: the bot's own open_id when the caller already looked it up (outside its transaction).
    """
    from amuxweb.feishu.services.turns import feishu_turn_start

    parsed = message_parse(payload)
    if parsed is None:
        return RouteResult(IGNORED_UNREADABLE)
    if bot_open_id is None:
        bot_open_id = bot_open_id_ensure(bot=bot)
    if not bot_open_id and bot.has_feishu_credentials and parsed.mentions and not parsed.is_direct:
        # F6: without its own open_id the bot cannot tell whether it was @-ed; retry later rather than drop an @.
        raise feishu_client.FeishuApiError("the bot's open_id is unknown (bot/v3/info failed)")
    if message_is_own_echo(bot=bot, parsed=parsed, bot_open_id=bot_open_id):
        return RouteResult(IGNORED_OWN_ECHO)  # C3: the bot's own message echoed back is never collected
    text = parsed.text_without_mention_keys()
    if not parsed.text.strip() and parsed.message_type in ("text", "post", ""):
        return RouteResult(IGNORED_EMPTY)  # a recalled message or an empty body

    command = slash_command(text)
    if parsed.is_direct:
        if parsed.sender_type != "user":
            return RouteResult(IGNORED_OTHER_APP)
        if command:
            return _command_handle(bot=bot, parsed=parsed, command=command)
        message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot_open_id)
        # A DM is never recorded as workspace thread context (C3) and never probed (P1).
        turn = feishu_turn_start(bot=bot, message=message, trigger=Turn.Trigger.DM)
        return RouteResult(ROUTE_TURN, turn)

    from threadcontext.selectors import workspace_get
    from threadcontext.services import thread_event_record_inbound

    is_reply_to_bot = message_is_bot_output(bot=bot, feishu_message_id=parsed.parent_id)
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot_open_id, is_reply_to_bot=is_reply_to_bot)
    addressed = message.is_this_bot_addressed
    if command and addressed:
        return _command_handle(bot=bot, parsed=parsed, command=command)

    workspace = workspace_get(bot_profile=bot.slug, chat_id=parsed.chat_id)
    recorded = thread_event_record_inbound(message=message, workspace=workspace, secrets=bot_secrets(bot))
    if parsed.sender_type != "user":
        # Another app's message: recorded per the collector rules (a topic root keeps its actor_type), never a
        # trigger: bots answering bots is autonomous orchestration, which the seed leaves out.
        return RouteResult(IGNORED_OTHER_APP)
    if addressed:
        if recorded.skipped_reason == "not_owner":
            return RouteResult(IGNORED_NOT_OWNER)  # owner_only: only the owner may trigger this bot (C2)
        trigger = Turn.Trigger.MENTION if parsed.mentions_open_id(bot_open_id) else Turn.Trigger.REPLY
        turn = feishu_turn_start(bot=bot, message=message, trigger=trigger)
        return RouteResult(ROUTE_TURN if turn is not None else ROUTE_RETIRED, turn)
    if bot.group_reply_mode == Bot.GroupReplyMode.DISCUSS and not command:
        try:
            from amuxweb.feishu.discuss import discuss_wake_schedule
        except ImportError:  # the probe's wake is not installed: the message is only recorded
            return RouteResult(ROUTE_RECORDED)
        discuss_wake_schedule(
            bot=bot, chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id, message_id=parsed.message_id
        )
        return RouteResult(ROUTE_DISCUSS_WAKE)
    return RouteResult(ROUTE_RECORDED)


def inbound_event_process(*, event_pk: int) -> RouteResult | None:
    """Claim one stored event (pending -> processing), route it, and mark it done or ignored; None if not claimed."""
    event = inbound_event_claim(event_pk=event_pk)
    if event is None:
        return None
    try:
        # The one-time bot/v3/info read is an HTTP call: made before the transaction, never inside it.
        bot_open_id = bot_open_id_ensure(bot=event.bot)
        with transaction.atomic():  # notices go out after commit (feishu_notice_send), turns enqueue after it
            result = inbound_message_route(bot=event.bot, payload=event.payload, bot_open_id=bot_open_id)
    except Exception as error:  # an unexpected bug must not lose the event: release it for the sweeper
        logger.exception("feishu event processing failed", extra={"inbound_event": event.pk, "bot": event.bot.slug})
        inbound_event_release_for_retry(event=event, error=f"{type(error).__name__}: {error}")
        return None
    status = InboundEvent.Status.IGNORED if result.is_ignored else InboundEvent.Status.DONE
    inbound_event_finish(event=event, status=status, error="" if status == InboundEvent.Status.DONE else result.outcome)
    logger.info(
        "feishu event processed",
        extra={
            "inbound_event": event.pk,
            "bot": event.bot.slug,
            "outcome": result.outcome,
            "message_id": event.message_id,
        },
    )
    return result
