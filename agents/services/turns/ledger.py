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

from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from agents.models import Bot, Message, Thread, Turn
from agents.principals import NOBODY, Admission, Principal
from agents.secrets import hub_secrets
from agents.services.threads import message_build, message_created_log
from core.redaction import redact, redacted
from core.statements import (
    JSONKeysReplaced,
    insert_unless_exists,
    insert_with_update,
    update_returning,
    update_statement,
)
from core.text import storable_text

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

    def __init__(self, message: str, *, countdown_seconds: float, attempt: int, is_delivery: bool = False) -> None:
        super().__init__(message)
        self.countdown_seconds = countdown_seconds
        self.attempt = attempt
        # The reply is stored and only its delivery is left: the retry goes to the deliveries queue (issue 11).
        self.is_delivery = is_delivery


def backoff_seconds(*, attempt: int, retry_after_seconds: float | None = None) -> float:
    delay = min(TURN_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), TURN_BACKOFF_MAX_SECONDS)
    if retry_after_seconds:
        delay = max(delay, min(retry_after_seconds, TURN_BACKOFF_MAX_SECONDS))
    return delay


def delivery_backoff_seconds(*, attempt: int) -> float:
    return min(DELIVERY_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), DELIVERY_BACKOFF_MAX_SECONDS)


def turn_get_or_create(
    *,
    bot: Bot,
    thread: Thread,
    trigger: str,
    source_message_id: str,
    user_message: Message | None = None,
    principal: Principal = NOBODY,
    admission: Admission | None = None,
) -> tuple[Turn, bool]:
    """The turn of (bot, source message): created once, found every other time (T2).

    `principal` and `admission` (U1, U2): who the turn acts for and the door's decision, written with the insert
    (no statement of their own); a turn found again keeps the ones it was created with.

    Insert unless it exists (INSERT ... ON CONFLICT DO NOTHING RETURNING: one statement, no savepoint around an
    insert that may fail; issue 28), the row read only when it was there already. Safe under concurrency (a
    concurrent insert of the same key waits for the other transaction, then skips), no check-then-act.
    """
    turn = Turn(
        bot=bot,
        thread=thread,
        trigger=trigger,
        source_message_id=source_message_id,
        user_message=user_message,
        principal_open_id=principal.open_id[:64],
        principal_union_id=principal.union_id[:64],
        principal_user_id=principal.user_id,
        admission=admission.as_record() if admission is not None else {},
    )
    if insert_unless_exists(instance=turn, conflict_fields=("bot", "source_message_id")):
        return turn, True
    return Turn.objects.get(bot=bot, source_message_id=source_message_id), False


# What a claimed run reads with its turn (one statement): its messages, thread, bot and the bot's model and provider.
CLAIM_RELATED = ("reply_message", "user_message", "thread", "bot__primary_model__provider")


def turn_claim(*, turn_id: int, read: Turn | None = None) -> Turn | None:
    """Take the turn for one run: None when it is finished (or gone); a replied turn is taken for delivery only.

    A `running` turn is claimed again on purpose: the sweeper re-enqueues runs left running past the task's hard
    time limit, and the reply's conditional store still keeps exactly one reply.

    `read`: the turn as the caller read it a moment ago (with CLAIM_RELATED) inside the transaction that holds its
    conversation (conversation.turn_claim_in_order, issue 28): claimed by one UPDATE conditional on what was read
    (status and attempts), no locked re-read. When another writer changed it meanwhile, the locked path runs.
    """
    if read is not None:
        if read.status in FINISHED_STATUSES:
            return None
        expected = {"status": read.status, "attempts": read.attempts, "delivery_attempts": read.delivery_attempts}
        fields = _claim_fields(turn=read)
        if Turn.objects.filter(pk=read.pk, **expected).update(**{name: getattr(read, name) for name in fields}):
            return read
    # No savepoint when the caller's transaction holds the conversation (conversation.turn_claim_in_order): two
    # statements fewer per turn, and nothing here is rolled back on its own.
    with transaction.atomic(savepoint=False):
        # A list, not .first(): a pk matches one row at most, and .first()'s ORDER BY makes Django hash every
        # selected column of the six joined tables to place it (~2 ms of CPU per claim; issue 11).
        claimed = list(Turn.objects.select_for_update(of=("self",)).select_related(*CLAIM_RELATED).filter(pk=turn_id))
        turn = claimed[0] if claimed else None
        if turn is None or turn.status in FINISHED_STATUSES:
            return None
        turn.save(update_fields=_claim_fields(turn=turn))
        return turn


