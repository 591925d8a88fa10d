"""Writes to Provider rows other than the admin form's."""

from datetime import datetime

from agents.models import Provider
from core.text import storable_text

LAST_TEST_DETAIL_MAX = 500


def provider_last_test_record(*, provider_id: int, ok: bool, detail: str, at: datetime) -> None:
    """Store a connection test's outcome on its provider (shown in the provider list and on the dashboard).

    The detail is a provider's error text or the model's answer: outside text, made storable and capped."""
    Provider.objects.filter(pk=provider_id).update(
        last_test_ok=ok, last_test_at=at, last_test_detail=storable_text(detail)[:LAST_TEST_DETAIL_MAX]
    )
