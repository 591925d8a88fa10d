"""Queue mode collect in Feishu (ARCHITECTURE §11.1 O2): one reply for the messages that waited.

When a turn starts, agents.services.turns.conversation marks the requests that queued behind it in the same session
as collected into it (each of their turns `skipped`, linked). For the Feishu channel that means:
- the prompt is the turn's own request followed by each collected message, oldest first (mentions normalised,
  secrets redacted, as the turn's own);
- each collected message gets the receipt reaction once (noted on its own turn, as for any turn), and loses it
  when the reply is delivered (or gets the failure emoji when the turn fails);
- the reply answers the newest collected message, in its topic: the person sees it under what they sent last.

Queue mode steer takes the messages that arrive while the turn runs into it at a tool-call boundary
(conversation.steer_hook): they are collected the same way (listed, skipped, linked), their text reaches the model
then (`steered_texts`), and each gets the receipt reaction when it is taken in.
"""

from collections.abc import Sequence

from agents.models import Bot, Turn
from agents.secrets import turn_redactions_add
from agents.services.turns.conversation import collected_turn_ids
from core.redaction import redact
from feishu.channel.sources import source_parsed
from feishu.inbound.messages import inbound_message_build
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound.replies import receipt_add, receipt_fail, receipt_remove
from threadcontext.services import normalise_mentions

COLLECTED_SEPARATOR = "\n\n"


def collected_turns(*, turn: Turn) -> list[Turn]:
    """The turns whose messages this one answers besides its own, oldest first."""
    ids = collected_turn_ids(turn=turn)
    if not ids:
        return []
    return list(Turn.objects.filter(pk__in=ids).select_related("bot").order_by("pk"))


def _request_text(*, turn: Turn, bot: Bot, collected: Turn, secrets: Sequence[str]) -> str:
    """A collected message's text as the turn's own would be: mentions normalised, secrets redacted."""
    parsed = source_parsed(turn=collected)
    if parsed is None:
        return ""
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot.feishu_bot_open_id)
    redaction = redact(normalise_mentions(parsed.text, message.mentions), secrets=secrets)
    turn_redactions_add(turn_id=turn.pk, count=redaction.count)
    return redaction.text if redaction.text.strip() else ""


def request_text_with_collected(*, turn: Turn, bot: Bot, own_text: str, secrets: Sequence[str]) -> str:
    """The turn's request followed by the messages it collected, each as the turn's own would be."""
    parts = [own_text] if own_text else []
    for collected in collected_turns(turn=turn):
        if text := _request_text(turn=turn, bot=bot, collected=collected, secrets=secrets):
            parts.append(text)
    return COLLECTED_SEPARATOR.join(parts)


def steered_texts(*, turn: Turn, steered: Sequence[Turn], secrets: Sequence[str]) -> list[str]:
    """The messages taken into the running turn (steer), for the model; each gets its receipt reaction now."""
    texts = []
    for taken in steered:
        parsed = source_parsed(turn=taken)
        if parsed is None:
            continue
        receipt_add(turn=taken, parsed=parsed)
        if text := _request_text(turn=turn, bot=turn.bot, collected=taken, secrets=secrets):
            texts.append(text)
    return texts


def reply_target(*, turn: Turn, own: ParsedMessage) -> ParsedMessage:
    """The message the reply answers: the newest collected one, else the turn's own."""
    for collected in reversed(collected_turns(turn=turn)):
        parsed = source_parsed(turn=collected)
        if parsed is not None:
            return parsed
    return own


def _each(*, turn: Turn, act) -> None:
    for collected in collected_turns(turn=turn):
        parsed = source_parsed(turn=collected)
        if parsed is not None:
            act(turn=collected, parsed=parsed)


def collected_receipts_add(*, turn: Turn) -> None:
    _each(turn=turn, act=receipt_add)


def collected_receipts_remove(*, turn: Turn) -> None:
    _each(turn=turn, act=receipt_remove)


def collected_receipts_fail(*, turn: Turn) -> None:
    _each(turn=turn, act=receipt_fail)