def _claim_fields(*, turn: Turn) -> list[str]:
    """Apply one claim to `turn` in memory; the fields it changed. A replied turn's run only delivers: its delivery
    attempt is counted in the claim's own UPDATE."""
    turn.claimed_at = timezone.now()
    if turn.reply_message_id is not None:
        turn.status = Turn.Status.REPLIED
        turn.delivery_attempts += 1
        return ["status", "claimed_at", "delivery_attempts"]
    turn.status = Turn.Status.RUNNING
    turn.attempts += 1
    turn.started_at = turn.started_at or turn.claimed_at
    return ["status", "attempts", "started_at", "claimed_at"]


def turn_prepared_store(
    *, turn: Turn, content: str, prompt: str, author: str, context_decision_id: int | None, channel_state: dict
) -> Turn:
    """Record what the channel prepared, once: the user_message (content + the prompt the model gets), the context
    decision and the channel's own notes. A later run finds them and sends exactly what was recorded.

    The UPDATE is conditional on `user_message IS NULL` (on PostgreSQL a concurrent preparer's UPDATE waits for
    this row lock, then matches nothing), so two racing runs keep one record; the run's own `turn` is updated in
    place, and only the run that lost re-reads the winner's record.
    """
    with transaction.atomic():
        content, prompt = storable_text(content), storable_text(prompt)
        message = message_build(
            thread=turn.thread,
            kind=Message.Kind.USER_MESSAGE,
            content=content or prompt,
            prompt=prompt if prompt and prompt != content else "",
            author=author,
        )
        # The message rides in the conditional UPDATE's statement (PostgreSQL; issue 28). Merged, not replaced: the
        # claim may have noted the turns this one collected (conversation.turns_collect).
        won = insert_with_update(
            instance=message,
            queryset=Turn.objects.filter(pk=turn.pk, user_message__isnull=True),
            values={
                "context_decision_id": context_decision_id,
                "channel_state": (
                    JSONKeysReplaced("channel_state", channel_state) if channel_state else F("channel_state")
                ),
            },
            reference="user_message",
        )
        if not won:
            transaction.set_rollback(True)  # another run recorded its prompt first: ours goes
    if not won:
        return Turn.objects.select_related("user_message", "thread", "bot__primary_model__provider").get(pk=turn.pk)
    message_created_log(message=message)
    turn.user_message = message
    turn.context_decision_id = context_decision_id
    turn.channel_state = {**(turn.channel_state or {}), **channel_state}
    return turn


def error_text(error: str) -> str:
    """A turn's error as stored and shown: every hub secret redacted, then cut (issue 30: never cut first)."""
    return redacted(storable_text(error), secrets=hub_secrets())[:ERROR_MAX_CHARS]


def attempt_entry(*, turn: Turn, outcome: str, started: float, error: str = "", retry_in: float | None = None) -> list:
    """`turn.retry_history` with one more entry for this attempt."""
    entry: dict = {
        "attempt": turn.attempts,
        "at": timezone.now().isoformat(),
        "outcome": outcome,
        "duration_ms": int((time.monotonic() - started) * 1000),
    }
    if error:
        entry["error"] = error_text(error)
    if retry_in is not None:
        entry["retry_in_seconds"] = retry_in
    return [*turn.retry_history, entry]


def turn_requeue(*, turn: Turn, error: str, history: list, model_input: dict | None = None) -> None:
    """A model attempt failed for now: back to queued (the task retries after its backoff). The retry is an enqueue
    the broker holds from now on: stamped, so the sweeper leaves the turn to it while the broker could hold it."""
    fields: dict = {"status": Turn.Status.QUEUED, "error": error_text(error), "enqueued_at": timezone.now()}
    fields["retry_history"] = history
    if model_input is not None:
        fields["model_input"] = model_input
    Turn.objects.filter(pk=turn.pk, reply_message__isnull=True, status__in=OPEN_STATUSES).update(**fields)


def turn_reply_store(
    *, turn: Turn, text: str, usage: dict, model_input: dict, history: list
) -> tuple[Message | None, bool]:
    """Store the agent_reply and mark the turn replied, unless another run stored one first: (reply, won).

    A loser gets the winner's reply, or None when the turn was closed meanwhile without one (failed, skipped).

    The winner's `turn` is updated in place (replied, its reply, its first delivery attempt counted in the same
    UPDATE: the runner delivers next), so the run goes on without re-reading the row; a loser re-reads it.
    """
    # The one redaction step on the way out (issue 30): what is stored is what Feishu, /history/ and the next
    # turn's context get, so a secret the model echoed stops here.
    clean = redact(storable_text(text), secrets=hub_secrets())
    with transaction.atomic():
        # The conditional UPDATE is the guard: on PostgreSQL a concurrent finisher's UPDATE waits for this row
        # lock, then re-checks `reply_message IS NULL` and matches nothing.
        reply = message_build(
            thread=turn.thread,
            kind=Message.Kind.AGENT_REPLY,
            content=clean.text,
            author=turn.bot.name,
            usage=usage,
        )
        # The reply rides in the conditional UPDATE's statement (PostgreSQL; issue 28).
        won = insert_with_update(
            instance=reply,
            queryset=Turn.objects.filter(pk=turn.pk, reply_message__isnull=True, status__in=OPEN_STATUSES),
            values={
                "status": Turn.Status.REPLIED,
                "usage": usage,
                "model_input": model_input,
                "retry_history": history,
                "error": "",
                "replied_at": timezone.now(),
                "delivery_attempts": F("delivery_attempts") + 1,
                "redaction_count": F("redaction_count") + clean.count,
            },
            reference="reply_message",
        )
        if not won:
            # Another run of this turn stored its reply first: drop ours (rolled back with this transaction).
            transaction.set_rollback(True)
    if not won:
        turn.refresh_from_db()  # the winner's reply and notes (e.g. its streaming card) are what gets delivered
        turn_delivery_attempt_count(turn=turn)
        return turn.reply_message, False
    message_created_log(message=reply)
    turn.reply_message = reply
    turn.status = Turn.Status.REPLIED
    turn.usage, turn.model_input, turn.retry_history, turn.error = usage, model_input, history, ""
    turn.delivery_attempts += 1
    turn.redaction_count += clean.count
    return reply, True


