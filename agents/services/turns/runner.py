"""The one turn pipeline every trigger runs: REST, Feishu mention/reply/DM, discuss, automation (L1, L2, T2).

`turn_run(turn_id=...)` takes the turn through its lifecycle in short steps, so no row lock is held while the
model thinks or a channel talks to Feishu:

1. claim, in conversation order (conversation.turn_claim_in_order: one turn at a time per thread, O1; a turn that
   finds another ahead waits, queued, and the finishing turn starts it); a finished turn is left alone; a
   replied one goes straight to delivery;
2. prepare, on the first claim only (channel.prepare): the prompt and the context decision are recorded with
   the user_message; a re-run sends exactly what was recorded;
3. call the primary model (no transaction open) through the bot's tools (agents.tools: bounded, each call a
   TurnToolCall, never a message; one needing approval pauses the turn, H1), streamed into the channel's sink;
4. store the reply (conditional on `reply_message IS NULL`): status `replied`; two racing runs keep one reply;
5. deliver (channel.deliver, idempotent by its uuids): `delivered`, or a retry later, or `delivery_failed`.

The run works on the one Turn its claim read (the ledger's writes update it in place); only a run that lost a
race to another run of the same turn re-reads the winner's.
A worker killed anywhere leaves a queued, running or replied turn; the redelivered task (acks_late) or the
sweeper (sweep.py) runs it again from step 1 and it completes once. Transient provider and delivery errors
raise `TurnRetryLater` with the backoff to wait (the Celery task retries), a bounded number of times.
Permanent errors, and a poison turn (an error in our own code or data that no retry can fix, e.g. a DataError
storing a message), end the turn failed, once, with a readable error and one line to the chat.
"""

import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError

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
from agents.models import LLMModel, Turn
from agents.services.turns import conversation, ledger
from agents.services.turns.approvals import approval_requested
from agents.services.turns.assembly import PrimaryInput
from agents.services.turns.channels import (
    ConnectionReleasingSink,
    DeliveryPermanent,
    DeliveryRetryable,
    PrepareRetryable,
    Skip,
    StreamSink,
    TurnChannel,
    channel_for,
)
from agents.services.turns.model_input import primary_input
from agents.tools.loop import ApprovalPending, model_call
from agents.tools.turn_tools import ToolServerUnavailableError, turn_tools_run
from core.connections import connection_release
from core.text import storable_text

logger = logging.getLogger(__name__)

EMPTY_ANSWER_RETRY_NOTE = "Your previous answer was empty. Restating the requirement:"

# What turn_run returns (tests, logs, the bench).
OUTCOME_DELIVERED = "delivered"
OUTCOME_DELIVERY_FAILED = "delivery_failed"
OUTCOME_FAILED = "failed"
OUTCOME_SKIPPED = "skipped"
OUTCOME_FINISHED = "already_finished"
OUTCOME_WAITING = "waiting_for_conversation"

# Errors that are not the turn's fault and that a later run may not meet: the database went away. They propagate
# (the task fails, the turn stays open) and the sweeper re-runs the turn; everything else unexpected is poison.
INFRASTRUCTURE_ERRORS = (OperationalError, InterfaceError, SoftTimeLimitExceeded)


def turn_run(*, turn_id: int) -> str:
    """Run the turn once more if it needs it; its outcome. Raises `TurnRetryLater` when a later try may succeed."""
    claimed = conversation.turn_claim_in_order(turn_id=turn_id)
    if claimed is None:
        return OUTCOME_FINISHED
    if isinstance(claimed, str):
        return OUTCOME_WAITING  # the turn ahead of it starts it when it finishes (O1)
    outcome = _run_claimed(turn=claimed)
    if outcome != OUTCOME_DELIVERED:  # a delivered run handed its conversation on with its finish (_deliver)
        # Not after TurnRetryLater: the turn keeps its conversation.
        conversation.conversation_hand_on(turn=claimed, outcome=outcome)
    return outcome


