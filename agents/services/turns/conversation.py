"""One turn at a time per conversation, oldest request first (ARCHITECTURE §11.1, O1, O2, O4).

A conversation is a turn's thread: a REST thread, a bot's Feishu session (topic, a chat's main timeline, DM), an
automation's thread; discuss turns run in the session of the bot they woke. The exclusion lives in the database,
so it holds across worker processes and hosts:

- a turn may run only while no other turn of its thread is ahead of it: an older turn still open (queued,
  running, or replied and not yet delivered: its reply reaches Feishu first, O4), or any other turn running or
  replied (a newer one that won a race of commits). The check and the claim happen in one transaction holding
  the thread's row lock (PostgreSQL; SQLite serialises its writers), so two claims of one thread never both pass;
- a turn that finds its conversation busy does not wait in its worker: it is *deferred* (queued, `enqueued_at`
  cleared) and its task ends at once;
- the turn that finishes starts the next one: the oldest open turn of its thread, when that one is deferred
  (`conversation_next_start`); the stamp is conditional, so only one finisher enqueues it;
- a hand-back that was lost (the finishing worker died between finishing and enqueueing) is found by the sweeper:
  a deferred turn at the head of its conversation looks like a refused enqueue (sweep.py);
- a killed turn keeps its conversation only as long as its claim: the sweeper re-runs it once the claim is stale
  (sweep.running_stale_seconds), it finishes, and hands the conversation on.

Collect (O2, the bot's `queue_mode`): a turn starting its first run takes along the requests that queued behind it
meanwhile (not started, same conversation, an addressed request: not a discuss or automation turn); each of those
is `skipped` with `channel_state.collected_into` naming the turn that answers it, and the answering turn lists them
in `channel_state.collected`. `followup` runs them one by one. `steer` collects at start like `collect`, and while
the turn runs its tool loop, the requests that queue meanwhile are taken into the running turn at each tool-call
boundary (`turns_steer`: the same rules and the same conditional UPDATE as collect, so a request is answered once
across processes); they are listed in `collected` and `steered` (docs/architecture.md, queue modes).
"""

import logging
from collections.abc import Callable

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from agents.models import Bot, Thread, Turn
from agents.services.enqueue import turn_enqueue
from agents.services.turns import ledger
from agents.services.turns.channels import channel_named
from agents.services.turns.ledger import OPEN_STATUSES
from core.statements import JSONKeysReplaced

logger = logging.getLogger(__name__)

# Turns a collecting turn may answer: a person's request to this bot, never a discuss wake or an automation run.
COLLECTABLE_TRIGGERS = frozenset({Turn.Trigger.MENTION, Turn.Trigger.REPLY, Turn.Trigger.DM, Turn.Trigger.REST})
# Channels whose prompt joins the collected requests (REST: model_input.turn_user_prompt; Feishu:
# feishu.channel.collected); an automation's runs are never collected.
COLLECTING_CHANNELS = frozenset({Thread.Channel.REST, Thread.Channel.FEISHU})
ACTIVE_STATUSES = (Turn.Status.RUNNING, Turn.Status.REPLIED)
# What holds a conversation: an open turn, and one paused for a person's approval (H1): the later requests wait
# for its answer (O4), at most its server's approval timeout, after which the sweeper denies the call and it ends.
HOLDING_STATUSES = OPEN_STATUSES | {Turn.Status.AWAITING_APPROVAL}
COLLECTED_REASON = "Answered together with the other messages of turn {turn_id} (queue mode collect)."
STEERED_REASON = "Taken into the running turn {turn_id} at a tool-call boundary (queue mode steer)."


# What turn_claim_in_order returns when the conversation is busy (the turn was deferred).
DEFERRED = "deferred"


def turn_claim_in_order(*, turn_id: int) -> Turn | str | None:
    """ledger.turn_claim, in conversation order: the claimed turn, DEFERRED when a turn of its conversation is
    ahead (the turn waits, queued, for that one to hand the conversation on), or None when it is finished.
    A first run takes along the requests waiting behind it (collect)."""
    with transaction.atomic():
        # The turn's thread, locked until the claim commits (PostgreSQL; SQLite serialises its writers): one read.
        locked = Thread.objects.select_for_update(of=("self",)).filter(turns__pk=turn_id).values_list("pk", "channel")
        thread_id, channel = next(iter(locked), (None, ""))
        if thread_id is None:
            return None
        # The turn and every turn holding its conversation, in one read under the lock (issue 28): what is ahead,
        # and what a first run collects, are decided from it; the channel's own reads ride along (claim_reads).
        rows = list(
            Turn.objects.select_related(*ledger.CLAIM_RELATED)
            .annotate(**channel_named(channel).claim_reads())
            .filter(thread_id=thread_id)
            .filter(Q(pk=turn_id) | Q(status__in=HOLDING_STATUSES))
        )
        read = next((row for row in rows if row.pk == turn_id), None)
        if read is None:  # deleted since the lock's read (its bot or thread went)
            return None
        others = [row for row in rows if row.pk != turn_id]
        if (
            read.status == Turn.Status.QUEUED
            and any(_is_ahead(other=other, turn_id=turn_id) for other in others)
            and Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED).update(enqueued_at=None)
        ):
            logger.info("turn waits for its conversation", extra={"turn_id": turn_id, "thread_id": thread_id})
            return DEFERRED
        turn = ledger.turn_claim(turn_id=turn_id, read=read)
        if turn is not None and turn.status == Turn.Status.RUNNING and turn.attempts == 1:
            turns_collect(turn=turn, holding=others)
        return turn


