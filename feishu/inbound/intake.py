"""Webhook intake: store the event once (F2), enqueue its processing after commit, sweep what was left pending."""

import copy
import functools
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Bot
from core.columns import column_name, concrete_field
from core.tasks_enqueue import task_enqueue
from core.tasks_relay import task_relay
from feishu.inbound.parsing import HUB_ANNOTATIONS_KEY
from feishu.models import InboundEvent
from feishu.tasks import inbound_event_process as inbound_event_process_task

logger = logging.getLogger(__name__)

# Events a worker claimed this long ago and never finished (worker killed) go back to pending.
STALE_CLAIM_SECONDS = 600
# An event that failed this many processing attempts stays failed (the admin can reprocess it).
MAX_PROCESSING_ATTEMPTS = 5
# bot pk -> (monotonic expiry, Bot): the worker reads an event's bot at most once per BOT_CACHE_SECONDS.
_bots: dict[int, tuple[float, Bot]] = {}
BOT_CACHE_SECONDS = 5.0


def inbound_event_store(
    *, bot: Bot, event_id: str, message_id: str, event_type: str, payload: dict[str, Any]
) -> tuple[InboundEvent | None, bool]:
    """Store one event, deduplicated on (bot, message_id) by the DB constraint; enqueue it after commit.

    Feishu retries at 15 s / 5 min / 1 h / 6 h and replays under new event_ids: every copy after the
    first finds the row and is acknowledged without a second processing (F2). An event_id names one event: a
    second message under an event_id already stored is not Feishu's (issue 30, 9), so the same INSERT refuses it
    (NOT EXISTS on (bot, event_id)); it is acknowledged, stored nowhere and logged once.

    One statement, `INSERT ... ON CONFLICT DO NOTHING RETURNING id` (issue 11): a duplicate is no error, so no
    savepoint is needed inside a caller's transaction, and the webhook's autocommitted INSERT is durable before
    Feishu hears 200. Written out rather than the ORM's create, whose per-call compilation and value pipeline
    cost about as much CPU as the INSERT itself; the payload still goes through its field's own adapter.
    """
    values = {
        "bot_id": bot.pk,
        "event_id": event_id,
        "message_id": message_id,
        "event_type": event_type,
        "payload": payload,
        "status": InboundEvent.Status.PENDING,
        "attempts": 0,
        "error": "",
        "received_at": timezone.now(),
    }
    params = [field.get_db_prep_save(values[field.attname], connection) for field in _STORE_FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(), [*params, bot.pk, event_id])
        inserted = cursor.fetchone()
    if inserted is None:
        return _duplicate_found(bot=bot, event_id=event_id, message_id=message_id, payload=payload), False
    event = InboundEvent(pk=inserted[0], **values)
    event.bot = bot
    event._state.adding, event._state.db = False, connection.alias  # as the ORM leaves a saved instance
    # At once when autocommitted; published by this process's relay thread, so the 200 never waits for the broker.
    transaction.on_commit(lambda: inbound_event_relay(event_pk=event.pk))
    return event, True


# The columns the store writes, each value adapted by its own field (jsonb or text, a datetime as the database
# keeps it); claimed_at and processed_at stay NULL.
_STORE_FIELDS = tuple(
    concrete_field(InboundEvent, name)
    for name in ("bot", "event_id", "message_id", "event_type", "payload", "status", "attempts", "error", "received_at")
)


def _duplicate_found(*, bot: Bot, event_id: str, message_id: str, payload: dict[str, Any]) -> InboundEvent | None:
    """The row that made the INSERT a no-op: the same message (Feishu's retry or replay: the usual dedupe), or
    another message already stored under this event_id (a reused event_id: ignored, one warning)."""
    existing = InboundEvent.objects.filter(bot=bot, message_id=message_id).first()
    if existing is not None and (existing.event_id != event_id or _as_received(existing.payload) == payload):
        logger.info(
            "feishu duplicate event",
            extra={
                "bot": bot.slug,
                "message_id": message_id,
                "event_id": event_id,
                "first_event_id": existing.event_id,
            },
        )
        return existing
    first = existing or InboundEvent.objects.filter(bot=bot, event_id=event_id).order_by("pk").first()
    logger.warning(
        "feishu event ignored: its event_id was seen with different content",
        extra={
            "bot": bot.slug,
            "event_id": event_id,
            "message_id": message_id,
            # None only when the retention prune removed the first row in between: still ignored, never stored
            "first_message_id": first.message_id if first is not None else None,
        },
    )
    return first


def _as_received(payload: dict[str, Any]) -> dict[str, Any]:
    """A stored payload without what routing added to it (a group's chat mode), as Feishu sent it."""
    return {key: value for key, value in payload.items() if key != HUB_ANNOTATIONS_KEY}


