"""Processing of one stored inbound event: parse, classify, record thread context, route (ARCHITECTURE §5 step 2)."""

import dataclasses
import logging
from dataclasses import dataclass

from django.db import transaction

from agents.models import Bot, Turn
from agents.principals import DOOR_CATCHUP, DOOR_COMMAND, DOOR_DM, DOOR_EDIT, DOOR_MESSAGE, Admission
from feishu.admission import REPLY_OFF, RULE_NOT_ALLOWED, RULE_NOT_OWNER, RULE_REPLY_OFF, admission_decide, group_policy
from feishu.channel.brake import handoff_receive
from feishu.channel.peers import chat_peer_bots, mentioned_peer_bots
from feishu.channel.schedule_stops import chat_automations_stop
from feishu.channel.turn_channel import feishu_turn_start
from feishu.commands.dispatch import chat_command_handle
from feishu.discuss.arbitration import at_all_arbitrate
from feishu.discuss.wake import discuss_wake_schedule, discuss_wakes_absorb, discuss_wakes_forget_message
from feishu.inbound.bot_identity import bot_open_id_ensure
from feishu.inbound.catchup import MISSED_TEXT
from feishu.inbound.chat_mode import chat_mode_annotate
from feishu.inbound.edits import EVENT_EDITED, IGNORED_EDIT_UNKNOWN, ROUTE_EDITED, inbound_edit_apply
from feishu.inbound.intake import (
    EventFinish,
    inbound_event_claim,
    inbound_event_finish,
    inbound_event_release_for_retry,
)
from feishu.inbound.messages import bot_secrets, inbound_message_build, message_is_own_echo, payload_secrets_redacted
from feishu.inbound.parsing import HUB_ANNOTATIONS_KEY, ParsedMessage, message_parse, slash_command
from feishu.models import InboundEvent
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.delivery import message_is_bot_output, message_is_other_bot_output
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cached_get
from threadcontext.services import (
    InboundMessage,
    thread_context_recall,
    thread_event_record_inbound,
    workspace_ensure,
    workspace_joined,
    workspace_retire,
)

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
IGNORED_NOT_ALLOWED = "not_allowed"  # G5: the group's list of people who may trigger the bot leaves this sender out
IGNORED_DM_POLICY = "dm_policy"  # U2: the bot's DM policy leaves this person out
IGNORED_HANDOFF_REFUSED = "handoff_refused"  # U2: the person who started the chain may not use this bot here
ROUTE_REPLY_OFF = "reply_off"  # G5: the group's reply mode is off: recorded, never answered
ROUTE_WORKSPACE_JOINED = "workspace_joined"
ROUTE_WORKSPACE_RETIRED = "workspace_retired"
ROUTE_RECALLED = "recalled"
ROUTE_HANDOFF = "handoff"  # B1: another hub bot's answer @-mentions this bot
ROUTE_ADDRESSED_ELSEWHERE = "addressed_elsewhere"  # B4: the message @-mentions other hub bots: theirs, no wake here
# D2: an addressed message the catch-up read past the answer window: recorded, never answered (its event says so).
ROUTE_MISSED = MISSED_TEXT
IGNORED_UNKNOWN_EVENT = "unknown_event"

# The event types routing handles (the webhook stores exactly these, feishu.inbound.webhook.HANDLED_EVENT_TYPES).
EVENT_MESSAGE = "im.message.receive_v1"
EVENT_RECALLED = "im.message.recalled_v1"
EVENT_BOT_ADDED = "im.chat.member.bot.added_v1"
EVENT_BOT_DELETED = "im.chat.member.bot.deleted_v1"


