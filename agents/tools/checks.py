"""System checks of the tool loop's settings (run by `manage.py check`, at every start of a worker or server).

A turn runs inside one Celery task: connecting to its servers, the tool budget and then the final answer must
all end before the task's soft time limit, or the limit would cut every long tool turn short. The per-turn
fit to the provider's own timeouts is agents.tools.budget.budget_within_soft_limit; this check catches the
settings that could never fit, whatever the provider.
"""

from django.conf import settings
from django.core.checks import Error, register

from agents.tools.budget import SOFT_LIMIT_MARGIN_SECONDS, task_soft_limit_seconds, tool_budget_max_seconds

TOOL_BUDGET_OVER_SOFT_LIMIT = "agents.E001"


@register()
def tool_budget_fits_the_soft_limit(app_configs=None, **kwargs) -> list[Error]:
    soft_limit = task_soft_limit_seconds()
    budget = float(settings.AMUX_TOOL_TIME_BUDGET_SECONDS)
    if soft_limit is None or budget <= tool_budget_max_seconds():
        return []
    connect = float(settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS)
    return [
        Error(
            f"AMUX_TOOL_TIME_BUDGET_SECONDS ({budget:g}) + AMUX_TOOL_CONNECT_TIMEOUT_SECONDS ({connect:g}) + "
            f"{SOFT_LIMIT_MARGIN_SECONDS:g} s leave no time for the final answer within "
            f"CELERY_TASK_SOFT_TIME_LIMIT ({soft_limit:g}).",
            hint="Lower the tool budget or the connect timeout, or raise the task's soft time limit (and "
            "CELERY_TASK_TIME_LIMIT with it).",
            id=TOOL_BUDGET_OVER_SOFT_LIMIT,
        )
    ]
