"""How a Feishu turn's answer reaches the person who asked: the receipt reaction (R1), the streaming card (R3)
and the final reply (R2), each exactly once across re-runs, every call inside the send budget (R4).

The turn's `channel_state` is the record that keeps it once; every note is written BEFORE the Feishu call that
depends on it:
- `receipt` / `failure_reaction`: `{"emoji", "reaction_id", "removed"}`. The note is written before the reaction
  is asked for, only if no run wrote it before (one conditional UPDATE), so a re-run or a racing run never adds a
  second one (a run killed between the note and the call leaves no reaction: never twice wins over always). The
  reaction id follows the call; removal is noted after it. The run's Turn holds every note it wrote (and the
  claim read the earlier runs'), so the hooks read `turn.channel_state` without re-reading the row.
- `stream`: the streaming card's `StreamState` (card id, the reply carrying it, the last sequence), stored by
  the controller before each call (outbound.streaming), so a re-run continues on the same card.

Reactions are courtesy: a refused or failed reaction is logged and never fails the turn.
"""

import logging

from agents.models import Bot, Turn
from agents.services.turns.channels import StreamSink
from agents.services.turns.ledger import (
    turn_channel_state_add,
    turn_channel_state_merge,
    turn_channel_state_merge_statement,
)
from core.redaction import redacted
from feishu.inbound.messages import bot_text
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.budget import SendBudget
from feishu.outbound.delivery import OutgoingText, delivery_uuid, plain_replies_send, stream_deliveries_record
from feishu.outbound.stream_state import StreamState
from feishu.outbound.streaming import StreamingCard

logger = logging.getLogger(__name__)

# Addressed turns get a receipt (R1); a discuss wake does not: the bot may well stay silent.
RECEIPT_TRIGGERS = frozenset({Turn.Trigger.MENTION, Turn.Trigger.REPLY, Turn.Trigger.DM})
RECEIPT_KEY = "receipt"
FAILURE_REACTION_KEY = "failure_reaction"
STREAM_KEY = "stream"
STREAM_FALLBACK_PURPOSE = "stream-fallback"  # the uuids of a refused card's plain replies
# One collapsed line per tool step while the answer is written (issue 15 item 5): where the call goes, in grey.
TOOL_STEP_LINE = "<font color='grey'>⚙ {label} …</font>"


# --- the receipt reaction (R1) ---------------------------------------------------------------------------------
def receipt_add(*, turn: Turn, parsed: ParsedMessage) -> None:
    """The bot's receipt emoji on the source message of an addressed turn, once per turn whatever re-runs it."""
    bot = turn.bot
    if turn.trigger not in RECEIPT_TRIGGERS or not bot.receipt_emoji or not bot.has_feishu_credentials:
        return
    if RECEIPT_KEY in turn.channel_state:
        return  # an earlier run added it, or was about to: never a second one
    _reaction_add(turn=turn, parsed=parsed, key=RECEIPT_KEY, emoji=bot.receipt_emoji)


def receipt_remove(*, turn: Turn, parsed: ParsedMessage) -> None:
    """The answer is there: the receipt goes."""
    _reaction_remove(turn=turn, parsed=parsed, key=RECEIPT_KEY)


def receipt_fail(*, turn: Turn, parsed: ParsedMessage) -> None:
    """The turn failed: the receipt is replaced by the bot's failure emoji (the one-line notice follows)."""
    bot = turn.bot
    if turn.trigger not in RECEIPT_TRIGGERS or not bot.has_feishu_credentials:
        return
    turn.refresh_from_db(fields=["channel_state"])
    _reaction_remove(turn=turn, parsed=parsed, key=RECEIPT_KEY)
    if bot.failure_emoji and FAILURE_REACTION_KEY not in turn.channel_state:
        _reaction_add(turn=turn, parsed=parsed, key=FAILURE_REACTION_KEY, emoji=bot.failure_emoji)


def _reaction_add(*, turn: Turn, parsed: ParsedMessage, key: str, emoji: str) -> None:
    bot = turn.bot
    if not turn_channel_state_add(turn=turn, key=key, value={"emoji": emoji, "reaction_id": "", "removed": False}):
        return  # another run noted it first: it asks for the reaction, never this one too
    try:
        reaction_id = feishu_sends.reaction_create(
            bot=bot,
            message_id=parsed.message_id,
            emoji_type=emoji,
            budget=SendBudget(chat_id=parsed.chat_id),
        )
    except FeishuApiError as error:
        logger.warning(
            "feishu reaction not added",
            extra={"bot": bot.slug, "turn_id": turn.pk, "emoji": emoji, "code": error.code},
        )
        return
    turn_channel_state_merge(turn=turn, values={key: {"emoji": emoji, "reaction_id": reaction_id, "removed": False}})
    logger.info("feishu reaction added", extra={"bot": bot.slug, "turn_id": turn.pk, "emoji": emoji})


def _reaction_remove(*, turn: Turn, parsed: ParsedMessage, key: str) -> None:
    bot = turn.bot
    entry = turn.channel_state.get(key) or {}
    if not entry.get("reaction_id") or entry.get("removed"):
        return
    try:
        feishu_sends.reaction_delete(
            bot=bot,
            message_id=parsed.message_id,
            reaction_id=entry["reaction_id"],
            budget=SendBudget(chat_id=parsed.chat_id),
        )
    except FeishuApiError as error:
        logger.warning("feishu reaction not removed", extra={"bot": bot.slug, "turn_id": turn.pk, "code": error.code})
        return
    turn_channel_state_merge(turn=turn, values={key: {**entry, "removed": True}})


