"""GET /metrics: Prometheus text, for a scraper with the token (or from an allowed address when none is set)."""

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from console.metrics.collector import DatabaseCollector
from core.metrics import process_counters_registry

BEARER = "Bearer "


def scrape_allowed(request: HttpRequest) -> bool:
    """With a token set, only `Authorization: Bearer <token>` (compared in constant time); without one, only a
    scraper at an allowed address."""
    token = settings.AMUX_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        return given.startswith(BEARER) and hmac.compare_digest(given[len(BEARER) :].encode(), token.encode())
    return request.META.get("REMOTE_ADDR", "") in settings.AMUX_METRICS_ALLOWED_IPS


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        reason = "a valid bearer token" if settings.AMUX_METRICS_TOKEN else "a scraper at an allowed address"
        return HttpResponse(
            f"/metrics needs {reason} (AMUX_METRICS_TOKEN, AMUX_METRICS_ALLOWED_IPS).\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    registry = process_counters_registry()
    registry.register(DatabaseCollector(now=timezone.now()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
