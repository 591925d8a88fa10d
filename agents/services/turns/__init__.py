"""Agent turns: one lifecycle for every trigger (ARCHITECTURE L1-L3, T2, T3).

- `ledger`: the Turn row and its status transitions (queued -> running -> replied -> delivered |
  delivery_failed | failed, + skipped), get_or_create, claim, the attempt caps;
- `assembly`: token estimation and the primary model's input (pure);
- `channels`: the port each channel (rest, automation, and the bridge's feishu) implements;
- `runner`: the one pipeline every trigger runs (`turn_run`);
- `rest`: REST's entry point (`rest_message_post`);
- `sweep`: the one sweeper.
"""

from agents.services.enqueue import turn_enqueue
from agents.services.turns.assembly import (
    CHARS_PER_TOKEN,
    DEFAULT_CONTEXT_WINDOW_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    NO_ATTACHMENTS,
    PrimaryInput,
    TurnAttachments,
    context_budget_tokens,
    context_fit,
    context_messages_upper_bound,
    estimate_tokens,
    output_reserve_tokens,
    primary_input_build,
)
from agents.services.turns.channels import (
    DeliveryPermanent,
    DeliveryRetryable,
    Prepared,
    PrepareRetryable,
    Skip,
    TurnChannel,
    automation_channel,
    channel_for,
    channel_register,
)
from agents.services.turns.ledger import (
    DELIVERY_MAX_ATTEMPTS,
    FINISHED_STATUSES,
    TURN_BACKOFF_BASE_SECONDS,
    TURN_BACKOFF_MAX_SECONDS,
    TURN_MAX_ATTEMPTS,
    TurnRetryLater,
    backoff_seconds,
    turn_get_or_create,
    turn_mark_skipped,
)
from agents.services.turns.rest import REST_MESSAGE_MAX_CHARS, rest_message_post
from agents.services.turns.runner import EMPTY_ANSWER_RETRY_NOTE, turn_run
from agents.services.turns.sweep import (
    TURN_MAX_SWEEPS,
    TURN_RUNNING_MARGIN_SECONDS,
    TURN_SWEEP_AFTER_SECONDS,
    TURN_SWEEP_BATCH,
    broker_redelivery_seconds,
    running_stale_seconds,
    turns_sweep,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_CONTEXT_WINDOW_TOKENS",
    "DELIVERY_MAX_ATTEMPTS",
    "EMPTY_ANSWER_RETRY_NOTE",
    "FINISHED_STATUSES",
    "MESSAGE_OVERHEAD_TOKENS",
    "REST_MESSAGE_MAX_CHARS",
    "TURN_BACKOFF_BASE_SECONDS",
    "TURN_BACKOFF_MAX_SECONDS",
    "TURN_MAX_ATTEMPTS",
    "TURN_MAX_SWEEPS",
    "TURN_RUNNING_MARGIN_SECONDS",
    "TURN_SWEEP_AFTER_SECONDS",
    "TURN_SWEEP_BATCH",
    "DeliveryPermanent",
    "DeliveryRetryable",
    "PrepareRetryable",
    "Prepared",
    "NO_ATTACHMENTS",
    "PrimaryInput",
    "TurnAttachments",
    "Skip",
    "TurnChannel",
    "TurnRetryLater",
    "backoff_seconds",
    "broker_redelivery_seconds",
    "automation_channel",
    "channel_for",
    "channel_register",
    "context_budget_tokens",
    "context_fit",
    "context_messages_upper_bound",
    "estimate_tokens",
    "output_reserve_tokens",
    "primary_input_build",
    "rest_message_post",
    "running_stale_seconds",
    "turn_enqueue",
    "turn_get_or_create",
    "turn_mark_skipped",
    "turn_run",
    "turns_sweep",
]