def _is_ahead(*, other: Turn, turn_id: int) -> bool:
    """Whether `other`, a turn of the same thread, must finish before `turn_id` runs: an older turn still holding
    the conversation, or any turn running or replied (a newer one that won a race of commits)."""
    return (other.pk < turn_id and other.status in HOLDING_STATUSES) or other.status in ACTIVE_STATUSES


def conversation_lock(*, thread_id: int) -> None:
    """Inside a transaction: hold the thread's row until it ends (PostgreSQL; a no-op on SQLite, whose writers are
    serialised by the database itself)."""
    list(Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk", flat=True))


def conversation_hand_on(*, turn: Turn, outcome: str) -> None:
    """After a run that ended in `outcome`: when that is a final status, the conversation goes to the next turn
    waiting for it (a hand-on lost otherwise, e.g. a turn another run finished, is the sweeper's)."""
    if outcome in ledger.FINISHED_STATUSES:
        conversation_next_start(thread_id=turn.thread_id)


def _head(*, thread_id: int) -> Turn | None:
    return Turn.objects.filter(thread_id=thread_id, status__in=HOLDING_STATUSES).order_by("pk").first()


def conversation_next_start(*, thread_id: int) -> int | None:
    """The finishing turn hands its conversation on: enqueue the oldest open turn of the thread when it is deferred
    (its own task ended). The id enqueued, or None. Called with no transaction open."""
    with transaction.atomic():
        conversation_lock(thread_id=thread_id)
        head = _head(thread_id=thread_id)
        if head is None or head.status != Turn.Status.QUEUED or head.enqueued_at is not None:
            return None
        return _deferred_start(thread_id=thread_id, head_id=head.pk)


def _deferred_start(*, thread_id: int, head_id: int) -> int | None:
    """Inside the transaction holding the conversation: enqueue its deferred head after commit. Conditional stamp:
    of two finishers (or a finisher and the sweeper), one enqueues it."""
    if not Turn.objects.filter(pk=head_id, enqueued_at__isnull=True).update(enqueued_at=timezone.now()):
        return None
    transaction.on_commit(lambda: turn_enqueue(turn_id=head_id))
    logger.info("conversation handed on", extra={"thread_id": thread_id, "turn_id": head_id})
    return head_id


def turn_delivered_hand_on(*, turn: Turn) -> None:
    """Mark a replied turn delivered and hand its conversation on, in one transaction holding the thread: the
    finish's UPDATE reads the next turn (the oldest other turn holding the conversation, when it is deferred) in
    its own statement (issue 28: lock, UPDATE; before, the UPDATE, then lock and read). The read comes after the
    lock, so a claim that deferred a turn meanwhile has committed and is seen, as in `conversation_next_start`.
    A turn no longer replied (another run finished it) hands on the usual way."""
    deferred_head = Case(When(status=Turn.Status.QUEUED, enqueued_at__isnull=True, then=F("pk")), default=Value(0))
    head = (
        Turn.objects.filter(thread_id=turn.thread_id, status__in=HOLDING_STATUSES)
        .exclude(pk=turn.pk)  # the finishing turn, read as it was before this UPDATE
        .order_by("pk")
        .annotate(deferred_head=deferred_head)
        .values("deferred_head")[:1]
    )
    with transaction.atomic():
        conversation_lock(thread_id=turn.thread_id)
        rows = ledger.turn_mark_delivered_reading(turn=turn, returning=head)
        if rows:
            if rows[0][0]:
                _deferred_start(thread_id=turn.thread_id, head_id=int(rows[0][0]))
            return
    conversation_next_start(thread_id=turn.thread_id)


def _collectable(*, turn: Turn) -> bool:
    if turn.trigger not in COLLECTABLE_TRIGGERS or turn.bot.queue_mode == Bot.QueueMode.FOLLOWUP:
        return False
    return turn.thread.channel in COLLECTING_CHANNELS


def _waiting_claim(*, turn: Turn, reason: str, holding: list[Turn]) -> list[int]:
    """Inside a transaction holding the conversation: the requests queued behind `turn` (never run, addressed),
    oldest first, each claimed for it with a conditional UPDATE (skipped, linked): the ids it won. `holding`: the
    turns of its thread holding the conversation, as read under the same lock."""
    waiting = sorted(
        other.pk
        for other in holding
        if other.pk > turn.pk
        and other.status == Turn.Status.QUEUED
        and other.attempts == 0
        and other.trigger in COLLECTABLE_TRIGGERS
    )
    now = timezone.now()
    return [
        waiting_id
        for waiting_id in waiting
        if Turn.objects.filter(pk=waiting_id, status=Turn.Status.QUEUED, attempts=0).update(
            status=Turn.Status.SKIPPED,
            finished_at=now,
            error=reason.format(turn_id=turn.pk),
            channel_state=JSONKeysReplaced("channel_state", {"collected_into": turn.pk}),
        )
    ]


def turns_collect(*, turn: Turn, holding: list[Turn]) -> list[int]:
    """Inside the first claim's transaction (conversation locked): the turns this one answers along with its own
    request (queue mode collect or steer), oldest first, each marked skipped and linked to it. `holding`: the other
    turns holding the conversation, as the claim read them under the lock."""
    if not _collectable(turn=turn):
        return []
    waiting = _waiting_claim(turn=turn, reason=COLLECTED_REASON, holding=holding)
    if not waiting:
        return []
    Turn.objects.filter(pk=turn.pk).update(channel_state=JSONKeysReplaced("channel_state", {"collected": waiting}))
    turn.channel_state = {**(turn.channel_state or {}), "collected": waiting}
    logger.info("turn collects waiting messages", extra={"turn_id": turn.pk, "collected": waiting})
    return waiting


def turns_steer(*, turn: Turn) -> list[int]:
    """Queue mode steer, at a tool-call boundary of the running `turn`: the requests that queued behind it since
    it started, claimed into it (skipped, linked; the claim is the conditional UPDATE, so across processes each
    is answered once) and added to its `collected` and `steered` lists. The ids taken, oldest first."""
    if turn.bot.queue_mode != Bot.QueueMode.STEER or not _collectable(turn=turn):
        return []
    with transaction.atomic():
        conversation_lock(thread_id=turn.thread_id)
        # Only a turn still running takes messages in (a run that lost its claim to another must not).
        state = Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).values_list("channel_state", flat=True)
        current = next(iter(state), None)
        if current is None:
            return []
        queued = Turn.objects.filter(thread_id=turn.thread_id, pk__gt=turn.pk, status=Turn.Status.QUEUED)
        holding = list(queued.only("pk", "status", "attempts", "trigger"))
        taken = _waiting_claim(turn=turn, reason=STEERED_REASON, holding=holding)
        if not taken:
            return []
        keys = {
            "collected": [*(current or {}).get("collected", []), *taken],
            "steered": [*(current or {}).get("steered", []), *taken],
        }
        Turn.objects.filter(pk=turn.pk).update(channel_state=JSONKeysReplaced("channel_state", keys))
    turn.channel_state = {**(turn.channel_state or {}), **keys}
    logger.info("turn steered by waiting messages", extra={"turn_id": turn.pk, "steered": taken})
    return taken


