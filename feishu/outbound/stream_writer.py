"""The Feishu calls on a streamed answer's current card (R3): create it, post it, write its text, close it.

Each call stores what it depends on first, through the listener (`on_state`): the card id before the reply that
carries it, each sequence before the call that uses it (Feishu refuses a sequence not above the card's last), so
a re-run after a crash continues on the same card with a higher sequence and never posts a second card or
reply (feishu/outbound/stream_state.py). The writer makes the calls and raises what Feishu answers
(`FeishuApiError`); what a refusal means for the answer (retry, roll over, fall back) is the controller's
(feishu/outbound/streaming.py).
"""

from collections.abc import Callable

from agents.models import Bot
from feishu.outbound import cardkit as feishu_cardkit
from feishu.outbound import sends as feishu_sends
from feishu.outbound.budget import SendBudget
from feishu.outbound.cards import MARKDOWN_ELEMENT_ID, STREAMING_PLACEHOLDER, card_summary, markdown_card
from feishu.outbound.stream_state import StateListener, StreamState, stream_uuid
from feishu.outbound.stream_throttle import UpdateThrottle


class CardWriter:
    """The calls on `state`'s current card; `state` is the controller's own object, changed in place."""

    def __init__(
        self,
        *,
        bot: Bot,
        chat_id: str,
        reply_to_message_id: str,
        reply_in_thread: bool,
        uuid_base: str,
        state: StreamState,
        on_state: StateListener,
        throttle: UpdateThrottle,
        now: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.bot = bot
        self.chat_id = chat_id
        self.reply_to_message_id = reply_to_message_id
        self.reply_in_thread = reply_in_thread
        self.uuid_base = uuid_base
        self.state = state
        self.on_state = on_state
        self.throttle = throttle
        self.now = now  # epoch seconds: the card's age against Feishu's streaming limit (stored, survives a crash)
        self.sleep = sleep

    def create(self, *, initial: str) -> None:
        """A new card in streaming mode showing `initial`; stored before the reply that carries it, so a re-run
        replies with this card. CardKit's create posts nothing in a chat: it takes only the app's budget."""
        card = markdown_card(text=initial or STREAMING_PLACEHOLDER, streaming=True)
        state = self.state
        state.card_id = feishu_cardkit.card_create(
            bot=self.bot, card=card, sleep=self.sleep, budget=SendBudget(chat_id="")
        )
        state.sequence, state.shown, state.opened_at, state.message_id = 0, initial, self.now(), ""
        self.on_state(state)

    def post(self) -> None:
        """The reply carrying the card, with a uuid fixed per (answer, card): Feishu itself drops a second one."""
        state = self.state
        sent = feishu_sends.message_reply_content(
            bot=self.bot,
            message_id=self.reply_to_message_id,
            msg_type="interactive",
            content=feishu_cardkit.card_reference(state.card_id),
            uuid=stream_uuid(uuid_base=self.uuid_base, kind="c", index=state.card_index),
            reply_in_thread=self.reply_in_thread,
            sleep=self.sleep,
            budget=SendBudget(chat_id=self.chat_id),
        )
        state.message_id = sent.message_id
        self.on_state(state)

    def push(self, body: str, *, budget: SendBudget) -> None:
        """The card's text becomes `body`, with the next sequence: the one content update of the card, for an
        update while streaming and for the last one before a close alike."""
        state = self.state
        state.sequence += 1
        state.shown = body
        self.on_state(state)  # the sequence is stored before it is used: a re-run never reuses it
        self.throttle.sent()
        feishu_cardkit.card_element_content_update(
            bot=self.bot,
            card_id=state.card_id,
            element_id=MARKDOWN_ELEMENT_ID,
            content=body or STREAMING_PLACEHOLDER,
            sequence=state.sequence,
            sleep=self.sleep,
            budget=budget,
        )

    def close(self, *, summary_of: str, budget: SendBudget) -> None:
        """Streaming off with a summary (the chat list shows it instead of "[generating]")."""
        state = self.state
        state.sequence += 1
        self.on_state(state)
        self.throttle.gap_wait()
        self.throttle.sent()
        feishu_cardkit.card_settings_update(
            bot=self.bot,
            card_id=state.card_id,
            settings={"config": {"streaming_mode": False, "summary": {"content": card_summary(summary_of)}}},
            sequence=state.sequence,
            sleep=self.sleep,
            budget=budget,
        )