# --- the streaming card (R3) ------------------------------------------------------------------------------------
def stream_uuid_base(*, bot: Bot, turn: Turn) -> str:
    """The base of the streamed reply's uuids (one per card and per fallback chunk): fixed per turn."""
    return delivery_uuid(bot=bot, source_message_id=turn.source_message_id, purpose="stream", chunk_index=0)


def stream_state_get(*, turn: Turn) -> StreamState:
    return StreamState.from_dict(turn.channel_state.get(STREAM_KEY))


def streaming_card_for(*, turn: Turn, parsed: ParsedMessage) -> StreamingCard:
    """The turn's card controller, resumed from the state stored on the turn; every change is stored first."""
    bot = turn.bot
    uuid_base = stream_uuid_base(bot=bot, turn=turn)
    resumed = stream_state_get(turn=turn)
    # The messages of a resumed state were recorded by the controller that posted them (the sink's, before this
    # run's delivery finishes the card): not again at the next change (issue 28: one upsert fewer per streamed
    # reply). A row its run died before writing is written when the answer is finished (stream_reply_finish).
    recorded: set[str] = set(resumed.message_ids)

    def on_state(state: StreamState) -> None:
        if not set(state.message_ids) - recorded:
            turn_channel_state_merge(turn=turn, values={STREAM_KEY: state.as_dict()})
            return
        # A new message: its row now, so its echo and replies are known; the state rides in the row's statement
        # (PostgreSQL; issue 28).
        stream_deliveries_record(
            bot=bot,
            turn=turn,
            chat_id=parsed.chat_id,
            reply_to_message_id=parsed.message_id,
            reply_in_thread=parsed.is_in_topic,
            state=state,
            uuid_base=uuid_base,
            carried_write=turn_channel_state_merge_statement(turn=turn, values={STREAM_KEY: state.as_dict()}),
        )
        recorded.update(state.message_ids)

    def send_plain(text: str, state: StreamState) -> list[str]:
        return plain_replies_send(
            outgoing=OutgoingText(
                bot=bot,
                turn=turn,
                chat_id=parsed.chat_id,
                reply_to_message_id=parsed.message_id,
                reply_in_thread=parsed.is_in_topic,
                text=text,
                source_message_id=turn.source_message_id,
                purpose=STREAM_FALLBACK_PURPOSE,
                first_chunk_index=len(state.card_message_ids),  # after the cards' rows
            )
        )

    return StreamingCard(
        bot=bot,
        chat_id=parsed.chat_id,
        reply_to_message_id=parsed.message_id,
        reply_in_thread=parsed.is_in_topic,
        uuid_base=uuid_base,
        on_state=on_state,
        send_plain=send_plain,
        state=resumed,
    )


def tool_step_line(label: str) -> str:
    return TOOL_STEP_LINE.format(label=" ".join(label.split()))


class CardStreamSink(StreamSink):
    """What the card shows while the model works: a collapsed line per tool step, then the current draft.

    A tool step starts a new model call, whose text replaces the draft (the stored reply is the last call's
    text). The tool lines are the card's alone: `deliver` finishes the card with the stored reply, so they never
    reach the stored reply, thread context or the next turn.
    """

    def __init__(self, *, card: StreamingCard, secrets: tuple[str, ...] = ()) -> None:
        self.card = card
        self.secrets = secrets
        self.steps: list[str] = []
        self.draft = ""

    def shown(self) -> str:
        lines = "\n".join(tool_step_line(label) for label in self.steps)
        # The draft is redacted like the stored reply (issue 30), and its last word is held back until a space
        # ends it: it may be the start of a secret whose rest has not arrived. `deliver` shows the whole reply.
        draft = redacted(self.draft, secrets=self.secrets)
        if self.secrets and draft and not draft[-1].isspace():
            draft = draft[: len(draft) - len(draft.split()[-1])]
        return f"{lines}\n\n{draft}" if lines else draft

    def text(self, delta: str) -> None:
        self.draft += delta
        self.card.update(self.shown())

    def tool_step(self, label: str) -> None:
        self.steps.append(label)
        self.draft = ""
        self.card.update(self.shown())


def stream_reply_finish(*, turn: Turn, parsed: ParsedMessage, text: str) -> list[str]:
    """The streamed card finished with the whole reply (or, when Feishu refused the card, one plain reply with it);
    the message ids it posted, in order. Raises FeishuApiError when even the plain reply is refused."""
    state = streaming_card_for(turn=turn, parsed=parsed).finish(text)
    stream_deliveries_record(
        bot=turn.bot,
        turn=turn,
        chat_id=parsed.chat_id,
        reply_to_message_id=parsed.message_id,
        reply_in_thread=parsed.is_in_topic,
        state=state,
        uuid_base=stream_uuid_base(bot=turn.bot, turn=turn),
    )
    return state.message_ids


def stream_card_close_with_notice(*, turn: Turn, parsed: ParsedMessage, text: str) -> bool:
    """A turn that failed with its card still streaming a draft: the card is finished with the one-line notice
    instead (no draft of an answer that was never stored stays on screen, and no second message is posted).
    False when there is no such card (or it cannot be finished): the caller posts the notice as usual."""
    turn.refresh_from_db(fields=["channel_state"])
    state = stream_state_get(turn=turn)
    # A card that rolled over holds part of a longer draft: its notice goes out as its own message.
    if not state.card_id or state.is_finished or state.is_fallback or state.card_index:
        return False
    try:
        stream_reply_finish(turn=turn, parsed=parsed, text=bot_text(bot=turn.bot, text=text))
    except FeishuApiError as error:
        logger.warning(
            "feishu card not closed with the failure notice",
            extra={"bot": turn.bot.slug, "turn_id": turn.pk, "code": error.code},
        )
        return False
    return True