def steer_hook(*, turn: Turn, texts: Callable[[list[Turn]], list[str]]) -> Callable[[], list[str]] | None:
    """For the tool loop (queue mode steer): at each tool-call boundary, take the waiting requests into the
    running turn and return their texts (`texts`, the channel's). A re-run of the turn (its previous run died
    after steering) gets the requests steered before at its first boundary, after the replayed calls, since its
    recorded prompt does not hold them. None when the turn does not steer."""
    if turn.bot.queue_mode != Bot.QueueMode.STEER or not _collectable(turn=turn):
        return None
    given: set[int] = set()

    def steer() -> list[str]:
        turns_steer(turn=turn)
        new = [turn_id for turn_id in steered_turn_ids(turn=turn) if turn_id not in given]
        if not new:
            return []
        given.update(new)
        return texts(list(Turn.objects.filter(pk__in=new).select_related("user_message", "bot").order_by("pk")))

    return steer


def steered_turn_ids(*, turn: Turn) -> list[int]:
    """The requests taken into the turn while it ran (steer), oldest first; a subset of `collected`."""
    return [int(turn_id) for turn_id in (turn.channel_state or {}).get("steered", [])]


def collected_turn_ids(*, turn: Turn) -> list[int]:
    """The turns whose requests this one answers besides its own (oldest first)."""
    return [int(turn_id) for turn_id in (turn.channel_state or {}).get("collected", [])]
