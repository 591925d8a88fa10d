"""The streaming card (R3): the answer is written into a CardKit card while the model produces it.

How one answer goes out:
1. At the first text (not before: no empty card waits for the model), `card.create` of a JSON 2.0 card in
   streaming mode with one markdown element holding the text so far, then a reply to the source message
   carrying the card by reference (`reply_in_thread` where the source is in a topic), with a uuid fixed per
   (answer, card) so Feishu itself drops a second reply. The person sees the first words the moment the reply
   lands; no content update has to follow it through the send budget first (as AstrBot does it).
2. `card_element_content_update` with the whole text so far, a strictly increasing `sequence`, at most one
   update per `interval_ms` (sooner once `update_chars` new characters wait, never closer than 120 ms: Feishu
   allows 10 updates per second per card). An intermediate update takes from the send budget only if it can
   at once (`send_budget_try`); a skipped one is merged into the next.
3. `finish`: the complete text, then `card_settings_update` closing streaming mode with a summary.
4. Before Feishu's 10-minute streaming limit (`card_seconds`) or when the text outgrows one card, the card is
   closed at a block boundary (a fence cut open is closed and reopened) and the answer continues in a new card.
5. When card creation, the reply or an update is refused, the rest goes out as plain text replies with the
   whole answer, once, through the caller's `send_plain` (delivery's chunk path: a row per chunk first, each
   its own fixed uuid, so there is one way to send plain chunks and a re-run skips the chunks already sent). A failure that is not a refusal
   (a 5xx, a transport error, a rate limit) is not one: while streaming, the next update tries again; in
   `finish` it is raised, so the delivery is retried later with the same uuids and sequences above the last.

Exactly once across crashes (what lark_oapi's MarkdownStreamController lacks): the controller starts from a
stored `StreamState` and reports every change through `on_state` BEFORE the Feishu call that depends on it
(the card id before the reply that carries it, each sequence before the update that uses it). A re-run after
a crash therefore continues on the same card with a higher sequence and never posts a second card or reply.
Why not the SDK's controller: it is asyncio-only (Throttle needs a running loop; our turns run in sync Celery
tasks), its throttle fires on characters with no floor in time (a fast model exceeds 10 updates/s), and it
keeps its card id and sequence in memory only. Its coalescing idea is kept: only the newest text is sent.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from agents.models import Bot
from feishu.outbound import cardkit as feishu_cardkit
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.budget import SendBudget, send_budget_try
from feishu.outbound.cards import (
    CARD_CHUNK_CHARS,
    MARKDOWN_ELEMENT_ID,
    STREAMING_PLACEHOLDER,
    card_summary,
    fence_closing,
    markdown_card,
    open_fence,
)

logger = logging.getLogger(__name__)

# Feishu allows 10 updates per second per card: never two updates of one card closer than this. 120 ms, not
# 100: Feishu counts arrivals, and a request that left 100 ms after another can arrive closer to it.
MIN_UPDATE_GAP_SECONDS = 0.12
# After Feishu failed to create or post the card for now (5xx, transport), the next try waits at least this long.
CARD_RETRY_SECONDS = 1.0
# Feishu's codes for a card whose streaming was closed (by us or by its 10-minute limit): continue in a new card.
STREAMING_ENDED_CODES = frozenset({200850, 300309})


@dataclass
class StreamState:
    """What a caller stores on the turn (as `as_dict()`) and hands back to resume after a crash."""

    card_id: str = ""
    message_id: str = ""  # the reply carrying card_id
    sequence: int = 0  # the highest sequence used on card_id
    shown: str = ""  # the text the current card was last given
    card_index: int = 0  # 0 for the first card, +1 per rollover (part of the reply's uuid)
    offset: int = 0  # where the current card's text starts in the whole answer
    carry: str = ""  # a fence reopened at the top of the current card
    opened_at: float = 0.0  # epoch seconds when the current card started streaming
    closed_cards: list[dict[str, str]] = field(default_factory=list)
    is_fallback: bool = False  # the card path was refused: the answer goes out as plain replies
    fallback_message_ids: list[str] = field(default_factory=list)
    is_finished: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "StreamState":
        known = {name: value for name, value in (data or {}).items() if name in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def card_message_ids(self) -> list[str]:
        """The cards' messages, in order (closed cards, then the current card)."""
        ids = [card["message_id"] for card in self.closed_cards if card.get("message_id")]
        return [*ids, self.message_id] if self.message_id else ids

    @property
    def message_ids(self) -> list[str]:
        """Every message this answer posted, in order (the cards, then the plain fallbacks)."""
        return self.card_message_ids + self.fallback_message_ids


