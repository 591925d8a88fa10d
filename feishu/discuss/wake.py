"""The discuss wake (P1, P9, P10): a burst of group messages becomes one probe, and `send` starts one turn.

Routing calls `discuss_wake_schedule` for a group message that does not address a discuss-mode bot; DMs,
REST and @-addressed turns never come here, so they are never probed nor logged by the gate (P1).

Debounce state lives in the database (one pending DiscussWake per bot and topic, a unique constraint), so it
holds across workers: the first message creates the wake due `initial` later and enqueues
`discuss_wake_fire_task` for that time; each further message moves `due_at` to now + initial, never past
`deadline_at` (first message + max). The task re-checks `due_at` when it runs and re-schedules itself if the
wake was extended; the beat sweeper (`discuss_wakes_sweep`, every 5 s) fires anything past due whose task was
lost. A wake whose judge hit a provider fault is retried with backoff; after MAX_ATTEMPTS it stays `failed`
(with the error) and the bot's failing-closed judgements show in the admin.
"""

import logging
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.llm.base import ChatMessage
from agents.models import Bot, Thread, Turn
from feishu.inbound.messages import inbound_message_build
from feishu.models import DiscussWake, InboundEvent
from feishu.tasks import discuss_wake_fire_task
from probe.models import ProbeJudgement
from probe.prompts import activation_contract
from probe.selectors import gate_config_get
from probe.services import GateResult, probe_gate_run

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # judge attempts per wake: the first plus two retries after provider faults
RETRY_BACKOFF_SECONDS = (30, 120)  # after attempt 1, after attempt 2
# Newest recorded items handed to the judge: the primary's own horizon (AMUX_THREAD_CONTEXT_LIMIT, 20) twice
# over. Whether to speak now depends on the tail; a longer history only makes every probe dearer (the bench
# measured a 200-item transcript costing the judge more tokens than the primary it gates). The probe's token
# budget trims further.
TRANSCRIPT_ITEM_LIMIT = 40
SWEEP_BATCH = 200
# A wake still `running` this long after its claim was abandoned by a dead worker (the judge times out at 45 s
# and starting the turn only enqueues it).
RUNNING_ABANDONED_AFTER_SECONDS = 300

# What discuss_wake_fire returns (for tests, logs and the bench).
FIRE_NOT_DUE = "not_due"
FIRE_NOT_CLAIMED = "not_claimed"
FIRE_SUPERSEDED = "superseded"
FIRE_DECLINED = "declined"
FIRE_RETRY = "retry_scheduled"
FIRE_FAILED = "failed"
FIRE_STARTED = "turn_started"
FIRE_NO_SOURCE = "no_source_message"
FIRE_ABSORBED = "absorbed"  # an @ or reply to the bot answered the timeline while the judge ran (G4)
SWEEP_ENQUEUED = "enqueued"  # what the sweeper reports for a wake it handed to a worker
SWEEP_NOT_ENQUEUED = "not_enqueued"  # the broker refused it; the next sweep tries again
ABSORBED_ERROR = "absorbed by the @ or reply of turn"
# A due wake the sweeper enqueued is enqueued again only when it became due again since (a retry, an
# extension) or after this long (its task was lost): a busy queue is not flooded with copies every 5 s.
SWEEP_REENQUEUE_SECONDS = 30


def debounce_delays(*, bot: Bot) -> tuple[timedelta, timedelta]:
    """(initial, maximum) of the bot, or the hub's defaults (AMUX_PROBE_DEBOUNCE_INITIAL_MS / _MAX_MS)."""
    initial_ms = bot.probe_debounce_initial_ms
    if initial_ms is None:
        initial_ms = settings.AMUX_PROBE_DEBOUNCE_INITIAL_MS
    max_ms = bot.probe_debounce_max_ms
    if max_ms is None:
        max_ms = settings.AMUX_PROBE_DEBOUNCE_MAX_MS
    return timedelta(milliseconds=initial_ms), timedelta(milliseconds=max(max_ms, initial_ms))


def _fire_enqueue(*, wake_id: int, eta: datetime) -> None:
    """After commit, queue the fire task for `eta`; eager runs (no broker) leave wakes to the beat sweeper."""
    if discuss_wake_fire_task.app.conf.task_always_eager:
        # An eager apply_async would run now, before the wake is due (and a not-yet-due wake would re-queue
        # itself in a loop). Without a broker, an in-process timer plays the eta (AMUX_DISCUSS_WAKE_TIMER).
        if settings.AMUX_DISCUSS_WAKE_TIMER:
            transaction.on_commit(lambda: _fire_timer_start(wake_id=wake_id, eta=eta))
        return

    from feishu.inbound.intake import task_enqueue

    # Broker down: logged, and the beat sweeper fires the wake once due.
    transaction.on_commit(
        lambda: task_enqueue(task=discuss_wake_fire_task, args=[wake_id], what="discuss_wake", eta=eta)
    )