@dataclass(frozen=True)
class RouteResult:
    outcome: str
    turn: Turn | None = None
    event_finished: bool = False  # the route's last write carried the event's finish (EventFinish)

    @property
    def is_ignored(self) -> bool:
        return self.outcome in (
            IGNORED_UNREADABLE,
            IGNORED_OWN_ECHO,
            IGNORED_EMPTY,
            IGNORED_NOT_OWNER,
            IGNORED_OTHER_APP,
            IGNORED_NOT_ALLOWED,
            IGNORED_DM_POLICY,
            IGNORED_HANDOFF_REFUSED,
            IGNORED_UNKNOWN_EVENT,
            IGNORED_EDIT_UNKNOWN,
            ROUTE_MISSED,  # stored as ignored with its sentence: the console's inbound events show it
        )


def _command_handle(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None) -> RouteResult:
    """A command addressed to the bot (feishu.commands): answered once; no turn, no context recorded."""
    chat_command_handle(bot=bot, parsed=parsed, workspace=workspace)
    return RouteResult(ROUTE_COMMAND)


def inbound_message_route(
    *, bot: Bot, payload: dict, bot_open_id: str | None = None, finish: EventFinish | None = None
) -> RouteResult:
    """Classify one message and do what it asks: DM turn, group turn, discuss wake, command, or record only.

    `bot_open_id`: the bot's own open_id when the caller already looked it up (outside its transaction).
    `finish`: the stored event's finish, which the discuss wake's upsert carries in its own statement.
    """
    parsed = message_parse(payload)
    if parsed is None:
        return RouteResult(IGNORED_UNREADABLE)
    annotations = payload.get(HUB_ANNOTATIONS_KEY)
    missed = isinstance(annotations, dict) and annotations.get("missed") is True
    # D2/U7: read by the catch-up after a gap: admitted at the catch-up's door (explain says so), for its sender.
    backfilled = isinstance(annotations, dict) and annotations.get("backfilled") is True
    if bot_open_id is None:
        bot_open_id = bot_open_id_ensure(bot=bot)
    if not bot_open_id and bot.has_feishu_credentials and parsed.mentions and not parsed.is_direct:
        # F6: without its own open_id the bot cannot tell whether it was @-ed; retry later rather than drop an @.
        raise FeishuApiError("the bot's open_id is unknown (bot/v3/info failed)")
    if message_is_own_echo(bot=bot, parsed=parsed, bot_open_id=bot_open_id):
        return RouteResult(IGNORED_OWN_ECHO)  # C3: the bot's own message echoed back is never collected
    text = parsed.text_without_mention_keys()
    if not parsed.text.strip() and parsed.message_type in ("text", "post", ""):
        return RouteResult(IGNORED_EMPTY)  # a recalled message or an empty body

    command = slash_command(text)
    if parsed.is_direct:
        return _direct_message_route(
            bot=bot, parsed=parsed, bot_open_id=bot_open_id, command=command, missed=missed, backfilled=backfilled
        )
    return _group_message_route(
        bot=bot,
        parsed=parsed,
        bot_open_id=bot_open_id,
        command=command,
        finish=finish,
        missed=missed,
        backfilled=backfilled,
    )


def _direct_message_route(
    *, bot: Bot, parsed: ParsedMessage, bot_open_id: str, command: str, missed: bool, backfilled: bool
) -> RouteResult:
    """A DM: a command, or a turn. Never recorded as workspace thread context (C3) and never probed (P1).
    U2: the bot's DM policy admits the sender first; U7: one the catch-up read past the window is not answered."""
    if parsed.sender_type != "user":
        return RouteResult(IGNORED_OTHER_APP)
    door = DOOR_CATCHUP if backfilled else (DOOR_COMMAND if command else DOOR_DM)
    admission = admission_decide(bot=bot, workspace=None, principal=parsed.principal, door=door)
    if not admission.allowed:
        logger.info("direct message refused", extra={"bot": bot.slug, "rule": admission.rule})
        return RouteResult(IGNORED_DM_POLICY)
    if missed:
        return RouteResult(ROUTE_MISSED)
    if command:
        return _command_handle(bot=bot, parsed=parsed, workspace=None)
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot_open_id)
    turn = feishu_turn_start(
        bot=bot, message=message, trigger=Turn.Trigger.DM, admission=admission, principal=parsed.principal
    )
    return RouteResult(ROUTE_TURN, turn)