def _run_claimed(*, turn: Turn) -> str:
    channel = channel_for(thread=turn.thread)
    try:
        if turn.reply_message is None:
            replied = _reply_produce(turn=turn, channel=channel)
            if replied is None:
                turn.refresh_from_db(fields=["status"])
                if turn.status == Turn.Status.DELIVERED:  # delivered by another run: handed on as after any end
                    conversation.conversation_hand_on(turn=turn, outcome=str(turn.status))
                return str(turn.status)
            turn = replied  # kept current by the ledger's writes: no re-read before delivery
        return _deliver(turn=turn, channel=channel)
    except (ledger.TurnRetryLater, *INFRASTRUCTURE_ERRORS):
        raise
    except Exception as exc:  # noqa: BLE001 - a poison turn: fail it once, readably, instead of retrying forever
        error = storable_text(f"Internal error ({type(exc).__name__}): {exc}")
        logger.exception("poison turn failed", extra={"turn_id": turn.pk, "error_type": type(exc).__name__})
        if ledger.turn_mark_failed(turn_id=turn.pk, error=error):
            _tell_failed(channel=channel, turn=turn, status=Turn.Status.FAILED)
        elif ledger.turn_mark_delivery_failed(turn=turn, error=error):
            _tell_failed(channel=channel, turn=turn, status=Turn.Status.DELIVERY_FAILED)
        return OUTCOME_FAILED


def _tell_failed(*, channel: TurnChannel, turn: Turn, status: str) -> None:
    """The one-line notice; a notice that cannot go out is logged, never turned into a second failure."""
    try:
        channel.failed(turn=turn, status=status)
    except Exception:  # noqa: BLE001 - the turn's record is written; the notice is best effort
        logger.exception("turn failure notice not sent", extra={"turn_id": turn.pk, "status": status})


def _retry_or_fail(*, turn: Turn, channel: TurnChannel, error: str, history_started: float, retry_after=None, **kw):
    """A transient failure before a reply: retry later while attempts remain, else fail (and tell the chat)."""
    if turn.attempts < ledger.TURN_MAX_ATTEMPTS:
        countdown = ledger.backoff_seconds(attempt=turn.attempts, retry_after_seconds=retry_after)
        history = ledger.attempt_entry(
            turn=turn, outcome="retry", started=history_started, error=error, retry_in=countdown
        )
        ledger.turn_requeue(turn=turn, error=error, history=history, **kw)
        logger.info(
            "turn will retry",
            extra={"turn_id": turn.pk, "attempt": turn.attempts, "countdown_seconds": countdown, "error": error},
        )
        raise ledger.TurnRetryLater(error, countdown_seconds=countdown, attempt=turn.attempts)
    error = f"Gave up after {turn.attempts} attempts. Last error: {error}"
    history = ledger.attempt_entry(turn=turn, outcome="failed", started=history_started, error=error)
    if ledger.turn_mark_failed(turn_id=turn.pk, error=error, history=history, **kw):
        _tell_failed(channel=channel, turn=turn, status=Turn.Status.FAILED)


def _prepare(*, turn: Turn, channel: TurnChannel, started: float) -> Turn | None:
    """Step 2: the recorded prompt; None when the turn ended (skipped or failed)."""
    if turn.user_message is not None:
        return turn
    try:
        prepared = channel.prepare(turn=turn)
    except PrepareRetryable as exc:
        _retry_or_fail(turn=turn, channel=channel, error=storable_text(str(exc)), history_started=started)
        return None
    if isinstance(prepared, Skip):
        if ledger.turn_mark_skipped(turn=turn, reason=prepared.reason) and prepared.notice:
            try:
                channel.notice(turn=turn, text=prepared.notice, purpose="turn_skipped")
            except Exception:  # noqa: BLE001 - see _tell_failed
                logger.exception("turn skip notice not sent", extra={"turn_id": turn.pk})
        return None
    return ledger.turn_prepared_store(
        turn=turn,
        content=prepared.content,
        prompt=prepared.prompt,
        author=prepared.author,
        context_decision_id=prepared.context_decision_id,
        channel_state=prepared.channel_state,
    )


