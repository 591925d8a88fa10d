"""Agent turns: one ledger row per (bot, source message), run idempotently (T2, T3).

`turn_get_or_create` relies on the unique constraint (bot, source_message_id): a duplicate trigger finds the
existing turn, never a second one. `turn_run` runs in three short steps so no row lock is held while the
model thinks:

1. claim (one transaction, turn row locked): return the stored reply if the turn already has one; store the
   user_message if the turn has none (same transaction as linking it, so a re-run after a crash never stores
   it twice); mark running, count the attempt;
2. call the provider (no transaction open);
3. finish (one transaction, turn row locked): store the agent_reply only if the turn still has none — a
   conditional update on `reply_message IS NULL`, so two racing runs (a redelivered task next to a slow
   one) still leave exactly one reply.

A worker killed between 1 and 3 leaves a `running` turn with no reply; the redelivered task (acks_late)
runs it again from step 1 and it completes once. A run left `running` that nothing redelivers (its task
acked after a database outage or a hard time limit) is re-enqueued by `turns_sweep`, a bounded number of
times. Transient provider errors raise `TurnRetryLater` with the backoff to wait (the Celery task retries);
permanent ones mark the turn failed with a readable error.
Delivery is the caller's: REST and automation replies are delivered by being stored; the Feishu bridge
sends the returned message itself (idempotent by its uuid).
"""

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.llm.base import (
    ChatMessage,
    CompletionRequest,
    CompletionResult,
    LLMError,
    PermanentError,
    RateLimitedError,
    TransientError,
    Usage,
)
from agents.llm.registry import llm_client_for, request_as_sent
from agents.models import Bot, LLMModel, Message, Thread, Turn
from agents.selectors import context_messages_list
from agents.services.threads import message_create

logger = logging.getLogger(__name__)

# A model whose window is undeclared (context_window = 0) is assumed to have this many tokens.
DEFAULT_CONTEXT_WINDOW_TOKENS = 8192
# Tokens are estimated without a tokenizer (none is shipped for every provider): ASCII characters / 4 (rounded
# up), every other character one token (CJK runs about one character per token, and Feishu groups write
# Chinese: counting it at 1/4 would overflow the window fourfold), plus a small per-message overhead.
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
# Transient failures: at most this many attempts in all, waiting base·2^(n-1) seconds (capped) in between.
TURN_MAX_ATTEMPTS = 5
TURN_BACKOFF_BASE_SECONDS = 2.0
TURN_BACKOFF_MAX_SECONDS = 300.0
EMPTY_ANSWER_RETRY_NOTE = "Your previous answer was empty. Restating the requirement:"

FINISHED_STATUSES = frozenset({Turn.Status.DELIVERED, Turn.Status.FAILED, Turn.Status.GATED, Turn.Status.SKIPPED})


class TurnRetryLater(Exception):
    """A transient provider failure: run the turn again after `countdown_seconds` (the task retries)."""

    def __init__(self, message: str, *, countdown_seconds: float, attempt: int) -> None:
        super().__init__(message)
        self.countdown_seconds = countdown_seconds
        self.attempt = attempt