def _fire_timer_start(*, wake_id: int, eta: datetime) -> None:
    def fire() -> None:
        try:
            discuss_wake_fire(wake_id=wake_id)
        except Exception:  # a thread has no caller to raise to: log it; the wake stays visible in the admin
            logger.exception("discuss wake timer failed", extra={"wake_id": wake_id})
        finally:
            connection.close()

    delay = max((eta - timezone.now()).total_seconds(), 0.0)
    timer = threading.Timer(delay, fire)
    timer.daemon = True
    timer.start()


def discuss_wake_key(*, workspace, root_msg_id: str) -> str:
    """The wake's timeline key: the message's (a topic's root, or an ordinary group's main timeline, G1), or the
    whole group for a workspace with one continuous session per group. Schedule and absorb agree through it."""
    from threadcontext.models import SessionBinding, Workspace

    if workspace is not None and workspace.session_scope == Workspace.SessionScope.GROUP:
        return SessionBinding.GROUP_SCOPE_KEY
    return root_msg_id


def discuss_wakes_absorb(*, bot: Bot, workspace, chat_id: str, root_msg_id: str, turn: Turn) -> int:
    """G4: an @ or a reply to the bot answers its timeline now: every wake of that timeline not yet answered ends
    here (one answer, not two). A wake whose judge is running finds itself absorbed and starts no turn."""
    key = discuss_wake_key(workspace=workspace, root_msg_id=root_msg_id)
    absorbed = DiscussWake.objects.filter(
        Q(status__in=(DiscussWake.Status.PENDING, DiscussWake.Status.RUNNING))
        | Q(status=DiscussWake.Status.FAILED, attempts__lt=MAX_ATTEMPTS),
        bot=bot,
        chat_id=chat_id,
        root_msg_id=key,
    ).update(status=DiscussWake.Status.DONE, error=f"{ABSORBED_ERROR} {turn.pk}", turn=turn, updated_at=timezone.now())
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
                _wake_end(wake=wake, status=DiscussWake.Status.DONE, error="every message was recalled")
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
    from threadcontext.selectors import workspace_cached_get

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
    _fire_enqueue(wake_id=wake.pk, eta=wake.due_at)
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
    returning = ", ".join(quote(field.column) for field in meta.concrete_fields)
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


def discuss_transcript_build(
    *, bot: Bot, chat_id: str, root_msg_id: str, limit: int = TRANSCRIPT_ITEM_LIMIT
) -> list[ChatMessage]:
    """The judge's transcript from the thread's recorded context items, oldest first.

    This bot's own outputs are assistant turns (actions it already took); everything else - people, the topic
    root, other bots - is a labelled user line, never trusted as instructions.
    """
    from threadcontext.models import SessionBinding, ThreadEvent

    # Read from the events, not the items, so the people's requests (user_request: an @ of this bot, which is
    # never a context item) are in the judge's view beside the discussion and the outputs (G4). Every bot's
    # bridge records its own copy of the people's messages: this bridge's copies, and the agent outputs of every
    # bot (each recorded once, by the bot that spoke). A recalled message's event is blank and left out (G7).
    wanted = (
        ThreadEvent.EventType.TOPIC_ROOT,
        ThreadEvent.EventType.HUMAN_MESSAGE,
        ThreadEvent.EventType.USER_REQUEST,
        ThreadEvent.EventType.AGENT_OUTPUT,
    )
    events = ThreadEvent.objects.filter(
        Q(bridge_id=bot.bridge_id) | Q(event_type=ThreadEvent.EventType.AGENT_OUTPUT),
        chat_id=chat_id,
        event_type__in=wanted,
    ).exclude(text="")
    if root_msg_id != SessionBinding.GROUP_SCOPE_KEY:  # the group key reads the whole chat
        events = events.filter(root_msg_id=root_msg_id)
    columns = ("bridge_id", "event_type", "actor_id", "bot_profile", "session_name", "metadata", "text")
    rows = list(events.order_by("-id").values(*columns)[:limit])
    rows.reverse()
    transcript = []
    for row in rows:
        if row["event_type"] == ThreadEvent.EventType.AGENT_OUTPUT:
            if row["bridge_id"] == bot.bridge_id:
                transcript.append(ChatMessage(role="assistant", content=row["text"]))
                continue
            label = f"{row['bot_profile']}/{row['session_name']}" if row["session_name"] else row["bot_profile"]
        else:
            metadata = row["metadata"] if isinstance(row["metadata"], dict) else {}
            label = metadata.get("sender_name") or row["actor_id"]
            if row["event_type"] == ThreadEvent.EventType.USER_REQUEST:
                label = f"{label} (to you)" if label else "(to you)"
        transcript.append(ChatMessage(role="user", content=f"{label}: {row['text']}" if label else row["text"]))
    return transcript


