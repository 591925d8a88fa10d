"""The admin index with the dashboard above the app list: the stock admin's own index view, given the rows."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from console.dashboard.selectors import BAR_STEP_PX, DAYS, SILENCES, dashboard_rows


def admin_index(request: HttpRequest) -> HttpResponse:
    return admin.site.index(
        request,
        extra_context={
            "dashboard_rows": dashboard_rows(now=timezone.now()),
            "dashboard_days": DAYS,
            "dashboard_silences": SILENCES,
            "dashboard_chart_width": DAYS * BAR_STEP_PX,
        },
    )