# --- Pure rules (no ORM) -----------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    ascii_chars = len(text.encode("ascii", "ignore"))
    return -(-ascii_chars // CHARS_PER_TOKEN) + (len(text) - ascii_chars) + MESSAGE_OVERHEAD_TOKENS


def output_reserve_tokens(*, context_window: int, max_output_tokens: int) -> int:
    """The answer's share of the window, at most a quarter of it; the request asks for no more than this.

    Providers refuse a request whose input plus requested output exceeds the window, so the output the request
    asks for and the output the context budget leaves room for must be the same number.
    """
    return min(max_output_tokens, (context_window or DEFAULT_CONTEXT_WINDOW_TOKENS) // 4)


def context_budget_tokens(*, context_window: int, max_output_tokens: int, fixed_tokens: int) -> int:
    """Tokens left for context messages: the window minus the answer's reserve and the fixed parts."""
    window = context_window or DEFAULT_CONTEXT_WINDOW_TOKENS
    output_reserve = output_reserve_tokens(context_window=context_window, max_output_tokens=max_output_tokens)
    return max(window - output_reserve - fixed_tokens, 0)


def context_messages_upper_bound(*, context_window: int) -> int:
    """How many context messages could fit at most: each one costs at least MESSAGE_OVERHEAD_TOKENS."""
    return (context_window or DEFAULT_CONTEXT_WINDOW_TOKENS) // MESSAGE_OVERHEAD_TOKENS


def context_fit(*, messages: list[ChatMessage], budget_tokens: int) -> list[ChatMessage]:
    """The newest contiguous run of `messages` (oldest first) whose estimated tokens fit the budget (T3)."""
    kept: list[ChatMessage] = []
    used = 0
    for message in reversed(messages):
        cost = estimate_tokens(message.content)
        if used + cost > budget_tokens:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    return kept


def backoff_seconds(*, attempt: int, retry_after_seconds: float | None = None) -> float:
    delay = min(TURN_BACKOFF_BASE_SECONDS * 2 ** (attempt - 1), TURN_BACKOFF_MAX_SECONDS)
    if retry_after_seconds:
        delay = max(delay, min(retry_after_seconds, TURN_BACKOFF_MAX_SECONDS))
    return delay


@dataclass(frozen=True)
class PrimaryInput:
    request: CompletionRequest
    context_message_ids: list[int]
    dropped_context_messages: int
    budget_tokens: int


def primary_input_build(
    *,
    model: LLMModel,
    system_prompt: str,
    context: list[Message],
    user_prompt: str,
    activation_contract: str = "",
) -> PrimaryInput:
    """System prompt + the newest context messages that fit + the new prompt (+ the contract, never trimmed)."""
    fixed = [ChatMessage(role="user", content=text) for text in (user_prompt, activation_contract) if text]
    system = [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else []
    budget = context_budget_tokens(
        context_window=model.context_window,
        max_output_tokens=model.max_output_tokens,
        fixed_tokens=sum(estimate_tokens(message.content) for message in (*system, *fixed)),
    )
    candidates = [
        ChatMessage(
            role="assistant" if message.kind == Message.Kind.AGENT_REPLY else "user",
            # What the model saw when the message was new (T3): its rendered prompt when it has one.
            content=message.prompt or message.content,
        )
        for message in context
    ]
    fitted = context_fit(messages=candidates, budget_tokens=budget)
    kept_ids = [message.pk for message in context[len(context) - len(fitted) :]] if fitted else []
    request = CompletionRequest(
        model=model.name,
        messages=(*system, *fitted, *fixed),
        max_output_tokens=output_reserve_tokens(
            context_window=model.context_window, max_output_tokens=model.max_output_tokens
        ),
    )
    return PrimaryInput(
        request=request,
        context_message_ids=kept_ids,
        dropped_context_messages=len(context) - len(fitted),
        budget_tokens=budget,
    )


# --- Services ----------------------------------------------------------------------------------------------


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


def _claim(*, turn_id: int, user_content: str, user_prompt: str, author: str) -> Turn | Message | None:
    """Step 1: the stored reply when there is one, None for a finished turn without one, else the claimed turn."""
    with transaction.atomic():
        turn = (
            Turn.objects.select_for_update(of=("self",))
            .select_related("reply_message", "user_message", "thread", "bot__primary_model__provider")
            .get(pk=turn_id)
        )
        if turn.reply_message is not None:
            return turn.reply_message
        if turn.status in FINISHED_STATUSES:
            return None
        # A `running` turn is claimed again on purpose: turns_sweep re-enqueues runs left running past the task's
        # hard time limit, and the finish step's conditional update still keeps exactly one reply.
        fields = ["status", "attempts", "started_at", "claimed_at"]
        if turn.user_message is None and (user_content or user_prompt):
            turn.user_message = message_create(
                thread=turn.thread,
                kind=Message.Kind.USER_MESSAGE,
                content=user_content or user_prompt,
                prompt=user_prompt if user_prompt and user_prompt != user_content else "",
                author=author,
            )
            fields.append("user_message")
        turn.status = Turn.Status.RUNNING
        turn.attempts += 1
        turn.claimed_at = timezone.now()
        turn.started_at = turn.started_at or turn.claimed_at
        turn.save(update_fields=fields)
        return turn


def _record_attempt(*, turn: Turn, outcome: str, started: float, error: str = "", retry_in: float | None = None):
    entry = {
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


def _fail(*, turn: Turn, error: str, history: list, model_input: dict) -> None:
    Turn.objects.filter(pk=turn.pk, reply_message__isnull=True).update(
        status=Turn.Status.FAILED,
        error=error,
        retry_history=history,
        model_input=model_input,
        finished_at=timezone.now(),
    )
    logger.warning(
        "turn failed",
        extra={"turn_id": turn.pk, "bot": turn.bot.slug, "attempts": turn.attempts, "error": error},
    )


def _complete_with_contract(*, client, request: CompletionRequest, activation_contract: str) -> CompletionResult:
    """One call; when the contract demands a message and the answer is empty, exactly one more (P9)."""
    result = client.complete(request)
    if result.text.strip() or not activation_contract:
        return result
    restated = ChatMessage(role="user", content=f"{EMPTY_ANSWER_RETRY_NOTE}\n{activation_contract}")
    retry = client.complete(
        CompletionRequest(
            model=request.model,
            messages=(*request.messages, restated),
            tools=request.tools,
            forced_tool=request.forced_tool,
            max_output_tokens=request.max_output_tokens,
            temperature=request.temperature,
        )
    )
    return CompletionResult(
        text=retry.text,
        tool_calls=retry.tool_calls,
        usage=Usage(
            input_tokens=result.usage.input_tokens + retry.usage.input_tokens,
            output_tokens=result.usage.output_tokens + retry.usage.output_tokens,
        ),
        raw_finish_reason=retry.raw_finish_reason,
    )


def turn_run(
    *, turn: Turn, user_content: str = "", user_prompt: str = "", author: str = "", activation_contract: str = ""
) -> Message | None:
    """Run the turn once more if it needs it; the reply (stored), or None when the turn ended without one.

    Idempotent: a turn that already has a reply returns it without calling the model. Raises
    `TurnRetryLater` after a transient provider error while attempts remain.
    """
    claimed = _claim(turn_id=turn.pk, user_content=user_content, user_prompt=user_prompt, author=author)
    if not isinstance(claimed, Turn):
        turn.refresh_from_db()
        return claimed
    turn = claimed
    model = turn.bot.primary_model
    started = time.monotonic()

    # Only messages older than the turn's own user message are context, and no more of them than could fit
    # the window: the thread's length never decides what a turn loads.
    context = context_messages_list(
        thread=turn.thread,
        before_id=turn.user_message.pk if turn.user_message is not None else None,
        limit=context_messages_upper_bound(context_window=model.context_window),
    )
    if turn.user_message is not None:
        prompt = user_prompt or turn.user_message.prompt or turn.user_message.content
    else:
        prompt = user_prompt or user_content
    primary = primary_input_build(
        model=model,
        system_prompt=turn.bot.system_prompt,
        context=context,
        user_prompt=prompt,
        activation_contract=activation_contract,
    )
    model_input: dict = {
        "provider": model.provider.name,
        "kind": model.provider.kind,
        "model": model.name,
        "context_message_ids": primary.context_message_ids,
        "dropped_context_messages": primary.dropped_context_messages,
        "context_budget_tokens": primary.budget_tokens,
        "messages": [{"role": message.role, "content": message.content} for message in primary.request.messages],
    }

    try:
        if not turn.bot.is_enabled:
            raise PermanentError(f"The bot {turn.bot.slug} is disabled.")
        if not (model.is_enabled and model.provider.is_enabled):
            raise PermanentError(f"The model {model} or its provider {model.provider.name} is disabled.")
        client = llm_client_for(model=model)
        model_input["request"] = request_as_sent(client=client, request=primary.request)
        called = time.monotonic()
        try:
            result = _complete_with_contract(
                client=client, request=primary.request, activation_contract=activation_contract
            )
        except SoftTimeLimitExceeded as exc:
            # The task's soft limit hit mid-call (a slow provider, SDK retries, the P9 second call): a transient
            # fault like a timeout. Uncaught, the task failed, the message was acked and the turn stayed running.
            raise TransientError("The provider call ran past the task's soft time limit.") from exc
    except LLMError as exc:
        error = f"{type(exc).__name__}: {exc.message}"
        if exc.retryable and turn.attempts < TURN_MAX_ATTEMPTS:
            retry_after = exc.retry_after_seconds if isinstance(exc, RateLimitedError) else None
            countdown = backoff_seconds(attempt=turn.attempts, retry_after_seconds=retry_after)
            history = _record_attempt(turn=turn, outcome="retry", started=started, error=error, retry_in=countdown)
            Turn.objects.filter(pk=turn.pk, reply_message__isnull=True).update(
                status=Turn.Status.QUEUED, error=error, retry_history=history, model_input=model_input
            )
            logger.info(
                "turn will retry",
                extra={"turn_id": turn.pk, "attempt": turn.attempts, "countdown_seconds": countdown, "error": error},
            )
            raise TurnRetryLater(error, countdown_seconds=countdown, attempt=turn.attempts) from exc
        if exc.retryable:
            error = f"Gave up after {turn.attempts} attempts. Last error: {error}"
        history = _record_attempt(turn=turn, outcome="failed", started=started, error=error)
        _fail(turn=turn, error=error, history=history, model_input=model_input)
        return None

    model_duration_ms = int((time.monotonic() - called) * 1000)
    if not result.text.strip():
        error = "The model answered with no text."
        history = _record_attempt(turn=turn, outcome="failed", started=started, error=error)
        _fail(turn=turn, error=error, history=history, model_input=model_input)
        return None

    usage = {
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "model": model.name,
        "provider": model.provider.name,
        "model_duration_ms": model_duration_ms,
        "finish_reason": result.raw_finish_reason,
    }
    history = _record_attempt(turn=turn, outcome="ok", started=started)
    with transaction.atomic():
        # The conditional UPDATE is the guard: on PostgreSQL a concurrent finisher's UPDATE waits for this row
        # lock, then re-checks `reply_message IS NULL` and matches nothing.
        reply = message_create(
            thread=turn.thread,
            kind=Message.Kind.AGENT_REPLY,
            content=result.text,
            author=turn.bot.name,
            usage=usage,
        )
        won = Turn.objects.filter(pk=turn.pk, reply_message__isnull=True).update(
            reply_message=reply,
            status=Turn.Status.DELIVERED,
            usage=usage,
            model_input=model_input,
            retry_history=history,
            error="",
            finished_at=timezone.now(),
        )
        if not won:
            # Another run of this turn stored its reply first: drop ours (rolled back with this transaction).
            transaction.set_rollback(True)
    if not won:
        return Turn.objects.select_related("reply_message").get(pk=turn.pk).reply_message
    logger.info(
        "turn delivered",
        extra={
            "turn_id": turn.pk,
            "bot": turn.bot.slug,
            "thread_id": turn.thread_id,
            "attempts": turn.attempts,
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "model_duration_ms": model_duration_ms,
        },
    )
    return reply


# --- REST chat -------------------------------------------------------------------------------------------

REST_MESSAGE_MAX_CHARS = 32000


def rest_message_post(*, thread: Thread, content: str, author: str = "") -> tuple[Message, Turn]:
    """REST chat: store the user message (mask from the thread, V4), create its turn, run it after commit."""
    with transaction.atomic():
        message = message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=content, author=author)
        turn, _ = turn_get_or_create(
            bot=thread.bot,
            thread=thread,
            trigger=Turn.Trigger.REST,
            source_message_id=f"rest:{message.pk}",
            user_message=message,
        )
        transaction.on_commit(lambda: turn_enqueue(turn_id=turn.pk))
    return message, turn


def turn_enqueue(*, turn_id: int) -> bool:
    """Queue `turn_run_task`, stamping `enqueued_at`; False (logged, stamp cleared) when the broker cannot take it.

    `turns_sweep` retries a refused enqueue a minute later and a taken one only after the broker's redelivery
    interval (see there).
    """
    from kombu.exceptions import OperationalError

    from agents.tasks import turn_run_task

    stamp = timezone.now()
    # Stamped before the send, so no worker can claim the turn before the stamp exists.
    Turn.objects.filter(pk=turn_id).update(enqueued_at=stamp)
    try:
        turn_run_task.delay(turn_id)
    except OperationalError as exc:
        Turn.objects.filter(pk=turn_id, enqueued_at=stamp).update(enqueued_at=None)
        logger.warning("turn enqueue failed; the sweeper will retry", extra={"turn_id": turn_id, "error": str(exc)})
        return False
    return True


# REST turns still queued, never attempted, this long after they were created, whose enqueue the broker refused
# (enqueued_at null), lost their enqueue (broker down).
TURN_SWEEP_AFTER_SECONDS = 60
TURN_SWEEP_BATCH = 500
# A run claimed longer ago than the task's hard time limit plus this margin is dead (see turns_sweep).
TURN_RUNNING_MARGIN_SECONDS = 60
# A turn left running is re-enqueued at most this many times; the next sweep fails it.
TURN_MAX_SWEEPS = 3


def broker_redelivery_seconds() -> float:
    """How long a healthy broker may still hold a turn's task: the Redis transport's visibility timeout.

    Why this interval and not a fixed minute: with acks_late, a task a worker took but has not acknowledged is
    handed out again only after visibility_timeout, and a busy broker's queue legitimately holds a task for a
    while. Re-enqueueing a turn whose enqueue is younger than this would put a second copy next to one the
    broker still holds; both could run at once and each would call (and pay) the model, only one reply being
    kept. Past it, a copy the broker still held would have been redelivered by now, so the turn's task is most
    likely lost (a broker restart without persistence, a purge). A duplicate remains possible (a backlog
    longer than the interval) and stays harmless to the ledger: turn_run is idempotent and keeps one reply.
    The stamp is renewed on every re-enqueue, so one turn is re-enqueued at most once per interval.
    """
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return float(options.get("visibility_timeout", 3600))  # kombu's Redis default: one hour


def running_stale_seconds() -> float:
    """How long after its last claim a `running` turn is certainly not being run any more.

    The hard time limit kills the task (CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT acks it: never redelivered), so
    past the limit plus a margin no run of that claim is alive. Without a limit, the redelivery interval.
    """
    limit = getattr(settings, "CELERY_TASK_TIME_LIMIT", None) or broker_redelivery_seconds()
    return float(limit) + TURN_RUNNING_MARGIN_SECONDS


def turns_sweep(*, older_than_seconds: float = TURN_SWEEP_AFTER_SECONDS) -> int:
    """Re-enqueue REST turns whose task was lost or left them running; the number re-enqueued.

    - queued, never attempted: the broker refused the enqueue (enqueued_at null) more than `older_than_seconds`
      after the turn was created, or took it longer ago than it could still be holding it
      (`broker_redelivery_seconds`);
    - running: claimed longer ago than `running_stale_seconds` (a database outage or a bug after the task was
      acknowledged; a worker lost where acks_late did not redeliver), and not re-enqueued since that claim
      within the redelivery interval. turn_run claims such a turn again and still stores one reply. After
      TURN_MAX_SWEEPS such re-enqueues the turn is failed with a readable error.

    Every re-enqueue re-stamps enqueued_at, so a pass never re-enqueues a turn the previous one just did.
    Feishu turns have the bridge's own sweeper; automation runs are created inside their task; queued turns
    waiting for a Celery retry have attempts > 0 and are left to it.
    """
    now = timezone.now()
    redelivered_before = now - timedelta(seconds=broker_redelivery_seconds())
    refused = Q(enqueued_at__isnull=True, queued_at__lt=now - timedelta(seconds=older_than_seconds))
    queued = Q(status=Turn.Status.QUEUED, attempts=0) & (refused | Q(enqueued_at__lt=redelivered_before))
    running = Q(status=Turn.Status.RUNNING, claimed_at__lt=now - timedelta(seconds=running_stale_seconds())) & (
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=F("claimed_at")) | Q(enqueued_at__lt=redelivered_before)
    )
    stale = list(
        Turn.objects.filter(queued | running, trigger=Turn.Trigger.REST, reply_message__isnull=True)
        .order_by("pk")
        .values_list("pk", "status", "sweeps")[:TURN_SWEEP_BATCH]
    )
    enqueued = failed = 0
    for turn_id, status, sweeps in stale:
        if status == Turn.Status.RUNNING and sweeps >= TURN_MAX_SWEEPS:
            failed += _fail_abandoned(turn_id=turn_id, sweeps=sweeps, now=now)
            continue
        if not turn_enqueue(turn_id=turn_id):
            continue
        enqueued += 1
        if status == Turn.Status.RUNNING:
            Turn.objects.filter(pk=turn_id).update(sweeps=F("sweeps") + 1)
            logger.warning("running turn re-enqueued", extra={"turn_id": turn_id, "sweeps": sweeps + 1})
    if stale:
        logger.info("turns swept", extra={"found": len(stale), "enqueued": enqueued, "failed": failed})
    return enqueued


def _fail_abandoned(*, turn_id: int, sweeps: int, now) -> int:
    error = (
        f"The turn was left running and did not finish after {sweeps} re-runs by the sweeper "
        "(each past the task's time limit); giving up."
    )
    failed = Turn.objects.filter(pk=turn_id, status=Turn.Status.RUNNING, reply_message__isnull=True).update(
        status=Turn.Status.FAILED, error=error, finished_at=now
    )
    if failed:
        logger.warning("turn failed", extra={"turn_id": turn_id, "sweeps": sweeps, "error": error})
    return failed