def discuss_activation_start(*, bot: Bot, wake: DiscussWake, gate: GateResult) -> Turn | None:
    """The hand-off to the bridge's turn (P9): one turn for the wake's newest message, with the contract.

    Activated by the judge: the activation contract (the judge's reason as advisory notes) is the last user
    message of the primary. No gate at all (gate_ran False): the turn runs as it would without the feature.
    """
    from feishu.inbound.parsing import message_parse
    from feishu.channel.turn_channel import feishu_turn_start

    event = InboundEvent.objects.filter(bot=bot, message_id=wake.last_message_id).first()
    parsed = message_parse(event.payload) if event is not None else None
    if parsed is None:
        return None
    message = inbound_message_build(bot=bot, parsed=parsed, bot_open_id=bot.feishu_bot_open_id)
    contract = activation_contract(reason=gate.reason) if gate.activated else ""
    return feishu_turn_start(bot=bot, message=message, trigger=Turn.Trigger.DISCUSS, activation_contract=contract)


def _claimable(*, now: datetime) -> Q:
    """Due wakes a worker may take: pending, failed with attempts left, or running but abandoned (the worker
    died mid-fire: nothing else would ever finish it; a second probe is possible, a second turn is not)."""
    retryable = Q(status=DiscussWake.Status.FAILED, attempts__lt=MAX_ATTEMPTS)
    abandoned = Q(
        status=DiscussWake.Status.RUNNING,
        attempts__lt=MAX_ATTEMPTS,
        updated_at__lt=now - timedelta(seconds=RUNNING_ABANDONED_AFTER_SECONDS),
    )
    return (Q(status=DiscussWake.Status.PENDING) | retryable | abandoned) & Q(due_at__lte=now)


def _claim(*, wake_id: int, now: datetime) -> bool:
    """A claimable wake → running, atomically (one conditional UPDATE): one worker fires a wake."""
    updated = DiscussWake.objects.filter(_claimable(now=now), pk=wake_id).update(
        status=DiscussWake.Status.RUNNING, attempts=F("attempts") + 1, updated_at=now
    )
    return updated == 1


def discuss_wake_fire(*, wake_id: int, now: datetime | None = None) -> str:
    """Run the gate for a due wake and, on send (or no gate), start the turn; otherwise the wake ends."""
    now = now or timezone.now()
    if not _claim(wake_id=wake_id, now=now):
        wake = DiscussWake.objects.filter(pk=wake_id).first()
        if wake is not None and wake.status == DiscussWake.Status.PENDING and wake.due_at > now:
            _fire_enqueue(wake_id=wake.pk, eta=wake.due_at)  # extended since the task was queued
            return FIRE_NOT_DUE
        return FIRE_NOT_CLAIMED
    wake = DiscussWake.objects.select_related("bot").get(pk=wake_id)
    bot = wake.bot
    if wake.attempts > 1:
        newer = DiscussWake.objects.filter(
            bot=bot, chat_id=wake.chat_id, root_msg_id=wake.root_msg_id, created_at__gt=wake.created_at
        ).exclude(pk=wake.pk)
        if newer.exists():
            # A retry whose topic has a newer wake: that one judges the newer messages, one probe is enough.
            _wake_end(wake=wake, status=DiscussWake.Status.DONE, error="superseded by a newer wake")
            return FIRE_SUPERSEDED
    # The configuration is cached (0 queries): a gate that will not judge needs no transcript read.
    will_judge = not gate_config_get(bot=bot).cause
    transcript = (
        discuss_transcript_build(bot=bot, chat_id=wake.chat_id, root_msg_id=wake.root_msg_id) if will_judge else []
    )
    gate = probe_gate_run(
        bot=bot,
        transcript=transcript,
        thread=_session_thread(wake=wake),
        wake_id=wake.pk,
        topic=f"{wake.chat_id}:{wake.root_msg_id}",
    )
    if gate.retryable and wake.attempts < MAX_ATTEMPTS:
        backoff = timedelta(seconds=RETRY_BACKOFF_SECONDS[wake.attempts - 1])
        wake.due_at = now + backoff
        _wake_end(wake=wake, status=DiscussWake.Status.FAILED, error=gate.judgement.error, extra=["due_at"])
        _fire_enqueue(wake_id=wake.pk, eta=wake.due_at)
        logger.warning(
            "discuss wake retry scheduled",
            extra={"bot_id": bot.pk, "wake_id": wake.pk, "attempts": wake.attempts, "due_at": wake.due_at.isoformat()},
        )
        return FIRE_RETRY
    if not gate.proceeds:
        if gate.retryable:  # the provider fault persisted through every attempt: failed closed, and visible
            _wake_end(wake=wake, status=DiscussWake.Status.FAILED, error=gate.judgement.error)
            return FIRE_FAILED
        _wake_end(wake=wake, status=DiscussWake.Status.DONE, error="" if gate.outcome == "no_action" else gate.cause)
        return FIRE_DECLINED
    with transaction.atomic():
        # An @ or reply answered this timeline while the judge ran (G4): that turn is the one answer.
        if not DiscussWake.objects.select_for_update().filter(pk=wake.pk, status=DiscussWake.Status.RUNNING).exists():
            return FIRE_ABSORBED
        # The turn, its wake and its judgement commit together (the turn is enqueued, and any notice sent, only
        # after): a turn the sweeper re-queues always finds the judgement its contract is rebuilt from (P9).
        turn = discuss_activation_start(bot=bot, wake=wake, gate=gate)
        if turn is None:
            # the wake's message is not stored, or its session was retired (the user was told to start anew)
            _wake_end(wake=wake, status=DiscussWake.Status.DONE, error="no turn started")
            return FIRE_NO_SOURCE
        wake.turn = turn
        _wake_end(wake=wake, status=DiscussWake.Status.DONE, error="", extra=["turn"])
        ProbeJudgement.objects.filter(pk=gate.judgement.pk).update(turn=turn, thread_id=turn.thread_id)
    return FIRE_STARTED


