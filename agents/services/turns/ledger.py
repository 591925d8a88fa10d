"""The turn ledger: one row per (bot, source message) and every transition of its status (L1, T2).

    queued -> running -> replied -> delivered | delivery_failed
                 |  \\-> failed                (a permanent error, attempts exhausted, a poison turn)
                 \\---> skipped               (the channel had nothing to submit)

Every write here is a conditional UPDATE on the turn's row, so two runs of one turn (a redelivered task beside a
slow one, the sweeper beside a Celery retry) still leave one reply and one final status: the reply is stored only
`WHERE reply_message IS NULL`, a final status is written only over a non-final one.
"""

import logging
import time
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Bot, Message, Thread, Turn
from agents.services.threads import message_create
from amuxweb.text import storable_text

logger = logging.getLogger(__name__)

# Model attempts (transient provider errors, a transient read while preparing): at most this many in all, waiting
# base·2^(n-1) seconds (capped) in between.
TURN_MAX_ATTEMPTS = 5
TURN_BACKOFF_BASE_SECONDS = 2.0
TURN_BACKOFF_MAX_SECONDS = 300.0
# Delivery attempts of a replied turn (429, 5xx, transport, soft time limit): at most this many, then
# delivery_failed. The waits (5, 10, 20, 40 s) stay below DELIVERY_RESUME_AFTER_SECONDS, so the sweeper never
# resumes a delivery a Celery retry is about to make.
DELIVERY_MAX_ATTEMPTS = 5
DELIVERY_BACKOFF_BASE_SECONDS = 5.0
DELIVERY_BACKOFF_MAX_SECONDS = 60.0
ERROR_MAX_CHARS = 2000

FINISHED_STATUSES = frozenset(
    {Turn.Status.DELIVERED, Turn.Status.DELIVERY_FAILED, Turn.Status.FAILED, Turn.Status.SKIPPED}
)
OPEN_STATUSES = frozenset({Turn.Status.QUEUED, Turn.Status.RUNNING, Turn.Status.REPLIED})


class TurnRetryLater(Exception):
    """Run the turn again after `countdown_seconds` (the Celery task retries): a transient provider error, a
    transient read while preparing, or a delivery Feishu refused for now."""

    def __init__(self, message: str, *, countdown_seconds: float, attempt: int) -> None:
        super().__init__(message)
        self.countdown_seconds = countdown_seconds
        self.attempt = attempt


def backoff_seconds(*, attempt: int, retry_after_seconds: float | None = None) -> float:
    delay = min(TURN_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), TURN_BACKOFF_MAX_SECONDS)
    if retry_after_seconds:
        delay = max(delay, min(retry_after_seconds, TURN_BACKOFF_MAX_SECONDS))
    return delay


def delivery_backoff_seconds(*, attempt: int) -> float:
    return min(DELIVERY_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), DELIVERY_BACKOFF_MAX_SECONDS)


def turn_get_or_create(
    *, bot: Bot, thread: Thread, trigger: str, source_message_id: str, user_message: Message | None = None
) -> tuple[Turn, bool]:
    """The turn of (bot, source message): created once, found every other time (T2).

    Insert first (in a savepoint); the unique constraint's IntegrityError means the turn exists, and it is
    read then. Safe under concurrency, no check-then-act, and the common case (a new trigger) is one INSERT.
    """
    try:
        with transaction.atomic():  # a savepoint when called inside a transaction
            turn = Turn.objects.create(
                bot=bot, thread=thread, trigger=trigger, source_message_id=source_message_id, user_message=user_message
            )
        return turn, True
    except IntegrityError:
        return Turn.objects.get(bot=bot, source_message_id=source_message_id), False


def turn_claim(*, turn_id: int) -> Turn | None:
    """Take the turn for one run: None when it is finished (or gone); a replied turn is taken for delivery only.

    A `running` turn is claimed again on purpose: the sweeper re-enqueues runs left running past the task's hard
    time limit, and the reply's conditional store still keeps exactly one reply.
    """
    with transaction.atomic():
        turn = (
            Turn.objects.select_for_update(of=("self",))
            .select_related("reply_message", "user_message", "thread", "bot__primary_model__provider")
            .filter(pk=turn_id)
            .first()
        )
        if turn is None or turn.status in FINISHED_STATUSES:
            return None
        turn.claimed_at = timezone.now()
        if turn.reply_message is not None:
            turn.status = Turn.Status.REPLIED
            turn.save(update_fields=["status", "claimed_at"])
            return turn
        turn.status = Turn.Status.RUNNING
        turn.attempts += 1
        turn.started_at = turn.started_at or turn.claimed_at
        turn.save(update_fields=["status", "attempts", "started_at", "claimed_at"])
        return turn


def turn_prepared_store(
    *, turn: Turn, content: str, prompt: str, author: str, context_decision_id: int | None, channel_state: dict
) -> Turn:
    """Record what the channel prepared, once: the user_message (content + the prompt the model gets), the context
    decision and the channel's own notes. A later run finds them and sends exactly what was recorded."""
    with transaction.atomic():
        locked = Turn.objects.select_for_update(of=("self",)).get(pk=turn.pk)
        if locked.user_message_id is None:
            content, prompt = storable_text(content), storable_text(prompt)
            message = message_create(
                thread=turn.thread,
                kind=Message.Kind.USER_MESSAGE,
                content=content or prompt,
                prompt=prompt if prompt and prompt != content else "",
                author=author,
            )
            Turn.objects.filter(pk=turn.pk).update(
                user_message=message, context_decision_id=context_decision_id, channel_state=channel_state
            )
    return Turn.objects.select_related("user_message", "thread", "bot__primary_model__provider").get(pk=turn.pk)


