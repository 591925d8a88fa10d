"""How long a turn's tools may run: everything must end inside the Celery task's soft time limit (pure arithmetic
over settings, no ORM, so the system check and the admin's form read it without loading the tool machinery).

A turn runs inside one Celery task: connecting to its servers, the tool budget and then the final answer must all
end SOFT_LIMIT_MARGIN_SECONDS before the task's soft limit, or the limit would cut the answer short.
"""

import math

from django.conf import settings

# Kept free after the final answer, inside the soft limit: storing the reply and the ledger's writes.
SOFT_LIMIT_MARGIN_SECONDS = 5.0


def task_soft_limit_seconds() -> float | None:
    """The Celery task's soft time limit (the turn runs inside one task), or None when there is none."""
    limit = getattr(settings, "CELERY_TASK_SOFT_TIME_LIMIT", None)
    return float(limit) if limit else None


def tool_budget_max_seconds() -> float:
    """The largest tool budget any bot may have: connecting and the margin must still fit the soft limit."""
    soft_limit = task_soft_limit_seconds()
    if soft_limit is None:
        return float("inf")
    return soft_limit - float(settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS) - SOFT_LIMIT_MARGIN_SECONDS


def budget_within_soft_limit(
    *, budget_seconds: float, soft_limit_seconds: float | None, elapsed_seconds: float, final_call_seconds: float
) -> float:
    """The tool budget cut so that what ran already, the budget and the final answer fit the soft limit.

    The final answer is asked for once the budget is used up; it must still finish before the task's soft
    limit, with SOFT_LIMIT_MARGIN_SECONDS to spare for storing it. A budget cut to 0 means: no tool step, the
    model answers at once without tools (and is told why).
    """
    if soft_limit_seconds is None:
        return budget_seconds
    room = soft_limit_seconds - elapsed_seconds - final_call_seconds - SOFT_LIMIT_MARGIN_SECONDS
    # Whole seconds: the model is told the budget it had ("the time budget of 53 s").
    return max(0.0, min(budget_seconds, float(math.floor(room))))
