"""The discuss probe gate (P1-P8): one cheap forced `decide` call before any expensive work.

`probe_gate_run` is called by the bridge's discuss wake (feishu.discuss.fire) and never by DMs, REST or
@-addressed turns (P1). Every exit writes exactly one structured log record and one ProbeJudgement row.

Exit table (reference §1.6; gate_ran False = no gate, the turn runs as without the feature):

    cause                               gate_ran  outcome             level   when
    mode_off                            False     disabled            DEBUG   probe mode "off" (ours)
    not_configured                      False     disabled            DEBUG   inherit, owner has no title model
                                                                              (or no profile row at all: our choice)
    fallback_lookup_failed              False     disabled            WARN    inherit, the profile read failed
    inherited_model_cannot_call_tools   False     disabled            WARN    inherit, title model without tool calls
    config_unreadable                   True      error               WARN    model, the model read failed; or an
                                                                              unknown mode value (our choice); or
                                                                              the judge's api key cannot be
                                                                              decrypted (model or inherit)
    model_unresolvable                  True      error               WARN    the judge is gone or disabled, or its
                                                                              provider is; "model" with no model
                                                                              (SET_NULL after a delete: our choice).
                                                                              Inherited too: asymmetry kept
    configured_model_cannot_call_tools  True      error               WARN    model, judge without tool calls
    model_window_too_small              True      error               WARN    window cannot hold a minimal request
    no_valid_window                     True      error               WARN    nothing admissible to judge
    credentials_unresolvable            True      error               WARN    no client for the provider
    model_call_failed                   True      error               WARN    provider error, timeout, overflow
                                                                              (retryable ones retry the wake)
    judged                              True      act / no_action     INFO    a verdict
                                                  missing / malformed WARN
"""

import hashlib
import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from agents.llm.base import ChatMessage, CompletionResult, LLMClient, LLMError
from agents.llm.registry import client_for_settings, provider_settings
from agents.models import Bot, LLMModel, Thread, Turn
from core.text import storable_text
from probe.models import ProbeJudgement
from probe.rules import (
    PROBE_TIMEOUT_SECONDS,
    QUIET_CAUSES,
    Cause,
    Outcome,
    admit_window,
    context_budget,
    judge_request_build,
    seen_mark,
    since_last_verdict,
    verdict_parse,
)
from probe.selectors import gate_config_get

logger = logging.getLogger(__name__)

LOG_MESSAGE = "discuss probe"
JUDGEMENT_RETENTION_DAYS = 30
# How long the place of a topic's last verdict is remembered; when it is gone the judge sees the whole transcript.
SEEN_MARK_SECONDS = 24 * 3600


def _seen_mark_key(*, bot: Bot, topic: str) -> str | None:
    """Per bot and topic; a caller that names no topic has nothing remembered (the judge sees everything)."""
    digest = hashlib.sha256(topic.encode("utf-8", "surrogatepass")).hexdigest()[:32]  # a bounded, safe cache key
    return f"probe:seen:{bot.pk}:{digest}" if topic else None


@dataclass(frozen=True)
class GateResult:
    """The gate's answer. `gate_ran` False: no gate, proceed as before the feature; True: only `activated` runs."""

    gate_ran: bool
    activated: bool
    reason: str
    cause: str
    outcome: str
    judgement: ProbeJudgement
    # A provider fault another try may fix (timeouts, 5xx, rate limits): the wake retries with backoff (P10).
    retryable: bool = False

    @property
    def proceeds(self) -> bool:
        """Whether the caller runs the primary: activated by the judge, or no gate at all."""
        return self.activated or not self.gate_ran


def _judge_client(model: LLMModel) -> LLMClient:
    """The provider's client with the judge's own limits: 45 s at most, and no SDK retries.

    One judge call is one request: a provider fault fails this judgement closed at once and the discuss wake
    retries later with backoff (P10), instead of the SDK retrying inside a 45 s budget.
    """
    settings = provider_settings(provider=model.provider)
    settings = replace(settings, timeout_seconds=min(settings.timeout_seconds, PROBE_TIMEOUT_SECONDS), max_retries=0)
    return client_for_settings(settings)


def model_label(model: LLMModel | None) -> str:
    """How a judgement names its judge for good: "provider / model", or "" when no model was resolved."""
    if model is None:
        return ""
    return f"{model.provider.name} / {model.name}"[: ProbeJudgement._meta.get_field("probe_model_name").max_length]


def log_level_for(*, cause: str, gate_ran: bool, outcome: str, has_error: bool) -> int:
    """Level by cause, not by whether the gate ran (seed review A4): only deliberate configuration is quiet."""
    if cause in QUIET_CAUSES:
        return logging.DEBUG
    if has_error or not gate_ran or outcome in (Outcome.ERROR, Outcome.MISSING, Outcome.MALFORMED):
        return logging.WARNING
    return logging.INFO


class _JudgementSubject(TypedDict):
    """What every exit's judgement is about: the keyword arguments `probe_gate_run` passes to each `_finish`."""

    bot: Bot
    thread: Thread | None
    turn: Turn | None
    wake_id: int | None


