"""The admin index with the dashboard above the app list: the stock admin's own index view, given the rows."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from console.dashboard.costs import WINDOWS
from console.dashboard.health import OUTCOME_WORDS
from console.dashboard.selectors import BAR_STEP_PX, DAYS, SILENCES, dashboard_rows

# A row is a bot and the numbers of its turns (issue 30, finding 8): the dashboard is shown only to a viewer who
# may see both; admin_view lets every staff user in, whatever their permissions.
DASHBOARD_PERMISSIONS = ("agents.view_bot", "agents.view_turn")


def admin_index(request: HttpRequest) -> HttpResponse:
    may_see_bots = request.user.has_perms(DASHBOARD_PERMISSIONS)
    return admin.site.index(
        request,
        extra_context={
            "dashboard_rows": dashboard_rows(now=timezone.now()) if may_see_bots else None,
            "dashboard_days": DAYS,
            "dashboard_silences": [(outcome, OUTCOME_WORDS[outcome]) for outcome in SILENCES],
            "dashboard_outcome_words": OUTCOME_WORDS,
            "dashboard_chart_width": DAYS * BAR_STEP_PX,
            "dashboard_cost_windows": [name for name, _span in WINDOWS],
        },
    )