def _session_thread(*, wake: DiscussWake) -> Thread | None:
    """The topic's live session thread, if one exists yet: the gate's log and row carry it as session_id."""
    from threadcontext.models import SessionBinding

    thread_id = (
        SessionBinding.objects.filter(
            bot_profile=wake.bot.slug, chat_id=wake.chat_id, scope_key=wake.root_msg_id, retired_at__isnull=True
        )
        .values_list("agent_thread_id", flat=True)
        .first()
    )
    return Thread.objects.filter(pk=thread_id).first() if thread_id is not None else None


def _wake_end(*, wake: DiscussWake, status: str, error: str, extra: list[str] | None = None) -> bool:
    """End a wake unless an @ absorbed it meanwhile (G4: an absorbed wake stays done, never failed or reopened)."""
    previous = wake.status
    wake.status = status
    wake.error = error[:2000]
    wake.updated_at = timezone.now()
    fields = {name: getattr(wake, name) for name in ("status", "error", "updated_at", *(extra or []))}
    return DiscussWake.objects.filter(pk=wake.pk, status=previous).update(**fields) == 1


def discuss_wakes_sweep(*, now: datetime | None = None) -> list[str]:
    """Enqueue a fire task for every wake past due whose task was lost (or that waits for its retry); beat runs
    it every 5 s. The sweep never judges: each wake's judge runs in its own task, on a worker. Without a broker
    (eager, the test suite) the task runs in place and its outcome is reported; with one, `enqueued`.
    """
    from feishu.inbound.intake import task_enqueue

    now = now or timezone.now()
    not_recently = (
        Q(swept_at__isnull=True)
        | Q(swept_at__lt=F("due_at"))
        | Q(swept_at__lt=now - timedelta(seconds=SWEEP_REENQUEUE_SECONDS))
    )
    due = list(
        DiscussWake.objects.filter(_claimable(now=now))
        .filter(not_recently)
        .order_by("due_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    if not due:
        return []
    DiscussWake.objects.filter(pk__in=due).update(swept_at=now)
    # The sweep saw these due at `now`: the fire treats the clock as at least that (an injected clock in tests).
    kwargs = {"swept_at": now.isoformat()}
    if discuss_wake_fire_task.app.conf.task_always_eager:
        return [discuss_wake_fire_task.apply(args=[wake_id], kwargs=kwargs).get() for wake_id in due]
    # A worker's clock is the real one: no swept_at needed (and nothing but the id travels through the broker).
    return [
        SWEEP_ENQUEUED
        if task_enqueue(task=discuss_wake_fire_task, args=[wake_id], what="discuss_wake")
        else SWEEP_NOT_ENQUEUED
        for wake_id in due
    ]
