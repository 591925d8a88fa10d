"""Retention of the bridge's own records.

An inbound event must outlive Feishu's retry window (7.1 h) for the dedupe on (bot, message_id) to hold (F2);
the hub keeps it as long as the thread context it fed (AMUX_CONTEXT_RETENTION_DAYS, 30 days), then drops it
with the finished discuss wakes and catch-ups of the same age. Outbound deliveries are kept: a reply to an old bot message is
routed back through them. The Feishu calls a sandbox bot recorded for the playground (feishu/outbound/sandbox.py,
one row per send and card update) are only worth a look while a conversation is fresh: they go after
AMUX_SANDBOX_CALL_RETENTION_DAYS (7 days).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from feishu.models import Arbitration, CatchupRun, DiscussWake, InboundEvent, SandboxCall

FINISHED_INBOUND_STATUSES = (InboundEvent.Status.DONE, InboundEvent.Status.IGNORED, InboundEvent.Status.FAILED)
FINISHED_WAKE_STATUSES = (DiscussWake.Status.DONE, DiscussWake.Status.FAILED)


def bridge_records_prune(*, now: datetime | None = None) -> dict[str, int]:
    """Delete finished inbound events and discuss wakes older than the retention, and sandbox calls older than
    theirs; pending work is never touched."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.AMUX_CONTEXT_RETENTION_DAYS)
    events, _ = InboundEvent.objects.filter(received_at__lt=cutoff, status__in=FINISHED_INBOUND_STATUSES).delete()
    wakes, _ = DiscussWake.objects.filter(updated_at__lt=cutoff, status__in=FINISHED_WAKE_STATUSES).delete()
    # B3's picks go with the wakes they decided (their candidates went with their wakes, by cascade).
    arbitrations, _ = Arbitration.objects.filter(created_at__lt=cutoff).delete()
    catchups, _ = CatchupRun.objects.filter(requested_at__lt=cutoff, finished_at__isnull=False).delete()
    sandbox_cutoff = now - timedelta(days=settings.AMUX_SANDBOX_CALL_RETENTION_DAYS)
    sandbox_calls, _ = SandboxCall.objects.filter(created_at__lt=sandbox_cutoff).delete()
    return {
        "inbound_events": events,
        "discuss_wakes": wakes,
        "arbitrations": arbitrations,
        "catchups": catchups,
        "sandbox_calls": sandbox_calls,
    }