def _complete(
    *,
    turn: Turn,
    channel: TurnChannel,
    client,
    request: CompletionRequest,
    activation_contract: str,
    sink: StreamSink | None,
) -> CompletionResult:
    """The answer through the bot's tools (agents.tools), streamed into the channel's sink when it has one; when
    the contract demands a message and the answer is empty, exactly one more call, without tools (P9)."""
    on_text = sink.text if sink is not None else None
    try:
        result, _calls = turn_tools_run(
            turn=turn,
            client=client,
            request=request,
            on_text=on_text,
            on_tool_step=sink.tool_step if sink is not None else None,
            steer=conversation.steer_hook(
                turn=turn, texts=lambda steered: channel.steered_texts(turn=turn, steered=steered)
            ),
        )
    except ToolServerUnavailableError as exc:
        raise PermanentError(exc.message) from exc
    if not result.text.strip() and activation_contract:
        restated = ChatMessage(role="user", content=f"{EMPTY_ANSWER_RETRY_NOTE}\n{activation_contract}")
        retry = model_call(
            client=client,
            request=CompletionRequest(
                model=request.model,
                messages=(*request.messages, restated),
                tools=request.tools,
                forced_tool=request.forced_tool,
                max_output_tokens=request.max_output_tokens,
                temperature=request.temperature,
            ),
            on_text=on_text,
        )
        usage = Usage(
            input_tokens=result.usage.input_tokens + retry.usage.input_tokens,
            output_tokens=result.usage.output_tokens + retry.usage.output_tokens,
            cached_input_tokens=result.usage.cached_input_tokens + retry.usage.cached_input_tokens,
        )
        result = CompletionResult(retry.text, retry.tool_calls, usage, retry.raw_finish_reason)
    return result


def _reply_produce(*, turn: Turn, channel: TurnChannel) -> Turn | None:
    """Steps 2-4: the turn with its stored reply, or None when the turn ended without one."""
    started = time.monotonic()
    prepared = _prepare(turn=turn, channel=channel, started=started)
    if prepared is None:
        return None
    turn = prepared
    model = turn.bot.primary_model
    activation_contract = channel.activation_contract(turn=turn)
    channel.started(turn=turn)
    primary, model_input = primary_input(
        turn=turn, channel=channel, model=model, activation_contract=activation_contract
    )
    try:
        result, model_duration_ms = _answer(
            turn=turn,
            channel=channel,
            model=model,
            primary=primary,
            activation_contract=activation_contract,
            model_input=model_input,
        )
    except LLMError as exc:
        _model_error_record(turn=turn, channel=channel, exc=exc, started=started, model_input=model_input)
        return None
    except ApprovalPending as pending:  # H1: paused durably; a decision enqueues the turn again
        approval_requested(turn=turn, approval_id=pending.approval_id)
        return None
    return _reply_store(
        turn=turn,
        channel=channel,
        model=model,
        result=result,
        model_duration_ms=model_duration_ms,
        started=started,
        model_input=model_input,
    )


def _answer(
    *,
    turn: Turn,
    channel: TurnChannel,
    model: LLMModel,
    primary: PrimaryInput,
    activation_contract: str,
    model_input: dict,
) -> tuple[CompletionResult, int]:
    """Step 3 (no transaction open): the model's answer and how long it took, in milliseconds. Adds the request
    as sent to `model_input` once the client exists. Raises LLMError, a disabled bot or model included."""
    if not turn.bot.is_enabled:
        raise PermanentError(f"The bot {turn.bot.slug} is disabled.")
    if not (model.is_enabled and model.provider.is_enabled):
        raise PermanentError(f"The model {model} or its provider {model.provider.name} is disabled.")
    client = llm_client_for(model=model)
    model_input["request"] = request_as_sent(client=client, request=primary.recorded_request)
    sink = channel.stream_sink(turn=turn)
    connection_release()  # no database connection held while the model thinks (core.connections, issue 28)
    called = time.monotonic()
    try:
        result = _complete(
            turn=turn,
            channel=channel,
            client=client,
            request=primary.request,
            activation_contract=activation_contract,
            sink=ConnectionReleasingSink(sink) if sink is not None else None,
        )
    except SoftTimeLimitExceeded as exc:
        # The task's soft limit hit mid-call (a slow provider, SDK retries, the P9 second call): a transient
        # fault like a timeout, never a task left failed with the turn running.
        raise TransientError("The provider call ran past the task's soft time limit.") from exc
    return result, int((time.monotonic() - called) * 1000)