@functools.cache
def _insert_sql() -> str:
    """The store's INSERT; PostgreSQL and SQLite (>= 3.35) share its syntax and double-quoted names.

    INSERT ... SELECT so that one statement also refuses an event_id already stored for the bot; the WHERE also
    lets SQLite parse the ON CONFLICT after a SELECT."""
    meta = InboundEvent._meta
    table = meta.db_table
    columns = ", ".join(f'"{field.column}"' for field in _STORE_FIELDS)
    placeholders = ", ".join(["%s"] * len(_STORE_FIELDS))
    unique = ", ".join(f'"{column_name(concrete_field(InboundEvent, name))}"' for name in ("bot", "message_id"))
    bot_column, event_column = (column_name(concrete_field(InboundEvent, name)) for name in ("bot", "event_id"))
    return (
        f'INSERT INTO "{table}" ({columns}) SELECT {placeholders}'
        f' WHERE NOT EXISTS (SELECT 1 FROM "{table}" WHERE "{bot_column}" = %s AND "{event_column}" = %s)'
        f' ON CONFLICT ({unique}) DO NOTHING RETURNING "{meta.pk.column}"'
    )


def inbound_event_enqueue(*, event_pk: int) -> bool:
    return task_enqueue(task=inbound_event_process_task, args=[event_pk], what="inbound_event")


def inbound_event_relay(*, event_pk: int) -> None:
    """A stored event's processing, published off the caller's thread (core.tasks_relay); the sweeper is the
    fallback for anything the relay could not publish."""
    task_relay(task=inbound_event_process_task, args=[event_pk], what="inbound_event")


def claim_takeover_seconds() -> int:
    """How old a `processing` claim must be before another delivery of its task may take it over.

    The broker's visibility timeout: with acks_late, Redis hands a killed worker's task to another worker after
    that long, and the redelivered task must not find the row still `processing` and give up (it would then wait
    for the sweeper). A live worker never holds a claim that long: the visibility timeout
    must exceed the task time limit anyway, or Redis would redeliver running tasks.
    """
    transport = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return min(int(transport.get("visibility_timeout", STALE_CLAIM_SECONDS)), STALE_CLAIM_SECONDS)


def inbound_event_claim(*, event_pk: int, now=None) -> InboundEvent | None:
    """Atomically move pending -> processing and return the claimed row; None when another worker has it or it is
    already finished. One statement (issue 11): a conditional UPDATE ... RETURNING, autocommitted, so the claim
    (attempts + 1, claimed_at) is durable before any work starts; the bot comes from the process cache.

    A `processing` row claimed longer ago than `claim_takeover_seconds()` belongs to a worker that died: this
    delivery (the broker's redelivery of the same task) takes it over in the same conditional UPDATE. Two
    claimers of one row: the second UPDATE waits for the first's row lock (PostgreSQL) or the database's write
    lock (SQLite), then re-checks the condition against the committed claim and returns no row.
    """
    now = now or timezone.now()
    abandoned_before = now - timedelta(seconds=claim_takeover_seconds())
    table = connection.ops.quote_name(InboundEvent._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(column_name(field)) for field in InboundEvent._meta.concrete_fields)
    adapt = connection.ops.adapt_datetimefield_value
    # Django's ORM has no UPDATE ... RETURNING; raw() maps the returned columns onto the model with each field's
    # converters (SQLite's datetimes and JSON). PostgreSQL and SQLite >= 3.35 both support RETURNING.
    claimed = list(
        InboundEvent.objects.raw(
            f"UPDATE {table} SET status = %s, attempts = attempts + 1, claimed_at = %s"
            " WHERE id = %s AND (status = %s OR (status = %s AND claimed_at < %s))"
            f" RETURNING {columns}",
            [
                InboundEvent.Status.PROCESSING,
                adapt(now),
                event_pk,
                InboundEvent.Status.PENDING,
                InboundEvent.Status.PROCESSING,
                adapt(abandoned_before),
            ],
        )
    )
    if not claimed:
        return None
    event = claimed[0]
    bot = bot_cached_get(bot_pk=event.bot_id)
    if bot is None:  # pragma: no cover - the foreign key cascades: an event never outlives its bot
        return None
    event.bot = bot
    return event