def stream_uuid(*, uuid_base: str, kind: str, index: int) -> str:
    """The uuid of the reply carrying a card, fixed per (answer, card); Feishu's limit is 50 characters."""
    return f"{uuid_base[:40]}-{kind}{index}"


# The plain fallback: (the whole answer, the state so far) -> the message ids it posted, in order; idempotent.
PlainSender = Callable[[str, StreamState], list[str]]


class StreamingCard:
    """Feed it the whole text so far with `update`, then `finish` with the complete text."""

    def __init__(
        self,
        *,
        bot: Bot,
        chat_id: str,
        reply_to_message_id: str,
        reply_in_thread: bool,
        uuid_base: str,
        on_state: Callable[[StreamState], None],
        send_plain: PlainSender,
        state: StreamState | None = None,
        interval_ms: int | None = None,
        update_chars: int | None = None,
        card_seconds: float | None = None,
        card_chars: int = CARD_CHUNK_CHARS,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.bot = bot
        self.chat_id = chat_id
        self.reply_to_message_id = reply_to_message_id
        self.reply_in_thread = reply_in_thread
        self.uuid_base = uuid_base
        self.on_state = on_state
        self.send_plain = send_plain
        self.state = state or StreamState()
        interval = settings.FEISHU_STREAM_UPDATE_INTERVAL_MS if interval_ms is None else interval_ms
        self.interval = max(MIN_UPDATE_GAP_SECONDS, interval / 1000)
        self.update_chars = settings.FEISHU_STREAM_UPDATE_CHARS if update_chars is None else update_chars
        self.card_seconds = settings.FEISHU_STREAM_CARD_SECONDS if card_seconds is None else card_seconds
        self.card_chars = card_chars
        self.now = now  # epoch seconds: the card's age against Feishu's streaming limit (stored, survives a crash)
        self.monotonic = monotonic  # the throttle's clock (gaps between this process' own calls)
        self.sleep = sleep or time.sleep
        self._last_push = 0.0  # monotonic time of the last update sent to the current card
        self._text = ""
        self._final = False  # in finish: a failure a later try may fix is raised, not merged
        self._card_retry_at = 0.0  # after a failed create/reply while streaming, not again before this

    # --- the producer's side -----------------------------------------------------------------------------
    def update(self, text: str) -> None:
        """The whole answer so far; sends an update when the throttle and the budget allow, else merges it."""
        self._text = text
        if self.state.is_finished or self.state.is_fallback:
            return
        if not self.state.card_id and not self._body().strip():
            return  # the card is created at the first text, with it: no empty card waits for the model
        if not (self.state.card_id and self.state.message_id) and self.monotonic() < self._card_retry_at:
            return  # Feishu failed the card a moment ago: not once per token of the answer
        if not self._ensure_card():
            return
        self._roll_while_needed(final=False)
        if self.state.is_fallback:
            return
        body = self._body()
        if body == self.state.shown:
            return
        since = self.monotonic() - self._last_push
        waiting = len(body) - len(self.state.shown)
        if since < MIN_UPDATE_GAP_SECONDS or (since < self.interval and waiting < self.update_chars):
            return
        if not send_budget_try(chat_id=self.chat_id, app_id=self.bot.feishu_app_id):
            return  # the chat is busy: this text is merged into the next update
        self._push(body, budget=SendBudget(chat_id=self.chat_id, first_taken=True))

    def finish(self, text: str) -> StreamState:
        """Write the complete text, close streaming; on a refused card, send it as plain replies. Idempotent.

        Raises FeishuApiError when Feishu fails for now (5xx, transport, rate limit after its retries)."""
        self._text = text
        self._final = True
        if self.state.is_finished:
            return self.state
        if not self.state.is_fallback and self._ensure_card():
            self._roll_while_needed(final=True)
        if not self.state.is_fallback and self._last_update_and_close(self._body(), push=self._push, summary_of=text):
            self.state.is_finished = True
            self.on_state(self.state)
            return self.state
        self._fallback_send(text)
        return self.state

    # --- the card ------------------------------------------------------------------------------------------
    def _ensure_card(self) -> bool:
        """A card and the reply carrying it exist (created now if not); False once fallen back."""
        state = self.state
        try:
            if not state.card_id:
                # The card starts WITH the text so far (when it fits; else the rollover cuts it by updates): the
                # reply that carries it shows content the moment it lands, one content update fewer.
                body = self._body()
                initial = body if len(body) <= self.card_chars else state.carry
                card = markdown_card(text=initial or STREAMING_PLACEHOLDER, streaming=True)
                state.card_id = feishu_cardkit.card_create(
                    bot=self.bot, card=card, sleep=self.sleep, budget=SendBudget(chat_id="")
                )
                state.sequence, state.shown, state.opened_at, state.message_id = 0, initial, self.now(), ""
                self.on_state(state)  # stored before the reply that carries it: a re-run replies with this card
            if not state.message_id:
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
        except FeishuApiError as error:
            if error.is_retryable:
                if self._final:
                    raise
                self._card_retry_at = self.monotonic() + max(self.interval, CARD_RETRY_SECONDS)
                return False  # a later update tries again
            self._fall_back(error, step="card")
            return False
        return True

    def _rest_start(self) -> int:
        """Where the current card's share of the answer starts: a continued card skips the blank lines."""
        start = self.state.offset
        if self.state.card_index:
            while start < len(self._text) and self._text[start] == "\n":
                start += 1
        return start

    def _body(self) -> str:
        return self.state.carry + self._text[self._rest_start() :]

    def _push(self, body: str, *, budget: SendBudget) -> bool:
        state = self.state
        previous = state.shown
        state.sequence += 1
        state.shown = body
        self.on_state(state)  # the sequence is stored before it is used: a re-run never reuses it
        self._last_push = self.monotonic()
        try:
            feishu_cardkit.card_element_content_update(
                bot=self.bot,
                card_id=state.card_id,
                element_id=MARKDOWN_ELEMENT_ID,
                content=body or STREAMING_PLACEHOLDER,
                sequence=state.sequence,
                sleep=self.sleep,
                budget=budget,
            )
        except FeishuApiError as error:
            if error.code in STREAMING_ENDED_CODES:
                # Feishu closed streaming (its time limit came first): the card keeps what it showed before;
                # the rest continues in a new card.
                state.shown = previous
                self._roll(cut=max(len(previous), len(state.carry)), closed_by_feishu=True)
                return False
            if error.is_retryable:
                state.shown = previous  # not shown: the next update (or finish) sends it again
                self.on_state(state)
                if self._final:
                    raise
                return False  # merged into the next update
            self._fall_back(error, step="update")
            return False
        return True

    def _wait_gap(self) -> None:
        gap = MIN_UPDATE_GAP_SECONDS - (self.monotonic() - self._last_push)
        if gap > 0:
            self.sleep(gap)

    def _last_update_and_close(self, body: str, *, push: Callable[..., object], summary_of: str) -> bool:
        """The card's last content update (when it does not show `body` yet), then its close: one send for both,
        as a card's ending took before the budget moved into `feishu_call` (the close's first request rides on
        the update's). Whether the close went through (False once fallen back)."""
        self._wait_gap()
        close_budget = SendBudget(chat_id=self.chat_id)
        if body != self.state.shown:
            push(body, budget=close_budget)
            close_budget = SendBudget(chat_id=self.chat_id, first_taken=True)
        return self._close_current(summary_of=summary_of, budget=close_budget)

    def _close_current(self, *, summary_of: str, budget: SendBudget) -> bool:
        """Streaming off with a summary (the chat list shows it instead of "[generating]")."""
        state = self.state
        if state.is_fallback:
            return False
        state.sequence += 1
        self.on_state(state)
        self._wait_gap()
        self._last_push = self.monotonic()
        try:
            feishu_cardkit.card_settings_update(
                bot=self.bot,
                card_id=state.card_id,
                settings={"config": {"streaming_mode": False, "summary": {"content": card_summary(summary_of)}}},
                sequence=state.sequence,
                sleep=self.sleep,
                budget=budget,
            )
        except FeishuApiError as error:
            if error.code in STREAMING_ENDED_CODES:
                return True  # already closed by Feishu: the content stands
            if error.is_retryable and self._final:
                raise  # the delivery is retried: the next close uses a higher sequence
            logger.warning(
                "feishu card close refused", extra={"bot": self.bot.slug, "code": error.code, "card_id": state.card_id}
            )
        return True

    # --- rollover: a new card before the streaming limit or when the text outgrows one card -----------------
    def _roll_while_needed(self, *, final: bool) -> None:
        while not self.state.is_fallback:
            body = self._body()
            if len(body) > self.card_chars:
                self._roll(cut=_block_cut(body, limit=self.card_chars, carry_len=len(self.state.carry)))
            elif not final and self.now() - self.state.opened_at >= self.card_seconds:
                self._roll(cut=len(body))
            else:
                return
            if not self._ensure_card():
                return

    def _roll(self, *, cut: int, closed_by_feishu: bool = False) -> None:
        """Close the current card with body[:cut] (fence closed), continue after it in a new card."""
        state = self.state
        body = self._body()[:cut]
        fence = open_fence(body)
        if fence:
            body += "\n" + fence_closing(fence)
        if not closed_by_feishu:
            self._last_update_and_close(body, push=self._push_closing, summary_of=body)
        offset = self._rest_start() + max(0, cut - len(state.carry))
        # What the closed card shows stays with it: the delivery rows record each message's own text.
        state.closed_cards.append({"card_id": state.card_id, "message_id": state.message_id, "text": body})
        state.card_id, state.message_id, state.sequence, state.shown = "", "", 0, ""
        state.card_index += 1
        state.offset = offset
        state.carry = fence + "\n" if fence else ""
        self.on_state(state)

    def _push_closing(self, body: str, *, budget: SendBudget) -> None:
        state = self.state
        state.sequence += 1
        state.shown = body
        self.on_state(state)
        self._last_push = self.monotonic()
        try:
            feishu_cardkit.card_element_content_update(
                bot=self.bot,
                card_id=state.card_id,
                element_id=MARKDOWN_ELEMENT_ID,
                content=body,
                sequence=state.sequence,
                sleep=self.sleep,
                budget=budget,
            )
        except FeishuApiError as error:
            logger.warning(
                "feishu card final update refused before rollover",
                extra={"bot": self.bot.slug, "code": error.code, "card_id": state.card_id},
            )

    # --- fallback: plain replies with the whole text -------------------------------------------------------------
    def _fall_back(self, error: FeishuApiError, *, step: str) -> None:
        logger.warning(
            "feishu streaming card refused, falling back to a plain reply",
            extra={"bot": self.bot.slug, "step": step, "code": error.code},
        )
        self.state.is_fallback = True
        self.on_state(self.state)

    def _fallback_send(self, text: str) -> None:
        state = self.state
        state.fallback_message_ids = self.send_plain(text, state)  # chunks sent before a crash are not sent again
        state.is_finished = True
        self.on_state(state)


def _block_cut(body: str, *, limit: int, carry_len: int) -> int:
    """Where to end a card that outgrew `limit`: the last blank line outside a fence, else the last line end."""
    room = limit - 12  # space for a fence closed at the cut
    window = body[:room]
    position = window.rfind("\n\n")
    while position > carry_len and open_fence(window[:position]):
        position = window.rfind("\n\n", 0, position)
    if position <= carry_len:
        position = window.rfind("\n")
    if position <= carry_len:
        position = room
    return position
