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
   its own fixed uuid, so there is one way to send plain chunks and a re-run skips the chunks already sent).
   A failure that is not a refusal (a 5xx, a transport error, a rate limit) is not one: while streaming, the
   next update tries again; in `finish` it is raised, so the delivery is retried later with the same uuids and
   sequences above the last.

Exactly once across crashes (what lark_oapi's MarkdownStreamController lacks): the controller starts from a
stored `StreamState` and reports every change through `on_state` BEFORE the Feishu call that depends on it
(the card id before the reply that carries it, each sequence before the update that uses it). A re-run after
a crash therefore continues on the same card with a higher sequence and never posts a second card or reply.

The controller decides; its collaborators each keep one part: the stored state (stream_state), the pace of
updates (stream_throttle), the calls on the current card with their sequences (stream_writer) and where the
answer is cut over cards (stream_layout). What a refusal means (retry, a new card, the plain fallback) is here.

Why not the SDK's controller: it is asyncio-only (Throttle needs a running loop; our turns run in sync Celery
tasks), its throttle fires on characters with no floor in time (a fast model exceeds 10 updates/s), and it
keeps its card id and sequence in memory only. Its coalescing idea is kept: only the newest text is sent.
"""

import logging
import time
from collections.abc import Callable

from django.conf import settings

from agents.models import Bot
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.budget import SendBudget
from feishu.outbound.cards import CARD_CHUNK_CHARS
from feishu.outbound.stream_layout import block_cut, card_body, rollover_at
from feishu.outbound.stream_state import PlainSender, StateListener, StreamState
from feishu.outbound.stream_throttle import UpdateThrottle
from feishu.outbound.stream_writer import CardWriter

logger = logging.getLogger(__name__)

# After Feishu failed to create or post the card for now (5xx, transport), the next try waits at least this long.
CARD_RETRY_SECONDS = 1.0
# Feishu's codes for a card whose streaming was closed (by us or by its 10-minute limit): continue in a new card.
STREAMING_ENDED_CODES = frozenset({200850, 300309})


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
        on_state: StateListener,
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
        self.on_state = on_state
        self.send_plain = send_plain
        self.state = state or StreamState()
        self.card_seconds = settings.FEISHU_STREAM_CARD_SECONDS if card_seconds is None else card_seconds
        self.card_chars = card_chars
        self.now = now
        self.monotonic = monotonic
        sleep = sleep or time.sleep
        self.throttle = UpdateThrottle(
            interval_ms=interval_ms, update_chars=update_chars, monotonic=monotonic, sleep=sleep
        )
        self.writer = CardWriter(
            bot=bot,
            chat_id=chat_id,
            reply_to_message_id=reply_to_message_id,
            reply_in_thread=reply_in_thread,
            uuid_base=uuid_base,
            state=self.state,
            on_state=on_state,
            throttle=self.throttle,
            now=now,
            sleep=sleep,
        )
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
        if not self.throttle.update_may_go(
            body=body, shown=self.state.shown, chat_id=self.chat_id, app_id=self.bot.feishu_app_id
        ):
            return  # too soon, or the chat is busy: this text is merged into the next update
        self._update(body, budget=SendBudget(chat_id=self.chat_id, first_taken=True))

    def finish(self, text: str) -> StreamState:
        """Write the complete text, close streaming; on a refused card, send it as plain replies. Idempotent.

        Raises FeishuApiError when Feishu fails for now (5xx, transport, rate limit after its retries)."""
        self._text = text
        self._final = True
        if self.state.is_finished:
            return self.state
        if not self.state.is_fallback and self._ensure_card():
            self._roll_while_needed(final=True)
        if not self.state.is_fallback and self._last_update_and_close(self._body(), push=self._update, summary_of=text):
            self.state.is_finished = True
            self.on_state(self.state)
            return self.state
        self._fallback_send(text)
        return self.state

    # --- the card ------------------------------------------------------------------------------------------
    def _body(self) -> str:
        return card_body(state=self.state, text=self._text)

    def _ensure_card(self) -> bool:
        """A card and the reply carrying it exist (created now if not); False once fallen back."""
        state = self.state
        try:
            if not state.card_id:
                # The card starts WITH the text so far (when it fits; else the rollover cuts it by updates): the
                # reply that carries it shows content the moment it lands, one content update fewer.
                body = self._body()
                self.writer.create(initial=body if len(body) <= self.card_chars else state.carry)
            if not state.message_id:
                self.writer.post()
        except FeishuApiError as error:
            if error.is_retryable:
                if self._final:
                    raise
                self._card_retry_at = self.monotonic() + max(self.throttle.interval, CARD_RETRY_SECONDS)
                return False  # a later update tries again
            self._fall_back(error, step="card")
            return False
        return True

    def _update(self, body: str, *, budget: SendBudget) -> bool:
        """An update while streaming: a refusal Feishu's streaming end explains continues in a new card, one a
        later try may fix is merged into the next update (raised in finish), any other falls back."""
        state = self.state
        previous = state.shown
        try:
            self.writer.push(body, budget=budget)
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

    def _update_before_rollover(self, body: str, *, budget: SendBudget) -> None:
        """The last update of a card that rolls over: a refusal leaves the card as it was (the text it missed
        continues in the next card either way), so it is logged, never retried."""
        try:
            self.writer.push(body, budget=budget)
        except FeishuApiError as error:
            logger.warning(
                "feishu card final update refused before rollover",
                extra={"bot": self.bot.slug, "code": error.code, "card_id": self.state.card_id},
            )

    def _last_update_and_close(self, body: str, *, push: Callable[..., object], summary_of: str) -> bool:
        """The card's last content update (when it does not show `body` yet), then its close: one send for both,
        as a card's ending took before the budget moved into `feishu_call` (the close's first request rides on
        the update's). Whether the close went through (False once fallen back)."""
        self.throttle.gap_wait()
        close_budget = SendBudget(chat_id=self.chat_id)
        if body != self.state.shown:
            push(body, budget=close_budget)
            close_budget = SendBudget(chat_id=self.chat_id, first_taken=True)
        return self._close_current(summary_of=summary_of, budget=close_budget)

    def _close_current(self, *, summary_of: str, budget: SendBudget) -> bool:
        """Streaming off with a summary; a refusal other than a failure finish may retry leaves the content."""
        if self.state.is_fallback:
            return False
        try:
            self.writer.close(summary_of=summary_of, budget=budget)
        except FeishuApiError as error:
            if error.code in STREAMING_ENDED_CODES:
                return True  # already closed by Feishu: the content stands
            if error.is_retryable and self._final:
                raise  # the delivery is retried: the next close uses a higher sequence
            logger.warning(
                "feishu card close refused",
                extra={"bot": self.bot.slug, "code": error.code, "card_id": self.state.card_id},
            )
        return True

    # --- rollover: a new card before the streaming limit or when the text outgrows one card -----------------
    def _roll_while_needed(self, *, final: bool) -> None:
        while not self.state.is_fallback:
            body = self._body()
            if len(body) > self.card_chars:
                self._roll(cut=block_cut(body, limit=self.card_chars, carry_len=len(self.state.carry)))
            elif not final and self.now() - self.state.opened_at >= self.card_seconds:
                self._roll(cut=len(body))
            else:
                return
            if not self._ensure_card():
                return

    def _roll(self, *, cut: int, closed_by_feishu: bool = False) -> None:
        """Close the current card with body[:cut] (fence closed), continue after it in a new card."""
        state = self.state
        rollover = rollover_at(state=state, text=self._text, cut=cut)
        if not closed_by_feishu:
            self._last_update_and_close(
                rollover.closed_text, push=self._update_before_rollover, summary_of=rollover.closed_text
            )
        # What the closed card shows stays with it: the delivery rows record each message's own text.
        state.closed_cards.append(
            {"card_id": state.card_id, "message_id": state.message_id, "text": rollover.closed_text}
        )
        state.card_id, state.message_id, state.sequence, state.shown = "", "", 0, ""
        state.card_index += 1
        state.offset = rollover.offset
        state.carry = rollover.carry
        self.on_state(state)

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