def _group_message_route(
    *,
    bot: Bot,
    parsed: ParsedMessage,
    bot_open_id: str,
    command: str,
    finish: EventFinish | None,
    missed: bool,
    backfilled: bool,
) -> RouteResult:
    """A group message: recorded as thread context, then a command, a turn (addressed), a discuss wake, or no more."""
    is_reply_to_bot = message_is_bot_output(bot=bot, feishu_message_id=parsed.parent_id)
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot_open_id, is_reply_to_bot=is_reply_to_bot)
    # G2: every group the bot hears from has a workspace (the hub's defaults), so the collector records and the
    # discuss wake has a transcript; the cached row (G5) serves every later message without a query.
    workspace = _workspace_for(bot=bot, chat_id=parsed.chat_id)
    if workspace is None:
        workspace, _ = workspace_ensure(bot_profile=bot.slug, chat_id=parsed.chat_id)
    policy = group_policy(bot=bot, workspace=workspace, parsed=parsed)
    if policy.at_all_addresses and not message.is_this_bot_addressed:
        # respond_to_at_all: an @all is an @ of this bot (recorded as its request, answered as a mention), unless
        # several bots of the chat respond to it and the chat wants one answer (B3): then only the pick's.
        if at_all_arbitrate(
            bot=bot, chat_id=parsed.chat_id, root_msg_id=parsed.root_msg_id, message_id=parsed.message_id
        ):
            message = dataclasses.replace(message, is_this_bot_addressed=True)
    addressed = message.is_this_bot_addressed
    if command and addressed:
        if missed:  # U7: a command the catch-up read past the answer window is not run
            return RouteResult(ROUTE_MISSED)
        return _command_handle(bot=bot, parsed=parsed, workspace=workspace)

    recorded = thread_event_record_inbound(message=message, workspace=workspace, secrets=bot_secrets(bot))
    if parsed.sender_type != "user":
        # Another app's message: recorded per the collector rules (a topic root keeps its actor_type), never a
        # trigger, except a hub bot's answer that @-mentions this bot: a hand-off (B1), braked (B2), admitted
        # for the person who started the chain (U2), never for the bot that wrote it.
        if not addressed or policy.reply_mode == REPLY_OFF:  # a group that silenced the bot silences hand-offs
            return RouteResult(IGNORED_OTHER_APP)
        handed = handoff_receive(bot=bot, parsed=parsed, message=message, workspace=workspace)
        if handed is None:
            return RouteResult(IGNORED_OTHER_APP)
        if handed.turn is None:
            return RouteResult(IGNORED_HANDOFF_REFUSED)
        return RouteResult(ROUTE_HANDOFF, handed.turn)
    door = DOOR_CATCHUP if backfilled else DOOR_MESSAGE
    admission = admission_decide(bot=bot, workspace=workspace, principal=parsed.principal, door=door)
    if admission.rule == RULE_REPLY_OFF:
        return RouteResult(ROUTE_REPLY_OFF)
    if admission.rule == RULE_NOT_ALLOWED:
        return RouteResult(IGNORED_NOT_ALLOWED if addressed else ROUTE_RECORDED)
    if missed:  # read by the catch-up past the answer window: too late to answer, or to open a wake
        return RouteResult(ROUTE_MISSED if addressed else ROUTE_RECORDED)
    if addressed:
        if admission.rule == RULE_NOT_OWNER or recorded.skipped_reason == "not_owner":
            return RouteResult(IGNORED_NOT_OWNER)  # owner_only: only the owner may trigger this bot (C2)
        is_mention = parsed.mentions_open_id(bot_open_id) or policy.at_all_addresses
        return _addressed_turn_start(
            bot=bot,
            parsed=parsed,
            message=message,
            workspace=workspace,
            is_mention=is_mention,
            admission=admission,
            finish=finish,
        )
    if policy.reply_mode == Bot.GroupReplyMode.DISCUSS and not command and not policy.is_at_all:
        if parsed.mentions and mentioned_peer_bots(parsed=parsed, peers=chat_peer_bots(chat_id=parsed.chat_id)):
            return RouteResult(ROUTE_ADDRESSED_ELSEWHERE)  # B4: an @ belongs to the bots it names
        if message_is_other_bot_output(bot=bot, feishu_message_id=parsed.parent_id):
            return RouteResult(ROUTE_ADDRESSED_ELSEWHERE)  # U8: a reply to another bot's answer is that bot's
        if admission.rule == RULE_NOT_OWNER:
            return RouteResult(IGNORED_NOT_OWNER)  # G3: a stranger's message opens or extends no wake
        return _discuss_wake_open(bot=bot, parsed=parsed, finish=finish)
    return RouteResult(ROUTE_RECORDED)


