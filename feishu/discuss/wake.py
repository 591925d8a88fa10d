"""The discuss wake (P1, P10): a burst of group messages becomes one pending wake per bot and timeline.

Routing calls `discuss_wake_schedule` for a group message that does not address a discuss-mode bot; DMs,
REST and @-addressed turns never come here, so they are never probed nor logged by the gate (P1).

Invariant: at most one pending DiscussWake per (bot, chat, timeline key), kept by a partial unique index and
written in one statement (`discuss_wake_upsert`), so it holds across workers. The first message creates the
wake due `initial` later and enqueues its fire task for that time; each further message moves `due_at` to
now + initial, never past `deadline_at` (first message + max). A wake ends once (`discuss_wake_end` is a
conditional UPDATE): an @ or a reply that absorbed it keeps it done, never failed nor reopened (G4).

The wake's judging and its turn are in `feishu.discuss.fire`, the beat's catch-up in `feishu.discuss.sweep`,
and the Celery tasks in `feishu.tasks`.
"""

import logging
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Bot, Turn
from core.columns import column_name
from core.statements import update_carrying
from core.tasks_enqueue import task_enqueue
from feishu.models import DiscussWake
from feishu.tasks import discuss_wake_fire_task
from threadcontext.models import SessionBinding, Workspace
from threadcontext.selectors import workspace_cached_get

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # judge attempts per wake: the first plus two retries after provider faults
# A wake still `running` this long after its claim was abandoned by a dead worker (the judge times out at 45 s
# and starting the turn only enqueues it).
RUNNING_ABANDONED_AFTER_SECONDS = 300
ABSORBED_ERROR = "absorbed by the @ or reply of turn"


def debounce_delays(*, bot: Bot) -> tuple[timedelta, timedelta]:
    """(initial, maximum) of the bot, or the hub's defaults (AMUX_PROBE_DEBOUNCE_INITIAL_MS / _MAX_MS)."""
    initial_ms = bot.probe_debounce_initial_ms
    if initial_ms is None:
        initial_ms = settings.AMUX_PROBE_DEBOUNCE_INITIAL_MS
    max_ms = bot.probe_debounce_max_ms
    if max_ms is None:
        max_ms = settings.AMUX_PROBE_DEBOUNCE_MAX_MS
    return timedelta(milliseconds=initial_ms), timedelta(milliseconds=max(max_ms, initial_ms))


def discuss_wake_fire_enqueue(*, wake_id: int, eta: datetime) -> None:
    """After commit, queue the fire task for `eta`; eager runs (no broker) leave wakes to the beat sweeper."""
    if discuss_wake_fire_task.app.conf.task_always_eager:
        # An eager apply_async would run now, before the wake is due (and a not-yet-due wake would re-queue
        # itself in a loop). Without a broker, an in-process timer plays the eta (AMUX_DISCUSS_WAKE_TIMER).
        if settings.AMUX_DISCUSS_WAKE_TIMER:
            transaction.on_commit(lambda: _fire_timer_start(wake_id=wake_id, eta=eta))
        return
    # Broker down: logged, and the beat sweeper fires the wake once due.
    transaction.on_commit(
        lambda: task_enqueue(task=discuss_wake_fire_task, args=[wake_id], what="discuss_wake", eta=eta)
    )


def _fire_timer_start(*, wake_id: int, eta: datetime) -> None:
    def fire() -> None:
        try:
            # The task's body, run in place as a worker would run it at the eta (the fire is feishu.discuss.fire,
            # which builds on this module: the task is the one way back to it).
            discuss_wake_fire_task(wake_id)
        except Exception:  # a thread has no caller to raise to: log it; the wake stays visible in the admin
            logger.exception("discuss wake timer failed", extra={"wake_id": wake_id})
        finally:
            connection.close()

    delay = max((eta - timezone.now()).total_seconds(), 0.0)
    timer = threading.Timer(delay, fire)
    timer.daemon = True
    timer.start()


def discuss_wake_key(*, workspace: Workspace | None, root_msg_id: str) -> str:
    """The wake's timeline key: the message's (a topic's root, or an ordinary group's main timeline, G1), or the
    whole group for a workspace with one continuous session per group. Schedule and absorb agree through it."""
    if workspace is not None and workspace.session_scope == Workspace.SessionScope.GROUP:
        return SessionBinding.GROUP_SCOPE_KEY
    return root_msg_id


