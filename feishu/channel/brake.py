"""The receiving side of a hand-off (B1) and the loop brake (B2); the sending side is feishu.channel.handoff.

Routing calls `handoff_asker` for an app's message that @-mentions its bot: a hub bot's delivered answer (found by
its outbound delivery row) is a hand-off. `handoff_turn_start` starts the mentioned bot's turn once (unique per bot
and message, whether the hub handed it over or Feishu pushed it too), recorded on both turns (`asked_by`), and
counts it: `chain_length` is one more than the asking turn's, or 1 when a person spoke in that thread since the
asking turn began (any human message resets the count). Past the chat's `bot_chain_limit` the would-be turn is
recorded `skipped` with the reason and one line, in the bot's language, tells the thread the bots paused.
"""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext, gettext_noop

from agents.models import Bot, Turn
from agents.principals import DOOR_HANDOFF, Admission, principal_from_turn
from agents.services.turns import ledger
from feishu.admission import admission_decide
from feishu.channel.handoff import UNSENT_REPLY_PREFIX
from feishu.channel.peers import chat_policy
from feishu.channel.turn_channel import feishu_turn_start
from feishu.inbound.parsing import ParsedMessage
from feishu.models import OutboundDelivery
from feishu.outbound.delivery import feishu_notice_send
from threadcontext.models import ThreadEvent, Workspace

logger = logging.getLogger(__name__)

PAUSED_TEXT = gettext_noop("The bots paused after %(count)d replies to each other; @ one of them to continue.")


@dataclass(frozen=True)
class Asker:
    turn: Turn
    chain_length: int  # of the turn the hand-off would start


def handoff_asker(*, bot: Bot, parsed: ParsedMessage) -> Asker | None:
    """The turn whose delivered answer this app message is, when it is another hub bot's (B1); None otherwise."""
    delivery = (
        OutboundDelivery.objects.select_related("turn__bot")
        .filter(feishu_message_id=parsed.message_id, turn__isnull=False)
        .exclude(bot=bot)
        .first()
    )
    asking = delivery.turn if delivery is not None else None
    if asking is None and parsed.message_id.startswith(UNSENT_REPLY_PREFIX):  # a recorded reply (F5)
        turn_id = parsed.message_id.removeprefix(UNSENT_REPLY_PREFIX)
        asking = (
            Turn.objects.select_related("bot").filter(pk=int(turn_id)).exclude(bot=bot).first()
            if turn_id.isdigit()
            else None
        )
    if asking is None:
        return None
    # B2: any person's message in this thread since the asking turn began resets the count.
    person_spoke = (
        ThreadEvent.objects.filter(
            chat_id=parsed.chat_id,
            root_msg_id=parsed.root_msg_id,
            event_type__in=(ThreadEvent.EventType.HUMAN_MESSAGE, ThreadEvent.EventType.USER_REQUEST),
            actor_type="user",
            created_at__gt=asking.queued_at,
        )
        .exclude(message_id=asking.source_message_id)
        .exists()
    )
    return Asker(turn=asking, chain_length=1 if person_spoke else asking.chain_length + 1)


def handoff_turn_start(*, bot: Bot, parsed: ParsedMessage, message, asker: Asker, admission: Admission) -> Turn | None:
    """B1/B2: the mentioned bot's turn for the handed-over answer, or, past the chat's limit, the same turn recorded
    skipped with one line to the thread (once: the turn is unique per bot and message). The turn acts for the
    asking turn's principal (U1: the person who started the chain), whom `admission` admitted."""
    limit = chat_policy(chat_id=parsed.chat_id).chain_limit
    with transaction.atomic():
        turn = feishu_turn_start(
            bot=bot,
            message=message,
            trigger=Turn.Trigger.HANDOFF,
            admission=admission,
            principal=principal_from_turn(asker.turn),
        )
        if turn is None or turn.asked_by_id is not None:
            return turn  # a retired session, or this hand-off was answered already (pushed by Feishu as well)
        Turn.objects.filter(pk=turn.pk).update(asked_by=asker.turn, chain_length=asker.chain_length)
        turn.asked_by, turn.chain_length = asker.turn, asker.chain_length
        if limit and asker.chain_length <= limit:
            return turn
        reason = (
            "hand-offs are off in this chat (bot_chain_limit 0)"
            if not limit
            else f"loop brake: {limit} bot-to-bot replies in a row in this thread (bot_chain_limit {limit})"
        )
        ledger.turn_mark_skipped(turn=turn, reason=reason)  # its queued run finds it finished and does nothing
        if limit:
            with translation.override(bot.language):
                line = gettext(PAUSED_TEXT) % {"count": limit}
            feishu_notice_send(
                bot=bot,
                chat_id=parsed.chat_id,
                reply_to_message_id=parsed.message_id,
                reply_in_thread=parsed.is_in_topic,
                text=line,
                purpose="loop_brake",
            )
    logger.info("bot loop brake", extra={"turn": turn.pk, "bot": bot.slug, "chain_length": asker.chain_length})
    return turn


def turn_chain(*, turn: Turn, limit: int = 50) -> list[dict]:
    """Explain (B1, B2): the chain of hand-offs that led to this turn, oldest first (the person's request first)."""
    chain: list[dict] = []
    current: Turn | None = turn
    while current is not None and len(chain) < limit:
        chain.append(
            {
                "turn_id": current.pk,
                "bot": current.bot.name,
                "trigger": current.trigger,
                "status": current.status,
                "chain_length": current.chain_length,
                "asked_by": f"asked by {current.asked_by.bot.name} in turn {current.asked_by_id}"
                if current.asked_by_id and current.asked_by is not None
                else "",
            }
        )
        asked_by_id = current.asked_by_id
        current = (
            Turn.objects.select_related("bot", "asked_by__bot").filter(pk=asked_by_id).first() if asked_by_id else None
        )
    chain.reverse()
    return chain


@dataclass(frozen=True)
class Handed:
    """A hub bot's answer handed to this bot: the turn it started, or None when U2 refused the chain's principal."""

    turn: Turn | None
    admission: Admission


def handoff_receive(*, bot: Bot, parsed: ParsedMessage, message, workspace: Workspace | None) -> Handed | None:
    """Routing's entry for an app's message @-mentioning `bot`: None when it is no hub bot's answer; else the
    hand-off (B1), admitted only when the person who started the chain may make this bot act here (U2): a bot's
    message never carries more authority than the person behind it."""
    asker = handoff_asker(bot=bot, parsed=parsed)
    if asker is None:
        return None
    principal = principal_from_turn(asker.turn)
    admission = admission_decide(bot=bot, workspace=workspace, principal=principal, door=DOOR_HANDOFF)
    if not admission.allowed:
        logger.info(
            "bot hand-off refused",
            extra={
                "bot": bot.slug,
                "asking_turn": asker.turn.pk,
                "rule": admission.rule,
                "principal": principal.label(),
            },
        )
        return Handed(turn=None, admission=admission)
    turn = handoff_turn_start(bot=bot, parsed=parsed, message=message, asker=asker, admission=admission)
    return Handed(turn=turn, admission=admission)