def _finish(
    *,
    bot: Bot,
    thread: Thread | None,
    turn: Turn | None,
    wake_id: int | None,
    model: LLMModel | None,
    gate_ran: bool,
    cause: str,
    outcome: str = "",
    activated: bool = False,
    reason: str = "",
    error: str = "",
    retryable: bool = False,
    input_tokens: int = 0,
    output_tokens: int = 0,
    duration_ms: int = 0,
) -> GateResult:
    """Every exit goes through here: one log record and one row, the same fields on every path (P8)."""
    if not gate_ran:
        outcome = Outcome.DISABLED
    elif not outcome:
        outcome = Outcome.ERROR  # a gate that ran and has no verdict failed closed
    activated = gate_ran and activated and outcome == Outcome.ACT
    # The judge's reason and a provider's error are outside text (L3): made storable here, the one exit every path
    # takes, so the row and the log record are written whatever the model answered.
    reason, error = storable_text(reason), storable_text(error)
    judgement = ProbeJudgement.objects.create(
        bot=bot,
        thread=thread,
        turn=turn,
        wake_id=wake_id,
        gate_ran=gate_ran,
        cause=cause,
        outcome=outcome,
        activated=activated,
        reason=reason,
        error=error[:2000],
        model=model,
        probe_mode=bot.discuss_probe_mode,
        probe_model_name=model_label(model),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        duration_ms=duration_ms,
    )
    fields: dict[str, object] = {
        "bot_id": bot.pk,
        "session_id": str(thread.pk) if thread is not None else "",
        "model_id": str(model.pk) if model is not None else "",
        "cause": cause,
        "outcome": outcome,
        "gate_ran": gate_ran,
        "activated": activated,
        "wake_id": wake_id,
        "judgement_id": judgement.pk,
    }
    if reason:
        fields["reason"] = reason
    if error:
        fields["error"] = error
    level = log_level_for(cause=cause, gate_ran=gate_ran, outcome=outcome, has_error=bool(error))
    logger.log(level, LOG_MESSAGE, extra=fields)
    return GateResult(
        gate_ran=gate_ran,
        activated=activated,
        reason=reason,
        cause=cause,
        outcome=outcome,
        judgement=judgement,
        retryable=retryable,
    )


def probe_gate_run(
    *,
    bot: Bot,
    transcript: list[ChatMessage],
    thread: Thread | None = None,
    turn: Turn | None = None,
    wake_id: int | None = None,
    topic: str = "",
) -> GateResult:
    """Judge whether a discuss-mode bot should speak on this wake, before any expensive work (P1-P8).

    `topic` names the conversation the transcript is of (the wake's chat and topic root): the judge then sees
    only what changed there since its last verdict, plus a short tail (probe.rules.since_last_verdict).

    Fails closed (gate_ran, not activated) on every fault once a judge is configured; stays ungated
    (gate_ran False) only where the reference's exit table says so.
    """
    common: _JudgementSubject = {"bot": bot, "thread": thread, "turn": turn, "wake_id": wake_id}
    config = gate_config_get(bot=bot)
    if config.cause:
        return _finish(**common, model=config.model, gate_ran=config.gate_ran, cause=config.cause, error=config.error)
    model = config.model
    assert model is not None  # a config without a cause always carries its judge
    budget = context_budget(window=model.context_window)
    if budget is None:
        return _finish(
            **common,
            model=model,
            gate_ran=True,
            cause=Cause.MODEL_WINDOW_TOO_SMALL,
            error=f"context window {model.context_window} cannot hold a minimal judge request",
        )
    seen_key = _seen_mark_key(bot=bot, topic=topic)
    if seen_key is not None:
        transcript = since_last_verdict(messages=transcript, mark=cache.get(seen_key, ""))
    window = admit_window(messages=transcript, budget=budget)
    if not window:
        return _finish(**common, model=model, gate_ran=True, cause=Cause.NO_VALID_WINDOW)
    request = judge_request_build(model_name=model.name, bot_name=bot.name, window=window)
    try:
        client = _judge_client(model)
    except (LLMError, ImproperlyConfigured, ValueError, KeyError) as exc:
        return _finish(
            **common, model=model, gate_ran=True, cause=Cause.CREDENTIALS_UNRESOLVABLE, error=type(exc).__name__
        )
    started = time.monotonic()
    try:
        result: CompletionResult = client.complete(request)
    except LLMError as exc:
        return _finish(
            **common,
            model=model,
            gate_ran=True,
            cause=Cause.MODEL_CALL_FAILED,
            error=f"{type(exc).__name__}: {exc.message}",
            retryable=exc.retryable,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    duration_ms = int((time.monotonic() - started) * 1000)
    verdict = verdict_parse(tool_calls=result.tool_calls)
    if seen_key is not None and verdict.outcome in (Outcome.ACT, Outcome.NO_ACTION):
        # Only a verdict marks messages as judged: after an error, a missing or malformed answer the next probe
        # sees them again.
        cache.set(seen_key, seen_mark(messages=transcript), timeout=SEEN_MARK_SECONDS)
    return _finish(
        **common,
        model=model,
        gate_ran=True,
        cause=Cause.JUDGED,
        outcome=verdict.outcome,
        activated=verdict.activated,
        reason=verdict.reason,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        duration_ms=duration_ms,
    )


def judgements_prune(*, now: datetime | None = None, days: int = JUDGEMENT_RETENTION_DAYS) -> int:
    """Delete judgements older than the retention (30 days); returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted, _ = ProbeJudgement.objects.filter(created_at__lt=cutoff).delete()
    if deleted:
        logger.info("probe judgements pruned", extra={"deleted": deleted, "cutoff": cutoff.isoformat()})
    return deleted