def discuss_wakes_absorb(
    *,
    bot: Bot,
    workspace: Workspace | None,
    chat_id: str,
    root_msg_id: str,
    turn: Turn,
    carried_write: tuple[str, list] | None = None,
) -> int:
    """G4: an @ or a reply to the bot answers its timeline now: every wake of that timeline not yet answered ends
    here (one answer, not two). A wake whose judge is running finds itself absorbed and starts no turn.

    `carried_write`: routing's "event done", in the same statement on PostgreSQL (issue 28), as the upsert's."""
    key = discuss_wake_key(workspace=workspace, root_msg_id=root_msg_id)
    absorbed = update_carrying(
        queryset=DiscussWake.objects.filter(
            Q(status__in=(DiscussWake.Status.PENDING, DiscussWake.Status.RUNNING))
            | Q(status=DiscussWake.Status.FAILED, attempts__lt=MAX_ATTEMPTS),
            bot=bot,
            chat_id=chat_id,
            root_msg_id=key,
        ),
        values={
            "status": DiscussWake.Status.DONE,
            "error": f"{ABSORBED_ERROR} {turn.pk}",
            "turn": turn,
            "updated_at": timezone.now(),
        },
        carried_write=carried_write,
    )
    if absorbed:
        logger.info("discuss wake absorbed", extra={"bot_id": bot.pk, "turn": turn.pk, "root_msg_id": key})
    return absorbed


def discuss_wakes_forget_message(*, chat_id: str, message_id: str) -> int:
    """G7: a recalled message no longer counts for a pending wake; a wake left with no message ends."""
    changed = 0
    with transaction.atomic():
        for wake in DiscussWake.objects.select_for_update().filter(chat_id=chat_id, status=DiscussWake.Status.PENDING):
            if message_id not in wake.message_ids:
                continue
            wake.message_ids = [mid for mid in wake.message_ids if mid != message_id]
            changed += 1
            if not wake.message_ids:
                discuss_wake_end(wake=wake, status=DiscussWake.Status.DONE, error="every message was recalled")
                continue
            wake.last_message_id = wake.message_ids[-1]
            wake.save(update_fields=["message_ids", "last_message_id", "updated_at"])
    return changed


def discuss_wake_schedule(
    *,
    bot: Bot,
    chat_id: str,
    root_msg_id: str,
    message_id: str,
    now: datetime | None = None,
    carried_write: tuple[str, list] | None = None,
) -> DiscussWake:
    """Open or extend the pending wake of (bot, chat, topic) for one more group message (P10).

    In a workspace with one continuous session per group, the whole group is the topic: its key is
    SessionBinding.GROUP_SCOPE_KEY, so a burst across top-level messages is still one probe.
    `carried_write`: the caller's own UPDATE (sql, params) written with the wake (see discuss_wake_upsert).
    """
    now = now or timezone.now()
    workspace = workspace_cached_get(bot_profile=bot.slug, chat_id=chat_id)
    root_msg_id = discuss_wake_key(workspace=workspace, root_msg_id=root_msg_id)
    initial, maximum = debounce_delays(bot=bot)
    wake = discuss_wake_upsert(
        bot=bot,
        chat_id=chat_id,
        root_msg_id=root_msg_id,
        message_id=message_id,
        due_at=now + initial,
        deadline_at=now + maximum,
        first_message_at=now,
        carried_write=carried_write,
    )
    if wake.message_ids != [message_id]:
        return wake  # extended: no new task, the queued one re-checks due_at and re-schedules itself
    # Opened (or, after an admin's reprocess, the same lone message again: a second task finds the wake claimed
    # or not due, and fires nothing twice).
    discuss_wake_fire_enqueue(wake_id=wake.pk, eta=wake.due_at)
    logger.info(
        "discuss wake opened",
        extra={"bot_id": bot.pk, "wake_id": wake.pk, "chat_id": chat_id, "root_msg_id": root_msg_id},
    )
    return wake


# The extension of a pending wake by one message, per database: append the message id unless it is there, and
# move due_at to the new message's due time, never earlier than it was and never past the wake's deadline.
_WAKE_EXTEND_SQL = {
    "postgresql": (
        "message_ids = CASE WHEN {t}.message_ids @> jsonb_build_array(EXCLUDED.last_message_id)"
        " THEN {t}.message_ids ELSE {t}.message_ids || jsonb_build_array(EXCLUDED.last_message_id) END,"
        " due_at = GREATEST({t}.due_at, LEAST(EXCLUDED.due_at, {t}.deadline_at))"
    ),
    # Django stores SQLite datetimes as UTC text of one shape ('YYYY-MM-DD HH:MM:SS[.ffffff]'): ordered as text.
    "sqlite": (
        "message_ids = CASE WHEN EXISTS (SELECT 1 FROM json_each({t}.message_ids) WHERE value = excluded.last_message_id)"
        " THEN {t}.message_ids ELSE json_insert({t}.message_ids, '$[#]', excluded.last_message_id) END,"
        " due_at = max({t}.due_at, min(excluded.due_at, {t}.deadline_at))"
    ),
}