def attempt_entry(*, turn: Turn, outcome: str, started: float, error: str = "", retry_in: float | None = None) -> list:
    """`turn.retry_history` with one more entry for this attempt."""
    entry: dict = {
        "attempt": turn.attempts,
        "at": timezone.now().isoformat(),
        "outcome": outcome,
        "duration_ms": int((time.monotonic() - started) * 1000),
    }
    if error:
        entry["error"] = error
    if retry_in is not None:
        entry["retry_in_seconds"] = retry_in
    return [*turn.retry_history, entry]


def turn_requeue(*, turn: Turn, error: str, history: list, model_input: dict | None = None) -> None:
    """A model attempt failed for now: back to queued (the task retries after its backoff)."""
    fields: dict = {"status": Turn.Status.QUEUED, "error": storable_text(error)[:ERROR_MAX_CHARS]}
    fields["retry_history"] = history
    if model_input is not None:
        fields["model_input"] = model_input
    Turn.objects.filter(pk=turn.pk, reply_message__isnull=True, status__in=OPEN_STATUSES).update(**fields)


def turn_reply_store(*, turn: Turn, text: str, usage: dict, model_input: dict, history: list) -> tuple[Message, bool]:
    """Store the agent_reply and mark the turn replied, unless another run stored one first: (reply, won)."""
    with transaction.atomic():
        # The conditional UPDATE is the guard: on PostgreSQL a concurrent finisher's UPDATE waits for this row
        # lock, then re-checks `reply_message IS NULL` and matches nothing.
        reply = message_create(
            thread=turn.thread,
            kind=Message.Kind.AGENT_REPLY,
            content=storable_text(text),
            author=turn.bot.name,
            usage=usage,
        )
        won = Turn.objects.filter(pk=turn.pk, reply_message__isnull=True, status__in=OPEN_STATUSES).update(
            reply_message=reply,
            status=Turn.Status.REPLIED,
            usage=usage,
            model_input=model_input,
            retry_history=history,
            error="",
            replied_at=timezone.now(),
        )
        if not won:
            # Another run of this turn stored its reply first: drop ours (rolled back with this transaction).
            transaction.set_rollback(True)
    if not won:
        return Turn.objects.select_related("reply_message").get(pk=turn.pk).reply_message, False
    return reply, True


def turn_delivery_attempt_count(*, turn: Turn) -> int:
    """Count one more delivery attempt; the new count."""
    Turn.objects.filter(pk=turn.pk).update(delivery_attempts=F("delivery_attempts") + 1)
    turn.delivery_attempts = Turn.objects.values_list("delivery_attempts", flat=True).get(pk=turn.pk)
    return turn.delivery_attempts


def turn_delivery_error_note(*, turn: Turn, error: str) -> None:
    """A delivery attempt failed for now: the error stays visible while the turn waits for the next attempt."""
    Turn.objects.filter(pk=turn.pk, status=Turn.Status.REPLIED).update(error=storable_text(error)[:ERROR_MAX_CHARS])


def _finish(*, turn_id: int, status: str, from_statuses, now: datetime | None = None, **fields) -> bool:
    now = now or timezone.now()
    if "error" in fields:
        fields["error"] = storable_text(fields["error"])[:ERROR_MAX_CHARS]
    done = Turn.objects.filter(pk=turn_id, status__in=from_statuses).update(status=status, finished_at=now, **fields)
    if done:
        logger.info("turn finished", extra={"turn_id": turn_id, "status": status, "error": fields.get("error", "")})
    return bool(done)


def turn_mark_delivered(*, turn: Turn) -> bool:
    return _finish(turn_id=turn.pk, status=Turn.Status.DELIVERED, from_statuses=[Turn.Status.REPLIED], error="")


def turn_mark_delivery_failed(*, turn: Turn, error: str) -> bool:
    return _finish(
        turn_id=turn.pk, status=Turn.Status.DELIVERY_FAILED, from_statuses=[Turn.Status.REPLIED], error=error
    )


def turn_mark_failed(*, turn_id: int, error: str, history: list | None = None, model_input: dict | None = None) -> bool:
    """Failed without a reply (a reply stored meanwhile wins: the condition is on reply_message IS NULL)."""
    fields: dict = {"error": error}
    if history is not None:
        fields["retry_history"] = history
    if model_input is not None:
        fields["model_input"] = model_input
    fields["error"] = storable_text(error)[:ERROR_MAX_CHARS]
    done = Turn.objects.filter(
        pk=turn_id, reply_message__isnull=True, status__in=[Turn.Status.QUEUED, Turn.Status.RUNNING]
    ).update(status=Turn.Status.FAILED, finished_at=timezone.now(), **fields)
    if done:
        logger.warning("turn failed", extra={"turn_id": turn_id, "error": fields["error"]})
    return bool(done)


def turn_mark_skipped(*, turn: Turn, reason: str) -> bool:
    return _finish(
        turn_id=turn.pk,
        status=Turn.Status.SKIPPED,
        from_statuses=[Turn.Status.QUEUED, Turn.Status.RUNNING],
        error=reason,
    )


def turn_channel_state_merge(*, turn: Turn, values: dict) -> dict:
    """Merge the channel's notes into `turn.channel_state` (the keys given replace theirs); returns the merged notes.

    The row is locked while merging, so notes written one after another by the same run (the receipt reaction,
    the streaming card's state) all stay; `turn.channel_state` is updated in place.
    """
    with transaction.atomic():
        current = Turn.objects.select_for_update(of=("self",)).values_list("channel_state", flat=True).get(pk=turn.pk)
        merged = {**(current or {}), **values}
        Turn.objects.filter(pk=turn.pk).update(channel_state=merged)
    turn.channel_state = merged
    return merged