def _addressed_turn_start(
    *,
    bot: Bot,
    parsed: ParsedMessage,
    message: InboundMessage,
    workspace: Workspace,
    is_mention: bool,
    admission: Admission,
    finish: EventFinish | None = None,
) -> RouteResult:
    """An @ of the bot (or a reply to it) starts its turn, which answers the timeline: no wake answers it again.
    The absorb's UPDATE carries the event's finish (`finish`; one statement on PostgreSQL, issue 28)."""
    trigger = Turn.Trigger.MENTION if is_mention else Turn.Trigger.REPLY
    turn = feishu_turn_start(bot=bot, message=message, trigger=trigger, admission=admission, principal=parsed.principal)
    if turn is None:
        return RouteResult(ROUTE_RETIRED)
    # G4: the @ (or reply) answers this timeline now; a wake still debouncing here would answer twice.
    discuss_wakes_absorb(
        bot=bot,
        workspace=workspace,
        chat_id=parsed.chat_id,
        root_msg_id=parsed.root_msg_id,
        turn=turn,
        carried_write=finish.done_statement() if finish is not None else None,
    )
    return RouteResult(ROUTE_TURN, turn, event_finished=finish is not None)


def _discuss_wake_open(*, bot: Bot, parsed: ParsedMessage, finish: EventFinish | None) -> RouteResult:
    """An un-addressed message to a discuss bot (its sender admitted, U2) opens or extends its timeline's wake
    (P10)."""
    discuss_wake_schedule(
        bot=bot,
        chat_id=parsed.chat_id,
        root_msg_id=parsed.root_msg_id,
        message_id=parsed.message_id,
        # Issue 11: "event done" rides in the wake's statement (one round trip fewer on PostgreSQL).
        carried_write=finish.done_statement() if finish is not None else None,
    )
    return RouteResult(ROUTE_DISCUSS_WAKE, event_finished=finish is not None)


def _workspace_for(*, bot: Bot, chat_id: str) -> Workspace | None:
    return workspace_cached_get(bot_profile=bot.slug, chat_id=chat_id)


def _edit_route(*, bot: Bot, payload: dict, bot_open_id: str | None) -> RouteResult:
    """O6: the edit's text replaces the old in context; an edit that newly addresses the bot starts its turn, once
    (the turn is unique per bot and message: a second edit, or an edit of an answered request, starts none)."""
    applied = inbound_edit_apply(
        bot=bot, payload=payload, bot_open_id=bot_open_id_ensure(bot=bot) if bot_open_id is None else bot_open_id
    )
    if applied.outcome != ROUTE_EDITED or applied.parsed is None or applied.message is None:
        return RouteResult(applied.outcome)
    parsed, message = applied.parsed, applied.message
    workspace = (
        _workspace_for(bot=bot, chat_id=parsed.chat_id)
        or workspace_ensure(bot_profile=bot.slug, chat_id=parsed.chat_id)[0]
    )
    policy = group_policy(bot=bot, workspace=workspace, parsed=parsed)
    if policy.at_all_addresses:
        message = dataclasses.replace(message, is_this_bot_addressed=True)
    admission = admission_decide(bot=bot, workspace=workspace, principal=parsed.principal, door=DOOR_EDIT)
    if not message.is_this_bot_addressed or parsed.sender_type != "user" or not admission.allowed:
        return RouteResult(ROUTE_EDITED)
    is_mention = parsed.mentions_open_id(applied.bot_open_id) or policy.at_all_addresses
    return _addressed_turn_start(
        bot=bot, parsed=parsed, message=message, workspace=workspace, is_mention=is_mention, admission=admission
    )