def turn_delivery_attempt_count(*, turn: Turn) -> int:
    """Count one more delivery attempt; the new count. (The common paths count it in the claim's or the reply's
    own UPDATE; this is for a run that found another's reply.)"""
    Turn.objects.filter(pk=turn.pk).update(delivery_attempts=F("delivery_attempts") + 1)
    turn.delivery_attempts = Turn.objects.values_list("delivery_attempts", flat=True).get(pk=turn.pk)
    return turn.delivery_attempts


def turn_delivery_error_note(*, turn: Turn, error: str) -> None:
    """A delivery attempt failed for now: the error stays visible while the turn waits for the next attempt."""
    Turn.objects.filter(pk=turn.pk, status=Turn.Status.REPLIED).update(error=error_text(error))


def _finish(*, turn_id: int, status: str, from_statuses, now: datetime | None = None, **fields) -> bool:
    now = now or timezone.now()
    if "error" in fields:
        fields["error"] = error_text(fields["error"])
    done = Turn.objects.filter(pk=turn_id, status__in=from_statuses).update(status=status, finished_at=now, **fields)
    if done:
        _finished_log(turn_id=turn_id, status=status, error=fields.get("error", ""))
    return bool(done)


def _finished_log(*, turn_id: int, status: str, error: str) -> None:
    logger.info("turn finished", extra={"turn_id": turn_id, "status": status, "error": error})


def turn_mark_delivered_reading(*, turn: Turn, returning: QuerySet) -> list[tuple]:
    """Mark a replied turn delivered, its UPDATE also reading the one value `returning` selects (the conversation's
    next turn, issue 28): [(value,)] when the turn was marked, [] when it was not replied any more."""
    rows = update_returning(
        queryset=Turn.objects.filter(pk=turn.pk, status=Turn.Status.REPLIED),
        values={"status": Turn.Status.DELIVERED, "finished_at": timezone.now(), "error": ""},
        returning=returning,
    )
    if rows:
        _finished_log(turn_id=turn.pk, status=Turn.Status.DELIVERED, error="")
    return rows


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
    fields["error"] = error_text(error)
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

    One UPDATE merges them in the database, so notes written one after another by the same run (the receipt
    reaction, the streaming card's state) all stay, and so do another run's; `turn.channel_state` is updated in
    place with this run's.
    """
    Turn.objects.filter(pk=turn.pk).update(channel_state=JSONKeysReplaced("channel_state", values))
    turn.channel_state = {**(turn.channel_state or {}), **values}
    return turn.channel_state


def turn_channel_state_merge_statement(*, turn: Turn, values: dict) -> tuple[str, list]:
    """`turn_channel_state_merge`'s UPDATE as (sql, params), for a caller that runs it inside its own statement at
    once (issue 28); `turn.channel_state` is updated in place as that UPDATE will."""
    statement = update_statement(
        queryset=Turn.objects.filter(pk=turn.pk), values={"channel_state": JSONKeysReplaced("channel_state", values)}
    )
    turn.channel_state = {**(turn.channel_state or {}), **values}
    return statement


def turn_channel_state_add(*, turn: Turn, key: str, value: dict) -> bool:
    """Note `key` only if no run noted it before (one conditional UPDATE); False when it was there, and then
    `turn.channel_state` is re-read so this run sees what the other one noted."""
    added = (
        Turn.objects.filter(pk=turn.pk)
        .exclude(channel_state__has_key=key)
        .update(channel_state=JSONKeysReplaced("channel_state", {key: value}))
    )
    if added:
        turn.channel_state = {**(turn.channel_state or {}), key: value}
    else:
        turn.refresh_from_db(fields=["channel_state"])
    return bool(added)