def discuss_wake_upsert(
    *,
    bot: Bot,
    chat_id: str,
    root_msg_id: str,
    message_id: str,
    due_at: datetime,
    deadline_at: datetime,
    first_message_at: datetime,
    carried_write: tuple[str, list] | None = None,
) -> DiscussWake:
    """Open the pending wake of (bot, chat, key) or extend it by one message, in one statement (issue 11).

    INSERT ... ON CONFLICT on the partial unique index of pending wakes ... DO UPDATE ... RETURNING: two workers
    scheduling the same topic at once end with one wake holding both messages (the second waits for the first's
    row, then extends it), with no read first, no row lock held across statements and no retry loop. Django's
    bulk_create(update_conflicts=True) cannot name a partial index's condition nor compute the new values from
    the old row, hence the raw SQL. A wake opened here holds exactly [message_id].

    `carried_write`: an UPDATE of the caller's (routing's "event done") that rides in the same statement on
    PostgreSQL, as a data-modifying CTE in front of the INSERT (it runs exactly once, in the same snapshot and
    transaction, and the wake's row is untouched by it: another table). SQLite has no DML in a WITH clause: there
    it runs as its own statement just before, in the caller's transaction, so both commit or neither does.
    """
    meta = DiscussWake._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    written = timezone.now()  # created_at / updated_at, as auto_now would set them
    values = {
        "bot_id": bot.pk,
        "chat_id": chat_id,
        "root_msg_id": root_msg_id,
        "status": DiscussWake.Status.PENDING,
        "message_ids": meta.get_field("message_ids").get_db_prep_save([message_id], connection),
        "last_message_id": message_id,
        "first_message_at": first_message_at,
        "due_at": due_at,
        "deadline_at": deadline_at,
        "attempts": 0,
        "error": "",
        "created_at": written,
        "updated_at": written,
    }
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(value) if isinstance(value, datetime) else value for value in values.values()]
    returning = ", ".join(quote(column_name(field)) for field in meta.concrete_fields)
    extend = _WAKE_EXTEND_SQL[connection.vendor].format(t=table)
    carried_sql, carried_params = carried_write or ("", [])
    if carried_sql and connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(carried_sql, carried_params)
        carried_sql, carried_params = "", []
    sql = (
        (f"WITH carried_write AS ({carried_sql}) " if carried_sql else "")
        + f"INSERT INTO {table} ({', '.join(quote(column) for column in values)})"
        f" VALUES ({', '.join(['%s'] * len(values))})"
        # The index's own condition (a literal, so PostgreSQL can match the partial index to it).
        f" ON CONFLICT (bot_id, chat_id, root_msg_id) WHERE status = '{DiscussWake.Status.PENDING}'"
        f" DO UPDATE SET {extend}, last_message_id = excluded.last_message_id, updated_at = excluded.updated_at"
        f" RETURNING {returning}"
    )
    (wake,) = DiscussWake.objects.raw(sql, [*carried_params, *params])
    wake.bot = bot
    return wake


def discuss_wakes_claimable(*, now: datetime) -> Q:
    """Due wakes a worker may take: pending, failed with attempts left, or running but abandoned (the worker
    died mid-fire: nothing else would ever finish it; a second probe is possible, a second turn is not)."""
    retryable = Q(status=DiscussWake.Status.FAILED, attempts__lt=MAX_ATTEMPTS)
    abandoned = Q(
        status=DiscussWake.Status.RUNNING,
        attempts__lt=MAX_ATTEMPTS,
        updated_at__lt=now - timedelta(seconds=RUNNING_ABANDONED_AFTER_SECONDS),
    )
    return (Q(status=DiscussWake.Status.PENDING) | retryable | abandoned) & Q(due_at__lte=now)


def discuss_wake_end(*, wake: DiscussWake, status: str, error: str, extra: list[str] | None = None) -> bool:
    """End a wake unless an @ absorbed it meanwhile (G4: an absorbed wake stays done, never failed or reopened)."""
    previous = wake.status
    wake.status = status
    wake.error = error[:2000]
    wake.updated_at = timezone.now()
    fields = {name: getattr(wake, name) for name in ("status", "error", "updated_at", *(extra or []))}
    return DiscussWake.objects.filter(pk=wake.pk, status=previous).update(**fields) == 1