def inbound_event_route(
    *, bot: Bot, event_type: str, payload: dict, bot_open_id: str | None = None, finish: EventFinish | None = None
) -> RouteResult:
    """Route one stored event by its type: a message, a recall (G7), the bot added to or removed from a group (G2)."""
    if event_type in (EVENT_MESSAGE, ""):
        return inbound_message_route(bot=bot, payload=payload, bot_open_id=bot_open_id, finish=finish)
    if event_type == EVENT_EDITED:
        return _edit_route(bot=bot, payload=payload, bot_open_id=bot_open_id)
    event = payload.get("event")
    if not isinstance(event, dict):
        event = {}
    chat_id = str(event.get("chat_id") or "")
    if event_type == EVENT_RECALLED:
        message_id = str(event.get("message_id") or "")
        if not chat_id or not message_id:
            return RouteResult(IGNORED_UNREADABLE)
        thread_context_recall(chat_id=chat_id, message_id=message_id)
        discuss_wakes_forget_message(chat_id=chat_id, message_id=message_id)
        return RouteResult(ROUTE_RECALLED)
    if event_type in (EVENT_BOT_ADDED, EVENT_BOT_DELETED):
        if not chat_id:
            return RouteResult(IGNORED_UNREADABLE)
        if event_type == EVENT_BOT_ADDED:
            workspace_joined(bot_profile=bot.slug, chat_id=chat_id, name=str(event.get("name") or ""))
            return RouteResult(ROUTE_WORKSPACE_JOINED)
        workspace_retire(bot_profile=bot.slug, chat_id=chat_id)
        chat_automations_stop(bot=bot, chat_id=chat_id)  # U4: its schedules there stop now, not at their next run
        return RouteResult(ROUTE_WORKSPACE_RETIRED)
    return RouteResult(IGNORED_UNKNOWN_EVENT)


def inbound_event_process(*, event_pk: int) -> RouteResult | None:
    """Claim one stored event (pending -> processing), route it, and mark it done or ignored; None if not claimed."""
    event = inbound_event_claim(event_pk=event_pk)
    if event is None:
        return None
    try:
        # The one-time bot/v3/info and chat.get reads are HTTP calls: made before the transaction, never inside it.
        bot_open_id = bot_open_id_ensure(bot=event.bot)
        payload = payload_secrets_redacted(
            bot=event.bot, payload=chat_mode_annotate(bot=event.bot, payload=event.payload)
        )
        with transaction.atomic():  # notices go out after commit (feishu_notice_send), turns enqueue after it
            # The finish is in the route's transaction, with the annotated payload in the same UPDATE: committed
            # before any turn or wake it started reads the event, so they parse the same timeline (G1). A route
            # whose last write can carry it (the discuss wake) writes it in that statement (issue 11).
            annotated = payload if payload is not event.payload else None
            result = inbound_event_route(
                bot=event.bot,
                event_type=event.event_type,
                payload=payload,
                bot_open_id=bot_open_id,
                finish=EventFinish(event=event, payload=annotated),
            )
            if not result.event_finished:
                status = InboundEvent.Status.IGNORED if result.is_ignored else InboundEvent.Status.DONE
                inbound_event_finish(
                    event=event,
                    status=status,
                    error="" if status == InboundEvent.Status.DONE else result.outcome,
                    payload=annotated,
                )
    except Exception as error:  # an unexpected bug must not lose the event: release it for the sweeper
        logger.exception("feishu event processing failed", extra={"inbound_event": event.pk, "bot": event.bot.slug})
        inbound_event_release_for_retry(event=event, error=f"{type(error).__name__}: {error}")
        return None
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