def _model_error_record(*, turn: Turn, channel: TurnChannel, exc: LLMError, started: float, model_input: dict) -> None:
    """A model call that failed: retried later while attempts remain when the error is retryable, else failed."""
    error = storable_text(f"{type(exc).__name__}: {exc.message}")  # provider text is outside text (L3)
    if exc.retryable:
        retry_after = exc.retry_after_seconds if isinstance(exc, RateLimitedError) else None
        _retry_or_fail(
            turn=turn,
            channel=channel,
            error=error,
            history_started=started,
            retry_after=retry_after,
            model_input=model_input,
        )
        return
    history = ledger.attempt_entry(turn=turn, outcome="failed", started=started, error=error)
    if ledger.turn_mark_failed(turn_id=turn.pk, error=error, history=history, model_input=model_input):
        _tell_failed(channel=channel, turn=turn, status=Turn.Status.FAILED)


def _reply_store(
    *,
    turn: Turn,
    channel: TurnChannel,
    model: LLMModel,
    result: CompletionResult,
    model_duration_ms: int,
    started: float,
    model_input: dict,
) -> Turn | None:
    """Step 4: store the answer as the turn's one reply (conditional: of two racing runs, one reply is kept);
    an empty answer fails the turn instead. The turn when it has a reply, else None."""
    if not result.text.strip():
        error = "The model answered with no text."
        history = ledger.attempt_entry(turn=turn, outcome="failed", started=started, error=error)
        if ledger.turn_mark_failed(turn_id=turn.pk, error=error, history=history, model_input=model_input):
            _tell_failed(channel=channel, turn=turn, status=Turn.Status.FAILED)
        return None
    usage = {
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cached_input_tokens": result.usage.cached_input_tokens,
        "model": model.name,
        "provider": model.provider.name,
        "model_duration_ms": model_duration_ms,
        "finish_reason": storable_text(result.raw_finish_reason or ""),
    }
    history = ledger.attempt_entry(turn=turn, outcome="ok", started=started)
    reply, won = ledger.turn_reply_store(
        turn=turn, text=result.text, usage=usage, model_input=model_input, history=history
    )
    if won:
        logger.info(
            "turn replied",
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
    return turn if reply is not None else None


def _deliver(*, turn: Turn, channel: TurnChannel) -> str:
    """Step 5: deliver the stored reply through the channel (same uuids every time). The attempt was counted by the
    claim (a turn already replied) or by the reply's store (this run's reply)."""
    attempt = turn.delivery_attempts
    reply = turn.reply_message
    assert reply is not None, f"turn {turn.pk} reached delivery without a stored reply"  # _reply_store ran first
    try:
        try:
            channel.deliver(turn=turn, reply=reply)
        except SoftTimeLimitExceeded as exc:
            raise DeliveryRetryable("The delivery ran past the task's soft time limit.") from exc
    except DeliveryRetryable as exc:
        error = storable_text(f"Delivery failed: {exc}")
        if attempt < ledger.DELIVERY_MAX_ATTEMPTS:
            countdown = ledger.delivery_backoff_seconds(attempt=attempt)
            ledger.turn_delivery_error_note(turn=turn, error=error)
            logger.info(
                "turn delivery will retry",
                extra={"turn_id": turn.pk, "delivery_attempt": attempt, "countdown_seconds": countdown},
            )
            raise ledger.TurnRetryLater(error, countdown_seconds=countdown, attempt=attempt, is_delivery=True) from exc
        error = f"Gave up after {attempt} delivery attempts. Last error: {error}"
        if ledger.turn_mark_delivery_failed(turn=turn, error=error):
            _tell_failed(channel=channel, turn=turn, status=Turn.Status.DELIVERY_FAILED)
        return OUTCOME_DELIVERY_FAILED
    except DeliveryPermanent as exc:
        if ledger.turn_mark_delivery_failed(turn=turn, error=storable_text(f"Delivery refused: {exc}")):
            _tell_failed(channel=channel, turn=turn, status=Turn.Status.DELIVERY_FAILED)
        return OUTCOME_DELIVERY_FAILED
    conversation.turn_delivered_hand_on(turn=turn)  # the finish and the hand-on, in one transaction (issue 28)
    logger.info("turn delivered", extra={"turn_id": turn.pk, "bot": turn.bot.slug, "delivery_attempt": attempt})
    return OUTCOME_DELIVERED