def bot_cached_get(*, bot_pk: int, now: float | None = None) -> Bot | None:
    """The bot an event belongs to, read at most once per BOT_CACHE_SECONDS per worker process (issue 11).

    Each call returns its own copy, so a change made to it while processing one event (its open_id learnt)
    never leaks into the next. A save or delete in this process drops the entry at once (`bot_cache_forget`,
    post_save / post_delete); a change made in another process, or by an update() without signals, takes
    effect within BOT_CACHE_SECONDS, as in the webhook's own cache. Kept in process memory, not the shared
    cache: the row holds the app's decrypted secrets.
    """
    now = time.monotonic() if now is None else now
    cached = _bots.get(bot_pk)
    if cached is None or cached[0] <= now:
        bot = Bot.objects.filter(pk=bot_pk).first()
        if bot is None:
            _bots.pop(bot_pk, None)
            return None
        cached = _bots[bot_pk] = (now + BOT_CACHE_SECONDS, bot)
    return copy.copy(cached[1])


def bot_cache_forget(*, bot_pk: int) -> None:
    _bots.pop(bot_pk, None)


def inbound_event_finish(*, event: InboundEvent, status: str, error: str = "", payload: dict | None = None) -> None:
    """Mark the event done or ignored; `payload`: its annotated payload, stored in the same UPDATE (issue 11)."""
    sql, params = inbound_event_finish_statement(event=event, status=status, error=error, payload=payload)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    event.status, event.error = status, error
    if payload is not None:
        event.payload = payload


def inbound_event_finish_statement(
    *, event: InboundEvent, status: str, error: str = "", payload: dict | None = None
) -> tuple[str, list]:
    """The finish's UPDATE as (sql, params): run by `inbound_event_finish`, or carried by the route's last write
    into its own statement (the discuss wake's upsert, a data-modifying CTE on PostgreSQL: one round trip fewer,
    issue 11). Each value goes through its field's adapter, as the ORM's update would send it."""
    values: dict[str, Any] = {"status": status, "error": error[:2000], "processed_at": timezone.now()}
    if payload is not None:
        values["payload"] = payload
    meta = InboundEvent._meta
    quote = connection.ops.quote_name
    fields = [concrete_field(InboundEvent, name) for name in values]
    assignments = ", ".join(f"{quote(column_name(field))} = %s" for field in fields)
    params = [field.get_db_prep_save(values[field.name], connection) for field in fields]
    pk_column = quote(column_name(meta.pk))
    return f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {pk_column} = %s", [*params, event.pk]


@dataclass(frozen=True)
class EventFinish:
    """The finish of the event being routed, handed down the route so that its last write can carry it.

    `payload`: the annotated payload to store with it (None: unchanged). A route that carried it says so
    (RouteResult.event_finished); otherwise the caller runs `inbound_event_finish` as before.
    """

    event: InboundEvent
    payload: dict | None = None

    def done_statement(self) -> tuple[str, list]:
        return inbound_event_finish_statement(event=self.event, status=InboundEvent.Status.DONE, payload=self.payload)


def inbound_event_release_for_retry(*, event: InboundEvent, error: str) -> None:
    """A processing attempt failed unexpectedly: back to pending for the sweeper, or failed after the cap."""
    status = InboundEvent.Status.FAILED if event.attempts >= MAX_PROCESSING_ATTEMPTS else InboundEvent.Status.PENDING
    InboundEvent.objects.filter(pk=event.pk).update(status=status, error=error[:2000])
    event.status, event.error = status, error


def inbound_events_sweep(*, now=None) -> list[int]:
    """Re-enqueue events acknowledged to Feishu but never processed (broker down, worker killed)."""
    now = now or timezone.now()
    pending_before = now - timedelta(seconds=settings.FEISHU_SWEEP_PENDING_AFTER_SECONDS)
    stale_before = now - timedelta(seconds=claim_takeover_seconds())
    InboundEvent.objects.filter(status=InboundEvent.Status.PROCESSING, claimed_at__lt=stale_before).update(
        status=InboundEvent.Status.PENDING
    )
    event_pks = list(
        InboundEvent.objects.filter(
            Q(status=InboundEvent.Status.PENDING) & Q(received_at__lt=pending_before)
        ).values_list("pk", flat=True)[:500]
    )
    for event_pk in event_pks:
        inbound_event_enqueue(event_pk=event_pk)
    if event_pks:
        logger.info("feishu sweeper re-enqueued events", extra={"count": len(event_pks)})
    return event_pks


def inbound_events_reprocess(*, event_pks: list[int]) -> int:
    """Admin action: put finished or failed events back through processing (one UPDATE, enqueued after commit).

    A turn or a reply that already exists is not made twice: turns are unique per source message and deliveries
    keep their uuid."""
    count = InboundEvent.objects.filter(pk__in=event_pks).update(status=InboundEvent.Status.PENDING, error="")
    for event_pk in event_pks:
        transaction.on_commit(functools.partial(inbound_event_enqueue, event_pk=event_pk))
    return count
